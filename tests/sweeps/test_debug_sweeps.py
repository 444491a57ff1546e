"""Every sweep in debug mode: ``python -m src.train -m hparams_search=<name> hydra.sweeper.n_trials=2 debug=fast`` runs
to completion for each config in configs/hparams_search/ (its objective's monitor stays on at a tiny budget,
configs/debug/fast.yaml), with a fresh study in the sweep's own folder: the real study (logs/<task>/optuna) is neither
resumed nor written. A configuration whose objective no configured callback logs is refused before any work
(src/sweeps/objective.py)."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from pathlib import Path

import optuna
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf, open_dict
from optuna.trial import TrialState

from src.sweeps import check_objective, sqlite_url

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "configs"
SEARCHES = sorted(p.stem for p in (CONFIGS / "hparams_search").glob("*.yaml"))
optuna.logging.set_verbosity(optuna.logging.WARNING)


def _compose(overrides: list[str], hydra: bool = False):
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONFIGS)):
        cfg = compose("train.yaml", overrides, return_hydra_config=hydra)
    GlobalHydra.instance().clear()
    return cfg


def _directions(name: str) -> list[str]:
    direction = _compose([f"hparams_search={name}"], hydra=True).hydra.sweeper.direction
    return [direction] if isinstance(direction, str) else list(direction)


def _sweep(tmp_path: Path, *overrides: str) -> subprocess.CompletedProcess:
    # one torch thread: the debug models are tiny, and on a busy 2-core machine a 2-thread pool spins (measured: the
    # robust_probe_optuna debug sweep 8.6 s with 1 thread, 47 s with 2, beside other jobs)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "REPBENCH_ROOT": str(tmp_path), "OMP_NUM_THREADS": "1"}
    cmd = [sys.executable, "-m", "src.train", "-m", *overrides]
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=400)


def _study_name(name: str) -> str:
    """The sweep's study name (hydra.sweeper.study_name; pretraining_lr's is pretraining_lr_acc since its objective
    changed), in the database file <name>.db."""
    return str(_compose([f"hparams_search={name}"], hydra=True).hydra.sweeper.study_name)


def _real_study(tmp_path: Path, name: str) -> str:
    """The study a real sweep would resume (logs/train/optuna/<name>.db), holding 2 finished trials already."""
    storage = sqlite_url(str(tmp_path / "logs" / "train" / "optuna" / f"{name}.db"))
    directions = _directions(name)
    study = optuna.create_study(study_name=_study_name(name), storage=storage, directions=directions)
    for value in (0.1, 0.2):
        study.add_trial(optuna.trial.create_trial(values=[value] * len(directions), params={}, distributions={}))
    return storage


@pytest.mark.slow
@pytest.mark.timeout(450)
@pytest.mark.parametrize("name", SEARCHES)
def test_every_sweep_runs_in_debug_mode(name, tmp_path) -> None:
    real = _real_study(tmp_path, name)
    proc = _sweep(tmp_path, f"hparams_search={name}", "hydra.sweeper.n_trials=2", "debug=fast")
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    (sweep,) = (tmp_path / "logs" / "train" / "multiruns").iterdir()
    assert len([p for p in sweep.iterdir() if p.is_dir()]) == 2  # two jobs: the real study's trials were not resumed
    study = optuna.load_study(study_name=_study_name(name), storage=sqlite_url(str(sweep / f"{name}.db")))
    trials = study.get_trials()
    assert [t.state for t in trials] == [TrialState.COMPLETE] * 2, [(t.number, t.state) for t in trials]
    n_objectives = len(_directions(name))
    assert all(len(t.values) == n_objectives and all(math.isfinite(v) for v in t.values) for t in trials), trials
    untouched = optuna.load_study(study_name=_study_name(name), storage=real).get_trials()
    assert [t.values[0] for t in untouched] == [0.1, 0.2]  # the real study: no trial added


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_sweep_whose_objective_has_no_producer_stops_before_any_work(tmp_path) -> None:
    """The sweep's objective monitor taken away: the sweeper refuses the config before it opens the study."""
    proc = _sweep(
        tmp_path,
        "hparams_search=robust_finetune_pareto",
        "hydra.sweeper.n_trials=2",
        "debug=fast",
        "debug_monitors.divergence_radius=null",
    )
    assert proc.returncode != 0
    out = proc.stdout + proc.stderr
    assert "'val/divergence_radius/mean' has no producer: only DivergenceRadiusCallback logs it" in out, out[-3000:]
    assert not list(tmp_path.rglob("*.db")) and not list(tmp_path.rglob("metrics.json"))  # no study, no job


@pytest.mark.parametrize("name", SEARCHES)
@pytest.mark.parametrize("debug", [[], ["debug=fast"]])
def test_every_sweep_config_has_its_objectives_producer(name, debug) -> None:
    check_objective(_compose([f"hparams_search={name}", *debug]))


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (  # the experiment's monitor switched off
            ["hparams_search=pretraining_lr", "optimized_metric=val/synbench/score", "callbacks.synbench=null"],
            r"optimized_metric='val/synbench/score' has no producer: only SynBenchCallback logs it, and none is "
            r"configured \(off: callbacks.synbench\)",
        ),
        (  # OptunaPruning's monitor too
            ["hparams_search=pretraining_lr", "callbacks.spectrum=null"],
            r"callbacks.optuna_pruning.monitor='val/spectrum/rankme' has no producer: only "
            r"RepresentationSpectrumCallback logs it",
        ),
        (  # a monitor that logs under another prefix
            ["hparams_search=robust_finetune_pareto", "debug=fast", "debug_monitors.divergence_radius.prefix=val_jpeg"],
            r"only DivergenceRadiusCallback logs it, and the configured one does not log it "
            r"\(callbacks.divergence_radius logs under 'val_jpeg': set its prefix\)",
        ),
        (  # the downstream probe (the Pareto sweep's utility axis) switched off
            ["hparams_search=robust_finetune_pareto", "callbacks.downstream=null"],
            r"optimized_metric='val/downstream/linear_acc' has no producer: only DownstreamProbeCallback logs it",
        ),
        (  # debug=fast in a run that names a monitor's value but is not a sweep with debug_monitors
            ["experiment=monitor_pretraining", "debug=fast", "optimized_metric=val/synbench/score"],
            r"Under debug=fast a sweep config names its objective's monitor under debug_monitors",
        ),
    ],
)
def test_an_objective_without_its_monitor_is_refused(overrides, message) -> None:
    with pytest.raises(ValueError, match=message):
        check_objective(_compose(overrides))


@pytest.mark.parametrize(
    "overrides",
    [
        [],  # val/acc: the module's
        ["experiment=task_prior"],  # val/task_prior/acc_mean: the task-prior probe module logs it
        ["experiment=monitor_pretraining", "optimized_metric=val/spectrum/rankme", "callbacks=[default,spectrum]"],
        ["experiment=robust_finetune", "debug=fast"],  # val/utility: the module's, monitors off
        ["experiment=monitor_pretraining", "optimized_metric=val/downstream/knn_acc", "callbacks=[default,downstream]"],
        ["optimized_metric=null"],
    ],
)
def test_an_objective_with_a_producer_passes(overrides) -> None:
    check_objective(_compose(overrides))


def test_train_refuses_it_before_building_anything(tmp_path) -> None:
    from src.train import train

    cfg = _compose(["experiment=monitor_pretraining", "debug=fast", "optimized_metric=val/synbench/score"])
    with open_dict(cfg):
        cfg.paths.output_dir = str(tmp_path / "run")
    with pytest.raises(ValueError, match="has no producer"):
        train(cfg)
    assert not (tmp_path / "run").exists()
    assert OmegaConf.select(cfg, "callbacks.synbench") is None
