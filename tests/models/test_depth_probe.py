"""DepthProbe (issue 28): the depth head on a frozen backbone trains with ``python -m src.train
experiment=depth_synthetic``, its checkpoint (weights_only) resumes and ``python -m src.eval`` reproduces its test
RMSE; the DepthRMSE torchmetric is the mean per-image RMSE."""

from __future__ import annotations

import pytest
import torch

from src.eval import evaluate
from src.metrics import DepthRMSE
from src.models import DepthProbe
from src.train import train
from src.utils.checkpoint import load_module, read_checkpoint
from tests.cli.conftest import compose_cfg

# tiny and fast: a random tiny timm backbone, 16-px scenes, a few batches, no monitors
TINY = [
    "experiment=depth_synthetic",
    "backbone=timm_tiny_random",
    "data.image_size=16",
    "data.num_train=32",
    "data.num_val=16",
    "data.num_test=16",
    "data.batch_size=16",
    "model.n_bins=16",
    "trainer.max_epochs=1",
    "callbacks.divergence_radius=null",
    "callbacks.rich_progress_bar=null",
    "logger=csv",
]


def test_depth_rmse_metric_is_the_mean_per_image_rmse() -> None:
    """Two updates: images with constant errors 1, 2 and 4 (one per map) → (1 + 2 + 4) / 3, not the pooled RMSE."""
    target = torch.full((3, 1, 4, 4), 5.0)
    pred = target + torch.tensor([1.0, 2.0, 4.0])[:, None, None, None]
    metric = DepthRMSE()
    metric.update(pred[:1], target[:1])
    metric.update(pred[1:], target[1:])
    assert float(metric.compute()) == pytest.approx(7 / 3, abs=1e-12)


@pytest.mark.timeout(600)
def test_train_resume_and_eval(tmp_path) -> None:
    """Train one epoch (test on the best checkpoint), evaluate last.ckpt with src.eval: the same weights on the same
    seeded test scenes give the same test/rmse (1e-6: float32 sums in another order at most); resume to epoch 2."""
    metrics, objects = train(compose_cfg("train.yaml", TINY, tmp_path / "train"))
    assert isinstance(objects["model"], DepthProbe) and metrics["val/rmse"] > 0 and metrics["test/rmse"] > 0
    last = tmp_path / "train" / "checkpoints" / "last.ckpt"
    assert any(k.startswith("head.") for k in read_checkpoint(last)["state_dict"])  # torch.load(weights_only=True)
    data = [o for o in TINY if o.startswith(("experiment=", "backbone=", "data."))]
    out = evaluate(compose_cfg("eval.yaml", data + [f"ckpt_path='{last}'"], tmp_path / "eval"))
    assert out["test/rmse"] == pytest.approx(metrics["test/rmse"], abs=1e-6)
    again = [o for o in TINY if o != "trainer.max_epochs=1"] + ["trainer.max_epochs=2", f"ckpt_path='{last}'"]
    _, objects = train(compose_cfg("train.yaml", again, tmp_path / "resume"))
    assert objects["trainer"].current_epoch == 2 and objects["trainer"].global_step == 4  # 2 batches per epoch


def test_checkpoint_rebuilds_the_same_model(tmp_path) -> None:
    """load_module (weights_only) rebuilds the head: the same depth maps as the module that was saved."""
    import lightning as L

    torch.manual_seed(0)
    model = DepthProbe({"name": "timm:test_vit", "pretrained": False}, image_size=32, n_bins=8).eval()
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_progress_bar=False, enable_model_summary=False,
                        max_epochs=0)  # fmt: skip
    trainer.strategy.connect(model)
    path = tmp_path / "m.ckpt"
    trainer.save_checkpoint(path)
    again = load_module(path).eval()
    x = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        assert torch.equal(again(x), model(x)) and again(x).shape == (2, 1, 32, 32)


def test_classification_batches_are_refused_naming_the_fix() -> None:
    model = DepthProbe({"name": "timm:test_efficientnet", "pretrained": False}, image_size=16, n_bins=8)
    with pytest.raises(ValueError, match=r"depth maps \(N, 1, H, W\).*data=synthetic_depth"):
        model.training_step((torch.rand(2, 3, 16, 16), torch.tensor([0, 1]), torch.arange(2)), 0)
