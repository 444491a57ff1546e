"""The downstream part of the audit report: how well a linear probe on a backbone's frozen features does on a
labelled set, clean and under attack — the accuracies every task-agnostic score of the report is judged against.

Per backbone: features of the training images once, a multinomial logistic-regression probe on them
(:func:`src.divergence_radius.downstream.fit_linear_probe`, standardised features, L2 penalty ``C``), clean accuracy on the
held-out test images, and robust accuracy of backbone + probe under untargeted PGD in pixel space at each ``ε``
(no random start, so the number does not depend on batching; the SynBench paper evaluates its ε-robust probes with
PGD, Ko et al., ICML 2024, arXiv:2210.02989, §4.3). The probe is trained on clean features: this measures the
robustness a backbone gives a standard probe, at a CPU cost of seconds; the ε-robust *training* of §4.3 is
``python -m src.train model.epsilon=...`` (minutes per backbone).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from ..attacks import pgd_attack
from ..attacks.naming import pgd_label
from ..backbones import Backbone
from ..divergence_radius.downstream import fit_linear_probe
from ..features import FeatureExtractor, extractor_options
from ..utils import format_eps

__all__ = ["probe_accuracies", "robust_key"]


def robust_key(eps: float, steps: int, norm: str) -> str:
    """Column name of a robust accuracy, e.g. ``robust_acc_pgd5_l2_0p05`` (the attack named as in training logs)."""
    return f"robust_acc_{pgd_label(steps)}_{norm}_{format_eps(eps)}"


def probe_accuracies(
    backbone: Backbone,
    train: tuple[Tensor, Tensor],
    test: tuple[Tensor, Tensor],
    *,
    epsilons: Sequence[float] = (0.05,),
    steps: int = 5,
    norm: str = "l2",
    C: float = 1.0,
    device: Any = "cpu",
    max_batch: int = 128,
    extractor: Mapping[str, Any] | None = None,
) -> dict[str, float]:
    """{"clean_acc": ..., robust_key(ε): ...} of a linear probe on ``backbone``'s features of ``train`` images
    (N, 3, H, W) in [0, 1] with labels (N,), scored on ``test``. ``extractor``: further FeatureExtractor options of
    the feature forwards (:func:`src.features.extractor_options`; its ``max_batch`` wins over ``max_batch``, which
    also batches the PGD attack)."""
    (x_tr, y_tr), (x_te, y_te) = train, test
    for name, (x, y) in (("train", train), ("test", test)):
        if x.dim() != 4 or y.shape != (x.shape[0],) or x.shape[0] < 1:
            raise ValueError(
                f"{name} must be images (N, C, H, W) with labels (N,), got {tuple(x.shape)}, {tuple(y.shape)}"
            )
    if any(float(e) < 0 for e in epsilons):
        raise ValueError(f"epsilons must be >= 0, got {list(epsilons)}")
    backbone = backbone.eval().to(device)
    forward = {"max_batch": max_batch, **extractor_options(extractor)}
    extract = FeatureExtractor(backbone.embed, device=device, **forward)
    head = fit_linear_probe(extract(x_tr).cpu(), y_tr.cpu(), C=C).to(device)
    y_te = y_te.to(device)
    z_te = extract(x_te).to(device)
    out = {"clean_acc": float((head(z_te).argmax(1) == y_te).double().mean())}

    def forward(x: Tensor) -> Tensor:
        return head(backbone.embed(x))

    for eps in epsilons:
        correct = 0
        for xb, yb in zip(x_te.split(max_batch), y_te.split(max_batch)):
            xb = xb.to(device)
            adv = pgd_attack(forward, xb, yb, eps=float(eps), norm=norm, steps=steps, random_start=False)
            with torch.no_grad():
                correct += int((forward(adv).argmax(1) == yb).sum())
        out[robust_key(float(eps), steps, norm)] = correct / x_te.shape[0]
    return out
