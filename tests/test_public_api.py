"""The documented public API (README) imports and has the documented shapes (issues #2 and #3)."""

from __future__ import annotations

import inspect


def test_backbone_api() -> None:
    from src.backbones import Backbone, create_backbone, list_backbones

    bb = create_backbone("embedded:efficientnet_lite0")
    assert isinstance(bb, Backbone) and callable(bb.embed) and bb.embed_dim == 1280
    assert {"name", "embed_dim", "input_size", "mean", "std"} <= set(vars(bb)) | set(dir(bb))
    assert "embedded:efficientnet_lite0" in list_backbones("embedded")


def test_synbench_api() -> None:
    from src.synbench import SynBenchConfig, SynBenchResult, synbench
    from src.synbench.bayes import evaluate_representation, robust_bayes_direction
    from src.synbench.score import synbench_score
    from src.synbench.theory import expected_scaled_bound, reference_accuracy

    assert list(inspect.signature(synbench).parameters)[:1] == ["feature_fn"]
    for name in ("input_shape", "config", "device", "progress"):
        assert name in inspect.signature(synbench).parameters
    for name in ("score", "table", "to_dict", "figure", "curves", "best_eps"):
        assert callable(getattr(SynBenchResult, name))
    assert list(inspect.signature(robust_bayes_direction).parameters)[:4] == ["mu_tilde", "cov", "eps", "relative"]
    assert list(inspect.signature(evaluate_representation).parameters)[:6] == [
        "train_z",
        "train_y",
        "test_z",
        "test_y",
        "eps_list",
        "eps_mode",
    ]
    assert list(inspect.signature(synbench_score).parameters)[:6] == ["a", "b", "a_ref", "b_ref", "a_T", "integral"]
    assert SynBenchConfig().eps_mode == "relative" and callable(reference_accuracy) and callable(expected_scaled_bound)
    from src.synbench import ProxyAccuracy, RejectionResult, rejection_test  # issue 28 item 2: Table 1, App. A.19

    assert SynBenchConfig(proxy=ProxyAccuracy()).proxy.eps == 0.2 and callable(RejectionResult.from_dict)
    assert list(inspect.signature(rejection_test).parameters)[:2] == ["images", "config"]


def test_training_and_callback_api() -> None:
    import lightning as L
    import torchmetrics

    from callbacks import SynBenchCallback
    from src.metrics import SynBenchScore
    from src.models import RobustLinearProbe, SupervisedPretraining

    assert issubclass(RobustLinearProbe, L.LightningModule) and issubclass(SupervisedPretraining, L.LightningModule)
    assert issubclass(SynBenchCallback, L.Callback) and issubclass(SynBenchScore, torchmetrics.Metric)
