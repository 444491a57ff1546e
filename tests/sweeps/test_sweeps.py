"""Optuna sweeps (configs/hparams_search, src/sweeps): configs compose, pruning finds and stops its trial, the SQLite
study resumes after a kill and is shared by two workers. The sweeper is Hydra's own OptunaSweeperImpl driven with a
fake launcher (each "job" is a function call), so no training runs here."""

from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.utils import JobReturn, JobStatus
from hydra_plugins.hydra_optuna_sweeper._impl import OptunaSweeperImpl
from omegaconf import OmegaConf

from src.sweeps import OptunaPruning, find_trial, sqlite_url
from src.train import optimized_metric_value

CONFIGS = str(Path(__file__).resolve().parents[2] / "configs")
SEARCHES = sorted(p.stem for p in (Path(CONFIGS) / "hparams_search").glob("*.yaml"))
optuna.logging.set_verbosity(optuna.logging.WARNING)


def _objective(overrides) -> float:
    """A job's return value: -(x - 0.3)^2, best at x = 0.3."""
    x = float(dict(o.split("=", 1) for o in overrides)["x"])
    return -((x - 0.3) ** 2)


class FakeLauncher:
    """Runs each job as ``_objective``; raises KeyboardInterrupt at job ``kill_at`` (a sweep killed mid-way)."""

    def __init__(self, kill_at: int | None = None) -> None:
        self.kill_at, self.launched = kill_at, []

    def _job(self, overrides: tuple[str, ...]) -> float:
        return _objective(overrides)

    def launch(self, job_overrides, initial_job_idx):
        out = []
        for overrides in job_overrides:
            if self.kill_at is not None and len(self.launched) == self.kill_at:
                raise KeyboardInterrupt
            self.launched.append(tuple(overrides))
            ret = JobReturn(overrides=list(overrides), status=JobStatus.COMPLETED)
            ret.return_value = self._job(tuple(overrides))
            out.append(ret)
        return out


def _sweeper(storage: str, n_trials: int, launcher: FakeLauncher, seed: int | None, sweep_dir: Path):
    sampler = optuna.samplers.TPESampler(seed=seed, n_startup_trials=2)
    sw = OptunaSweeperImpl(sampler, "maximize", storage, "s", n_trials, 1, 0.0, None, None, None)
    sweep_dir.mkdir(parents=True, exist_ok=True)  # the launcher makes it in a real sweep
    sw.config = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep_dir)}}})
    sw.launcher, sw.hydra_context, sw.job_idx = launcher, object(), 0
    return sw


def _finished(storage: str) -> list[optuna.trial.FrozenTrial]:
    study = optuna.load_study(study_name="s", storage=storage)
    return study.get_trials(states=(optuna.trial.TrialState.COMPLETE,))


@pytest.mark.parametrize("name", SEARCHES)
def test_hparams_search_configs_compose(name, tmp_path) -> None:
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=CONFIGS):
        cfg = compose("train.yaml", [f"hparams_search={name}"], return_hydra_config=True)
    GlobalHydra.instance().clear()
    sweeper = cfg.hydra.sweeper
    # the study is named for its sweep; a suffix marks a changed objective (pretraining_lr_acc, the SynBench study
    # pretraining_lr left as it was), so a resumed old study never mixes two objectives' values
    assert sweeper._target_.endswith("OptunaSweeper") and sweeper.study_name.startswith(name)
    assert str(sweeper._get_node("storage")._value()).startswith("${repbench_sqlite:")
    assert sweeper.params and sweeper.n_trials >= 8
    names = [cfg.optimized_metric] if isinstance(cfg.optimized_metric, str) else list(cfg.optimized_metric)
    directions = [sweeper.direction] if isinstance(sweeper.direction, str) else list(sweeper.direction)
    assert len(names) == len(directions)


def test_slurm_launcher_composes() -> None:
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=CONFIGS):
        cfg = compose("train.yaml", ["hparams_search=pretraining_lr", "hydra/launcher=submitit_slurm"], True)
    GlobalHydra.instance().clear()
    assert "submitit" in cfg.hydra.launcher._target_


def test_sqlite_url_creates_the_folder(tmp_path) -> None:
    url = sqlite_url(str(tmp_path / "a" / "b" / "s.db"))
    assert url == f"sqlite:///{tmp_path}/a/b/s.db" and (tmp_path / "a" / "b").is_dir()
    with pytest.raises(ValueError, match=r"ending in \.db"):
        sqlite_url(str(tmp_path / "s.sqlite"))


def test_multi_objective_optimized_metric_returns_every_value() -> None:
    metrics = {"val/utility": 0.9, "val/divergence_radius/mean": 0.2}
    cfg = OmegaConf.create({"optimized_metric": ["val/utility", "val/divergence_radius/mean"]})
    assert optimized_metric_value(cfg, metrics) == [0.9, 0.2]
    cfg.optimized_metric = ["val/utility", "val/nope"]
    with pytest.raises(KeyError, match="'val/nope' was not logged"):
        optimized_metric_value(cfg, metrics)


def test_killed_sweep_resumes_without_redoing_finished_trials(tmp_path) -> None:
    storage = sqlite_url(str(tmp_path / "s.db"))
    first = FakeLauncher(kill_at=3)
    with pytest.raises(KeyboardInterrupt):
        _sweeper(storage, 6, first, 0, tmp_path).sweep(["x=interval(0,1)"])
    done = _finished(storage)
    assert len(done) == 3  # the 4th trial was asked, then the sweep was killed: left RUNNING, never told
    again = FakeLauncher()
    _sweeper(storage, 3, again, 0, tmp_path).sweep(["x=interval(0,1)"])
    assert len(again.launched) == 3 and not set(again.launched) & set(first.launched)
    assert len(_finished(storage)) == 6  # the 3 before the kill are kept and guide the sampler


def _worker(storage: str, seed: int, sweep_dir: str) -> None:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    _sweeper(storage, 4, FakeLauncher(), seed, Path(sweep_dir)).sweep(["x=interval(0,1)"])


def test_two_workers_share_one_sqlite_study(tmp_path) -> None:
    storage = sqlite_url(str(tmp_path / "s.db"))
    optuna.create_study(study_name="s", storage=storage, direction="maximize")  # both workers then load it
    ctx = mp.get_context("spawn")
    procs = [ctx.Process(target=_worker, args=(storage, seed, str(tmp_path / f"w{seed}"))) for seed in (1, 2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0]
    trials = _finished(storage)
    assert len(trials) == 8 and len({t.number for t in trials}) == 8
    assert len({t.params["x"] for t in trials}) == 8  # no point run twice (different sampler seeds per worker)
    study = optuna.load_study(study_name="s", storage=storage)
    assert study.best_value == max(t.value for t in trials)


def _trainer(score: float, epoch: int):
    import torch

    return SimpleNamespace(
        is_global_zero=True, current_epoch=epoch, callback_metrics={"val/score": torch.tensor(score)}, should_stop=False
    )


def test_pruning_callback_finds_its_trial_and_stops_a_collapsed_run(tmp_path, monkeypatch) -> None:
    storage = sqlite_url(str(tmp_path / "s.db"))
    study = optuna.create_study(study_name="s", storage=storage, direction="maximize")
    good, bad = study.ask(), study.ask()
    good.suggest_float("model.lr", 1e-4, 1e-1, log=True)
    bad.suggest_float("model.lr", 1e-4, 1e-1, log=True)
    overrides = [f"model.lr={bad.params['model.lr']}", "seed=0"]
    assert find_trial(study, overrides).number == bad.number
    sweep = OmegaConf.create({"storage": storage, "study_name": "s"})
    monkeypatch.setattr("src.sweeps.pruning._hydra_sweep", lambda: (sweep, overrides))
    cb = OptunaPruning("val/score", optuna.pruners.ThresholdPruner(lower=0.05), run_dir="r")
    cb.on_fit_start(_trainer(0.7, 0), None)
    assert cb.trial.number == bad.number
    assert (
        find_trial(optuna.load_study(study_name="s", storage=storage), overrides) is None
    )  # claimed: a second job with the same overrides does not share it
    trainer = _trainer(0.625, 0)  # exact in float32, so the stored value compares equal
    cb.on_train_epoch_end(trainer, None)
    assert not trainer.should_stop
    trainer = _trainer(0.0, 1)  # SynBench-Score collapsed to 0 (lr 2e-2 in docs/monitoring.md)
    cb.on_train_epoch_end(trainer, None)
    assert trainer.should_stop and cb.pruned_epoch == 1
    frozen = optuna.load_study(study_name="s", storage=storage).trials[bad.number]
    assert frozen.user_attrs["pruned_epoch"] == 1 and frozen.intermediate_values == {0: 0.625, 1: 0.0}


def test_pruning_callback_names_a_missing_monitor(tmp_path, monkeypatch) -> None:
    with pytest.raises(TypeError, match="pruner must be an optuna pruner"):
        OptunaPruning("val/score", pruner="median")
    cb = OptunaPruning("val/nope", optuna.pruners.ThresholdPruner(lower=0.05))
    cb.trial = SimpleNamespace()
    with pytest.raises(KeyError, match="monitor='val/nope' was not logged; logged: \\['val/score'\\]"):
        cb.on_train_epoch_end(_trainer(0.5, 0), None)


def test_pruning_callback_is_inert_outside_a_sweep(monkeypatch) -> None:
    monkeypatch.setattr("src.sweeps.pruning._hydra_sweep", lambda: None)
    cb = OptunaPruning("val/score", optuna.pruners.ThresholdPruner(lower=0.05))
    cb.on_fit_start(_trainer(0.5, 0), None)
    trainer = _trainer(0.0, 0)
    cb.on_train_epoch_end(trainer, None)
    assert cb.trial is None and not trainer.should_stop
