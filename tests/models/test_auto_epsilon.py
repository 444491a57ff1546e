"""epsilon=auto: the probe picks argmax_eps SynBench-Score of its backbone before fitting (paper section 4.3)."""

from __future__ import annotations

import lightning as L
import pytest
import torch
from torch.utils.data import DataLoader

from src.backbones import create_backbone
from src.metrics.synbench_score import synbench_distributed
from src.models import RobustLinearProbe
from src.models.auto_epsilon import guided_epsilon
from src.synbench import SynBenchConfig

from .test_robust_probe import _Toy

AUTO = dict(
    input_size=8, s_values=(0.5, 1.0, 2.0, 3.0), n_train=300, n_test=150, eps=(0.0, 0.2, 0.4), a_T=(0.6,), chunk_size=50
)


def _fit_one_step(model: RobustLinearProbe) -> None:
    """One training step on the toy data (epsilon=auto runs in setup, before it)."""
    L.Trainer(
        max_epochs=1,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        limit_train_batches=1,
        inference_mode=False,
    ).fit(model, DataLoader(_Toy(size=8), batch_size=16))


def test_auto_epsilon_is_the_synbench_argmax() -> None:
    torch.manual_seed(0)
    bb = create_backbone("timm:test_efficientnet", pretrained=False)
    model = RobustLinearProbe(
        backbone=bb,
        num_classes=2,
        epsilon="auto",
        auto_epsilon={**AUTO, "scale": 0.5},
        attack={"steps": 1},
        scheduler=None,
    )
    assert model.epsilon is None
    _fit_one_step(model)
    fields = {k: v for k, v in AUTO.items() if k != "input_size"}
    _, res = synbench_distributed(bb.eval().embed, (3, 8, 8), SynBenchConfig(**fields))
    scores = {e: res.score(e) for e in fields["eps"]}
    assert model.auto_epsilon_scores == scores  # one process, the same loop on the same samples: bitwise equal
    assert model.epsilon == pytest.approx(0.5 * max(scores, key=scores.get))


def test_the_first_threshold_with_a_positive_score_decides() -> None:
    """guided_epsilon: argmax at the first a_T (in the given order) with a positive score; ties -> the smallest ε;
    every score 0 -> (0.0, None): nothing ranks ε."""
    assert guided_epsilon({0.7: {0.0: 0.1, 0.2: 0.3, 0.4: 0.3}}) == (0.2, 0.7)
    assert guided_epsilon({0.7: {0.0: 0.0, 0.2: 0.0}, 0.6: {0.0: 0.01, 0.2: 0.1}}) == (0.2, 0.6)
    assert guided_epsilon({0.6: {0.0: 0.01, 0.2: 0.1}, 0.7: {0.0: 0.5, 0.2: 0.0}}) == (0.2, 0.6)  # order, not value
    assert guided_epsilon({0.7: {0.4: 0.0, 0.2: 0.0}, 0.6: {0.4: 0.0, 0.2: 0.0}}) == (0.0, None)
    assert guided_epsilon({}) == (0.0, None)


def test_all_zero_scores_give_standard_probing_with_a_warning(caplog) -> None:
    """A threshold no representation reaches (a_T = 0.99 on a random tiny net): every score is 0, ε = 0 and the log
    says why and what to change (not a silent argmax of a tie)."""
    torch.manual_seed(0)  # the first test's backbone (its features pass SynBench's eigenvalue check)
    model = RobustLinearProbe(
        backbone=create_backbone("timm:test_efficientnet", pretrained=False),
        num_classes=2,
        epsilon="auto",
        auto_epsilon={**AUTO, "a_T": (0.99,)},
        attack={"steps": 1},
        scheduler=None,
    )
    with caplog.at_level("WARNING", logger="repbench"):
        _fit_one_step(model)
    assert model.epsilon == 0.0 and model.auto_epsilon_a_T is None
    assert set(model.auto_epsilon_scores.values()) == {0.0}
    assert "the scores do not rank eps; eps = 0 (standard probing). Lower auto_epsilon.a_T" in caplog.text


def test_bad_scale_is_an_error() -> None:
    model = RobustLinearProbe(
        backbone=create_backbone("timm:test_efficientnet", pretrained=False),
        num_classes=2,
        epsilon="auto",
        auto_epsilon={**AUTO, "scale": 0.0},
        scheduler=None,
    )
    with pytest.raises(ValueError, match="scale"):
        L.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_progress_bar=False, inference_mode=False).fit(
            model, DataLoader(_Toy(size=8), batch_size=16)
        )


def test_defaults_are_the_yaml_block() -> None:
    from omegaconf import OmegaConf

    from src.models.auto_epsilon import auto_epsilon_defaults
    from src.utils.resources import config_dir

    CONFIGS = config_dir()

    yaml = OmegaConf.to_container(OmegaConf.load(CONFIGS / "model" / "robust_probe.yaml"))["auto_epsilon"]
    assert auto_epsilon_defaults() == yaml
    fields = {k: v for k, v in yaml.items() if k not in ("input_size", "scale")}
    SynBenchConfig(**fields)  # a valid protocol


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_auto_epsilon_on_a_gpu_trainer() -> None:
    """In ``setup`` Lightning already reports the GPU as ``module.device`` while the weights are on the CPU: the
    SynBench run of epsilon=auto must not mix the two (it failed with "Encountered different devices" before)."""
    torch.manual_seed(0)
    model = RobustLinearProbe(
        backbone=create_backbone("timm:test_efficientnet", pretrained=False),
        num_classes=2,
        epsilon="auto",
        auto_epsilon={**AUTO, "scale": 0.5},
        attack={"steps": 1},
        scheduler=None,
    )
    L.Trainer(
        max_epochs=1, accelerator="gpu", devices=1, logger=False, enable_checkpointing=False,
        enable_progress_bar=False, limit_train_batches=1, inference_mode=False,
    ).fit(model, DataLoader(_Toy(size=8), batch_size=16))  # fmt: skip
    assert model.epsilon is not None and set(model.auto_epsilon_scores) == set(AUTO["eps"])
