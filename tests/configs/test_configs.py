"""Every config composes (the lightning-hydra-template's test_configs): train.yaml x every experiment x every option
of every group, eval.yaml x every experiment, synbench.yaml; every ``_target_`` imports; a multirun writes one output
folder per job. Experiments, groups and options are globbed from configs/, so new files are picked up automatically."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.utils import get_object
from omegaconf import DictConfig, OmegaConf, open_dict

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
EXPERIMENTS = sorted(p.stem for p in (CONFIGS / "experiment").glob("*.yaml"))
# groups of train.yaml's defaults list whose options a user picks on the command line
GROUPS = ("backbone", "data", "model", "attack", "callbacks", "logger", "trainer", "debug")
OPTIONS = [(g, p.stem) for g in GROUPS for p in sorted((CONFIGS / g).glob("*.yaml"))]
# options that only make sense together with another choice (composed with it): unlabeled photos have no
# num_classes for a classifier, nor have the depth data sets (depth maps, for the depth head); a classifier model
# in an experiment on unlabeled data gets labeled digits
COMPANIONS = {
    ("data", "photos"): ["model=robust_finetune"],
    ("data", "synthetic_depth"): ["model=depth_probe"],
    ("data", "nyu_depth_v2"): ["model=depth_probe"],
}
LABELED = ["data=digits"]


def _unlabeled(cfg: DictConfig) -> bool:
    """The model asks for ``data.num_classes`` and the data has none (a classifier on unlabeled photos)."""
    wants = "num_classes" in cfg.model and OmegaConf.is_interpolation(cfg.model, "num_classes")
    return wants and "num_classes" not in cfg.data


@pytest.fixture(autouse=True)
def _hydra():
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONFIGS)):
        yield
    GlobalHydra.instance().clear()


def _compose(config_name: str, overrides: list[str]) -> DictConfig:
    cfg = compose(config_name=config_name, overrides=overrides)
    with open_dict(cfg):  # the hydra: resolver only exists inside a run; point paths somewhere concrete
        cfg.paths.root_dir = str(ROOT)
        cfg.paths.output_dir = str(ROOT / "logs" / "test_configs")
    return cfg


def _targets(node: object) -> list[str]:
    if isinstance(node, dict):
        own = [str(node["_target_"])] if "_target_" in node else []
        return own + [t for v in node.values() for t in _targets(v)]
    if isinstance(node, list):
        return [t for v in node for t in _targets(v)]
    return []


def _missing(node: DictConfig, prefix: str = "") -> list[str]:
    """Keys whose value is ``???`` (found without resolving any interpolation)."""
    out = []
    for key in node.keys():
        if OmegaConf.is_missing(node, key):
            out.append(f"{prefix}{key}")
        elif not OmegaConf.is_interpolation(node, key) and isinstance(node._get_node(key), DictConfig):
            out += _missing(node._get_node(key), f"{prefix}{key}.")
    return out


def _check(cfg: DictConfig) -> None:
    """Interpolations resolve and every ``_target_`` names an importable object. ``???`` values a user must give
    (data.root and data.num_classes of imagefolder) get a placeholder first, as the user's command line would."""
    for key in _missing(cfg):
        OmegaConf.update(cfg, key, 2, force_add=True)
    plain = OmegaConf.to_container(cfg, resolve=True, throw_on_missing=True)
    for target in _targets(plain):
        get_object(target)


def test_globs_found_the_configs() -> None:
    assert {"probe_digits", "monitor_pretraining", "gaussian_probe"} <= set(EXPERIMENTS)
    assert ("debug", "fast") in OPTIONS and ("model", "supervised") in OPTIONS


@pytest.mark.parametrize("experiment", [None, *EXPERIMENTS])
def test_train_config_composes_with_every_group_option(experiment) -> None:
    base = [f"experiment={experiment}"] if experiment else []
    cfg = _compose("train.yaml", base)
    _check(cfg)
    assert cfg.model._target_ and cfg.data._target_ and cfg.trainer._target_
    # read by src.train.main for Hydra sweepers; val/acc unless an experiment optimises something else
    assert isinstance(cfg.get("optimized_metric"), str) and cfg.optimized_metric.count("/") >= 1
    if experiment is None:
        assert cfg.optimized_metric == "val/acc"
    for group, option in OPTIONS:
        overrides = [*base, f"{group}={option}", *COMPANIONS.get((group, option), [])]
        try:
            cfg = _compose("train.yaml", overrides)
            if group == "model" and _unlabeled(cfg):
                cfg = _compose("train.yaml", overrides + LABELED)
            _check(cfg)
        except Exception as err:  # name the failing combination
            raise AssertionError(f"train.yaml experiment={experiment} {group}={option}: {err}") from err


@pytest.mark.parametrize("experiment", [None, *EXPERIMENTS])
def test_eval_config_composes_with_every_experiment(experiment) -> None:
    overrides = ["ckpt_path=some.ckpt"] + ([f"experiment={experiment}"] if experiment else [])
    cfg = _compose("eval.yaml", overrides)
    _check(cfg)
    assert set(cfg.eval.attack) == {"norm", "steps", "step_size", "random_start"}
    assert cfg.eval.attack.norm is None  # the checkpoint's norm unless overridden


@pytest.mark.parametrize("overrides", [[], ["full=true"]])
def test_synbench_config_composes(overrides) -> None:
    cfg = _compose("synbench.yaml", overrides)
    _check(cfg)
    assert list(cfg.backbones)


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_multirun_writes_every_jobs_outputs(tmp_path) -> None:
    """README's ``python -m src.train -m debug=fast model.epsilon=0,0.05`` exactly as written (no hydra.sweep.dir
    override: the sweep folder comes from the configs; REPBENCH_ROOT only moves logs/ out of the checkout): two jobs,
    each with its config, log, CSV metrics, checkpoints and metrics.json in its own folder named after its overrides."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "REPBENCH_ROOT": str(tmp_path)}
    cmd = [sys.executable, "-m", "src.train", "-m", "debug=fast", "model.epsilon=0,0.05"]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=540)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (sweep,) = (tmp_path / "logs" / "train" / "multiruns").iterdir()
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir())
    assert [p.name for p in jobs] == ["0_debug-fast_model.epsilon-0", "1_debug-fast_model.epsilon-0.05"]
    for job, eps in zip(jobs, (0.0, 0.05)):
        cfg = OmegaConf.load(job / ".hydra" / "config.yaml")
        assert float(cfg.model.epsilon) == eps
        metrics = (job / "csv" / "metrics.csv").read_text()
        assert "train/loss" in metrics and "val/acc" in metrics, metrics[:500]
        assert (job / "checkpoints" / "last.ckpt").is_file()
        assert (job / "metrics.json").is_file() and (job / "summary.md").is_file()
    assert (sweep / "multirun.yaml").is_file()
