"""The report's downstream probe accuracies (src.report.downstream)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from src.backbones import create_backbone
from src.images.digits import load_digits_tensors, upsample_digits
from src.report.downstream import probe_accuracies, robust_key


@pytest.fixture(scope="module")
def data():
    images, labels = load_digits_tensors()
    x = upsample_digits(images[:90], 32)
    return (x[:60], labels[:60]), (x[60:], labels[60:90])


def test_clean_accuracy_is_the_probes_and_attacks_only_lower_it(data) -> None:
    from sklearn.linear_model import LogisticRegression

    torch.manual_seed(0)
    bb = create_backbone("timm:test_efficientnet", pretrained=False)
    (x_tr, y_tr), (x_te, y_te) = data
    out = probe_accuracies(bb, (x_tr, y_tr), (x_te, y_te), epsilons=(0.0, 0.5), steps=3)
    assert set(out) == {"clean_acc", robust_key(0.0, 3, "l2"), robust_key(0.5, 3, "l2")}
    # independent: the same logistic regression fitted by scikit-learn on standardised features, its own predictions
    with torch.no_grad():
        z_tr, z_te = bb.embed(x_tr).double().numpy(), bb.embed(x_te).double().numpy()
    mu, sd = z_tr.mean(0), z_tr.std(0) + 1e-12
    pred = LogisticRegression(C=1.0, max_iter=2000).fit((z_tr - mu) / sd, y_tr.numpy()).predict((z_te - mu) / sd)
    assert out["clean_acc"] == pytest.approx(float(np.mean(pred == y_te.numpy())), abs=1 / 30 + 1e-12)  # <= 1 image
    assert out[robust_key(0.0, 3, "l2")] == out["clean_acc"]  # eps = 0: PGD returns the clean images
    assert out[robust_key(0.5, 3, "l2")] <= out["clean_acc"]


def test_bad_inputs_are_named(data) -> None:
    bb = create_backbone("timm:test_efficientnet", pretrained=False)
    (x_tr, y_tr), test = data
    with pytest.raises(ValueError, match="train must be images"):
        probe_accuracies(bb, (x_tr, y_tr[:5]), test)
    with pytest.raises(ValueError, match="epsilons must be >= 0"):
        probe_accuracies(bb, (x_tr, y_tr), test, epsilons=(-0.1,))
