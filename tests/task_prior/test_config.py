"""TaskPriorConfig: every option of the probe study with its one default, checked when built; the callback, the
probe module and the torchmetric take their defaults from it (and from the convention it resolves)."""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from src.callbacks import TaskPriorCallback
from src.metrics.task_prior import TaskPriorMoments
from src.task_prior import CONVENTIONS, DEFAULT_CONVENTION, TaskPriorConfig
from src.task_prior.report import DEFAULT_IMAGE_SIZE, DEFAULT_NUM_IMAGES

CONFIGS = Path(__file__).resolve().parents[2] / "configs"


def test_defaults_resolve_to_the_default_convention() -> None:
    cfg = TaskPriorConfig()
    assert cfg.convention == DEFAULT_CONVENTION and cfg.settings == CONVENTIONS[DEFAULT_CONVENTION]
    assert cfg.prior_backbone == "embedded:efficientnet_lite2" and cfg.quantiles == (0.1, 0.5, 0.9)
    assert TaskPriorConfig(convention="paper", eval_scale="frobenius").settings.eval_scale == "frobenius"  # wins
    assert TaskPriorConfig(convention="authors").settings.temperature == CONVENTIONS["authors"].temperature
    assert TaskPriorConfig(temperature=1).temperature == 1.0 and isinstance(
        TaskPriorConfig(temperature=1).temperature, float
    )


@pytest.mark.parametrize(
    "fields,error,match",
    [
        (
            {"convention": "mine"},
            ValueError,
            r"convention must be one of \('paper', 'authors', 'repbench'\), got 'mine'",
        ),
        ({"temperature": 0.0}, ValueError, r"temperature must be a finite number > 0, got 0.0; .*0\.01"),
        ({"sample_temperature": -1.0}, ValueError, r"sample_temperature must be a finite number > 0, got -1.0"),
        ({"temperature": "0.01"}, TypeError, r"temperature must be a finite number > 0, got '0.01' \(str\)"),
        ({"eval_scale": "fro"}, ValueError, r"eval_scale must be one of \('frobenius', 'none'\), got 'fro'"),
        ({"sampler_scale": "l2"}, ValueError, r"sampler_scale must be one of \('frobenius', 'none'\), got 'l2'"),
        ({"num_tasks": 0}, ValueError, r"num_tasks must be an integer >= 1, got 0"),
        ({"task_classes": 1}, ValueError, r"task_classes must be an integer >= 2, got 1"),
        ({"test_fraction": 1.0}, ValueError, r"test_fraction must be in \(0, 1\), got 1.0; e.g. test_fraction=0.3"),
        ({"epochs": 0}, ValueError, r"epochs must be an integer >= 1, got 0"),
        ({"lr": float("nan")}, ValueError, r"lr must be a finite number > 0, got nan; e.g. lr=0.01"),
        ({"weight_decay": -1e-4}, ValueError, r"weight_decay must be a finite number >= 0, got -0.0001"),
        ({"quantiles": [0.5, 1.5]}, ValueError, r"quantiles must lie in \[0, 1\], got \[0.5, 1.5\]"),
        ({"block_size": 0}, ValueError, r"block_size must be an integer >= 1, got 0"),
        ({"prior_backbone": {"pretrained": True}}, ValueError, r"prior_backbone must be one backbone, .*registry name"),
        ({"seed": -1}, ValueError, r"seed must be an integer >= 0, got -1"),
    ],
)
def test_bad_fields_are_refused_naming_the_field(fields, error, match) -> None:
    with pytest.raises(error, match=match):
        TaskPriorConfig(**fields)


def test_mapping_and_overrides() -> None:
    assert TaskPriorConfig.coerce({"num_tasks": 4}) == TaskPriorConfig(num_tasks=4)
    assert TaskPriorConfig.coerce(TaskPriorConfig(num_tasks=4), seed=3) == TaskPriorConfig(num_tasks=4, seed=3)
    assert TaskPriorConfig.coerce() == TaskPriorConfig()
    with pytest.raises(
        TypeError, match=r"unknown TaskPriorConfig option\(s\) \['probe_epochs'\]; the options .* are num_tasks, "
    ):
        TaskPriorConfig.coerce({"probe_epochs": 3})
    with pytest.raises(TypeError, match=r"config must be a TaskPriorConfig, a mapping of its fields"):
        TaskPriorConfig.coerce([("num_tasks", 4)])


def _default(fn, name):
    return inspect.signature(fn).parameters[name].default


def test_callback_probe_and_metric_take_their_defaults_from_one_place() -> None:
    """No second statement of T, the scales, the prior backbone, the block size or the task count: the signatures
    hold None (= the convention's) or the config's own default object."""
    from src.models import TaskPriorProbe

    cfg, conv = TaskPriorConfig(), CONVENTIONS[DEFAULT_CONVENTION]
    for fn in (TaskPriorCallback.__init__, TaskPriorProbe.__init__, TaskPriorMoments.__init__):
        for name in ("temperature", "eval_scale", "prior_scale"):
            assert _default(fn, name) is None, (fn, name)
    for fn in (TaskPriorProbe.__init__, TaskPriorMoments.__init__):
        assert _default(fn, "convention") == cfg.convention and _default(fn, "block_size") == cfg.block_size
    assert _default(TaskPriorProbe.__init__, "prior_backbone") == cfg.prior_backbone
    # the callback takes config= (TaskPriorConfig) and keywords whose None means the config's value
    for name in ("convention", "block_size", "prior_backbone", "config"):
        assert _default(TaskPriorCallback.__init__, name) is None, name
    default_cb = TaskPriorCallback()
    assert default_cb.options == cfg and default_cb.block_size == cfg.block_size
    assert default_cb.prior_backbone == cfg.prior_backbone
    for name in ("num_tasks", "task_classes", "lr", "weight_decay", "quantiles", "seed"):
        assert _default(TaskPriorProbe.__init__, name) == getattr(cfg, name), name
    cb = TaskPriorCallback(prior_backbone=None, prior_features=torch.zeros(4, 2))
    metric = TaskPriorMoments(4, 2, 2)
    for obj in (cb, metric):
        assert (obj.temperature, obj.eval_scale, obj.prior_scale) == (
            conv.temperature,
            conv.eval_scale,
            conv.prior_scale,
        )
    paper = CONVENTIONS["paper"]
    cb = TaskPriorCallback(prior_backbone=None, prior_features=torch.zeros(4, 2), convention="authors", temperature=0.5)
    assert (cb.temperature, cb.eval_scale, cb.prior_scale) == (0.5, "frobenius", "frobenius")  # explicit T wins
    assert TaskPriorMoments(4, 2, 2, convention="paper").prior_scale == paper.prior_scale


def test_callback_refuses_a_bad_convention_or_scale_when_built() -> None:
    with pytest.raises(ValueError, match=r"convention must be one of"):
        TaskPriorCallback(prior_backbone=None, prior_features=torch.zeros(4, 2), convention="mine")
    with pytest.raises(ValueError, match=r"prior_scale must be one of \('frobenius', 'none'\), got 'raw'"):
        TaskPriorCallback(prior_backbone=None, prior_features=torch.zeros(4, 2), prior_scale="raw")
    with pytest.raises(ValueError, match=r"prior_backbone must be one backbone"):
        TaskPriorCallback(prior_backbone={"pretrained": True})


def test_cli_block_holds_exactly_the_config_fields_at_their_defaults() -> None:
    """configs/task_prior.yaml repeats the defaults (so that `task_prior.<field>=...` overrides need no `+`): every
    field is there, nothing else, each equal to the dataclass default (seed: null = the run's seed of
    configs/run_options, which equals it); data.* equal the core's image defaults."""
    yaml = OmegaConf.to_container(OmegaConf.load(CONFIGS / "task_prior.yaml"), resolve=False)
    block = yaml["task_prior"]
    fields = {f.name: f.default for f in dataclasses.fields(TaskPriorConfig)}
    assert list(block) == list(fields)
    for name, default in fields.items():
        value = block[name]
        if name == "prior_backbone":  # a name equals {name: ..., pretrained: true} (embedded weights are pretrained)
            assert value["name"] == default, value
        elif name == "quantiles":
            assert tuple(value) == default
        elif name == "seed":  # the run's seed, shared by the comparison CLIs
            assert value is None and OmegaConf.load(CONFIGS / "run_options" / "default.yaml").seed == default
        else:
            assert value == default, (name, value, default)
    assert TaskPriorConfig(**{**block, "seed": 0}).settings == TaskPriorConfig().settings
    assert yaml["data"] == {"num_images": DEFAULT_NUM_IMAGES, "image_size": DEFAULT_IMAGE_SIZE, "split": None}
    assert "probe" not in yaml and "seed" not in yaml and "prior_backbone" not in yaml  # all in task_prior:
