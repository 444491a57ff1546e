"""Images per backbone forward: one constant, FORWARD_BATCH, behind every default that means it (and the YAML
literals that repeat it for Hydra)."""

from __future__ import annotations

import dataclasses
import importlib
import inspect

import pytest
from omegaconf import OmegaConf

from src.features import FORWARD_BATCH
from src.utils.resources import config_dir

# (module:callable, parameter) of every forward-batch default
DEFAULTS = [
    ("src.features.extractor:FeatureExtractor", "max_batch"),
    ("src.synbench.protocol:make_extract", "batch_size"),
    ("src.task_prior.compare:compare_backbones", "max_batch"),
    ("src.divergence_radius.protocol:robustness_sweep", "max_batch"),
    ("src.divergence_radius.report:robustness_report", "max_batch"),
    ("src.callbacks.task_prior_callback:TaskPriorCallback", "max_batch"),
    ("src.callbacks.spectrum_callback:RepresentationSpectrumCallback", "max_batch"),
    ("src.callbacks.downstream_callback:DownstreamProbeCallback", "max_batch"),
    ("src.models.task_prior_probe:TaskPriorProbe", "max_batch"),
    ("src.models.task_prior_probe:dataset_features", "batch_size"),
]
YAMLS = [
    ("callbacks/downstream.yaml", "downstream.max_batch"),
    ("callbacks/spectrum.yaml", "spectrum.max_batch"),
    ("callbacks/task_prior.yaml", "task_prior.max_batch"),
    ("model/task_prior_probe.yaml", "max_batch"),
]


def test_the_constant_is_the_measured_plateau() -> None:
    assert FORWARD_BATCH == 256  # the value before the constant (docs/speed.md: EfficientNet-Lite0 at 64 px, 2 cores)


@pytest.mark.parametrize(("target", "param"), DEFAULTS, ids=[t.rpartition(":")[2] for t, _ in DEFAULTS])
def test_every_forward_batch_default_is_the_constant(target: str, param: str) -> None:
    module, _, name = target.partition(":")
    obj = getattr(importlib.import_module(module), name)
    assert inspect.signature(obj).parameters[param].default == FORWARD_BATCH


def test_synbench_batch_size_and_the_yaml_literals_are_the_constant() -> None:
    from src.synbench import SynBenchConfig

    assert {f.name: f.default for f in dataclasses.fields(SynBenchConfig)}["batch_size"] == FORWARD_BATCH
    for yaml, key in YAMLS:
        assert OmegaConf.select(OmegaConf.load(config_dir() / yaml), key) == FORWARD_BATCH, yaml


def test_the_comparison_clis_forward_batch_is_the_constant() -> None:
    """The comparison CLIs' forward batch is the run options' extractor.max_batch (configs/run_options): null, i.e.
    no option, so every forward takes its function's default (FORWARD_BATCH); task_prior.yaml's deprecated top-level
    max_batch (once the literal 256) is null too."""
    from src.features import extractor_options

    shared = OmegaConf.load(config_dir() / "run_options" / "default.yaml")
    assert shared.extractor.max_batch is None and "max_batch" not in extractor_options(shared.extractor)
    assert OmegaConf.load(config_dir() / "task_prior.yaml").max_batch is None
