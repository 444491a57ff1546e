"""RepBench's Optuna sweeper (hydra_plugins/repbench_sweeper, hydra/sweeper=repbench_optuna): the trial's number
reaches its job, a trial that OptunaPruning stopped ends PRUNED in the SQLite study, and n_trials counts the whole
study (a restart runs only the remaining trials). Driven with a fake launcher as test_sweeps.py does: each "job" runs
OptunaPruning on a fake trainer, so no training runs here. Plus: a sweep job's hyperparameters and metrics reach
TensorBoard's HParams plugin."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
from hydra_plugins.hydra_optuna_sweeper._impl import OptunaSweeperImpl
from omegaconf import OmegaConf
from optuna.trial import TrialState

from hydra_plugins.repbench_sweeper._impl import RepBenchOptunaSweeperImpl, objective_values
from src.sweeps import OptunaPruning, sqlite_url, trial_number

from .test_sweeps import FakeLauncher

optuna.logging.set_verbosity(optuna.logging.WARNING)
COLLAPSE_AT = 0.5  # a job with x above this "collapses": its score falls to 0 after epoch 0


class PruningLauncher(FakeLauncher):
    """Each job: OptunaPruning (ThresholdPruner lower=0.05) sees score 0.5 at epoch 0, then 0.0 at epoch 1 when
    x > COLLAPSE_AT (else 0.5 + x); returns the last score, as src.train returns optimized_metric."""

    def __init__(self, storage: str, monkeypatch, kill_at: int | None = None) -> None:
        super().__init__(kill_at)
        self.storage, self.monkeypatch = storage, monkeypatch
        self.opened: list[int] = []  # the trial number each job's callback opened

    def _job(self, overrides: tuple[str, ...]) -> float:
        sweep = OmegaConf.create({"storage": self.storage, "study_name": "s"})
        self.monkeypatch.setattr("src.sweeps.pruning._hydra_sweep", lambda: (sweep, list(overrides)))
        cb = OptunaPruning("val/score", optuna.pruners.ThresholdPruner(lower=0.05), run_dir="r")
        x = float(dict(o.split("=", 1) for o in overrides)["x"])
        score = 0.5
        for epoch, score in enumerate((0.5, 0.0 if x > COLLAPSE_AT else 0.5 + x)):
            trainer = _trainer(score, epoch)
            if epoch == 0:
                cb.on_fit_start(trainer, None)
                self.opened.append(cb.trial.number)
            cb.on_train_epoch_end(trainer, None)
            if trainer.should_stop:
                break
        return score


def _trainer(score: float, epoch: int):
    import torch

    return SimpleNamespace(
        is_global_zero=True, current_epoch=epoch, callback_metrics={"val/score": torch.tensor(score)}, should_stop=False
    )


def _sweeper(cls, storage: str, n_trials: int, launcher, sweep_dir: Path, seed: int = 0):
    sampler = optuna.samplers.RandomSampler(seed=seed)
    sw = cls(sampler, "maximize", storage, "s", n_trials, 1, 0.0, None, None, None)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    sw.config = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep_dir)}}})
    sw.launcher, sw.hydra_context, sw.job_idx = launcher, object(), 0
    return sw


def _trials(storage: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name="s", storage=storage).get_trials()


def test_collapsed_trial_ends_pruned_and_the_trial_number_reaches_the_job(tmp_path, monkeypatch) -> None:
    storage = sqlite_url(str(tmp_path / "s.db"))
    launcher = PruningLauncher(storage, monkeypatch)
    _sweeper(RepBenchOptunaSweeperImpl, storage, 6, launcher, tmp_path).sweep(["x=interval(0,1)"])
    trials = _trials(storage)
    # +optuna_trial=<n> is each job's last override, and the job's callback opened exactly that trial
    assert [trial_number(o) for o in launcher.launched] == [t.number for t in trials] == launcher.opened
    collapsed = [t for t in trials if t.params["x"] > COLLAPSE_AT]
    assert collapsed and len(collapsed) < len(trials)  # RandomSampler(seed=0) draws both kinds in 6 trials
    for t in trials:
        if t.params["x"] > COLLAPSE_AT:
            assert t.state == TrialState.PRUNED and t.user_attrs["pruned_epoch"] == 1
            assert t.intermediate_values == {0: 0.5, 1: 0.0}  # the collapse the pruner saw, exact in float32
        else:
            assert t.state == TrialState.COMPLETE and "pruned_epoch" not in t.user_attrs
    results = OmegaConf.load(tmp_path / "optimization_results.yaml")
    assert results.best_value <= 1.0 + 1e-12 and results.best_params.x <= COLLAPSE_AT  # 0.5 + x, x <= 0.5
    assert results.trials == {"complete": len(trials) - len(collapsed), "pruned": len(collapsed), "fail": 0}


def test_stock_sweeper_tells_a_pruned_trial_complete(tmp_path, monkeypatch) -> None:
    """Why the plugin exists: Hydra's own sweeper records the job's return value, so the pruned trial ends COMPLETE
    (OptunaPruning then finds its trial by matching parameters: the fallback)."""
    storage = sqlite_url(str(tmp_path / "s.db"))
    launcher = PruningLauncher(storage, monkeypatch)
    _sweeper(OptunaSweeperImpl, storage, 6, launcher, tmp_path).sweep(["x=interval(0,1)"])
    trials = _trials(storage)
    assert all(trial_number(o) is None for o in launcher.launched) and launcher.opened == [t.number for t in trials]
    pruned = [t for t in trials if "pruned_epoch" in t.user_attrs]
    assert pruned and all(t.state == TrialState.COMPLETE for t in pruned)


def test_restart_after_k_finished_trials_runs_n_trials_minus_k(tmp_path, monkeypatch) -> None:
    storage = sqlite_url(str(tmp_path / "s.db"))
    first = PruningLauncher(storage, monkeypatch, kill_at=3)
    with pytest.raises(KeyboardInterrupt):
        _sweeper(RepBenchOptunaSweeperImpl, storage, 6, first, tmp_path).sweep(["x=interval(0,1)"])
    finished = [t for t in _trials(storage) if t.state.is_finished()]
    assert len(finished) == 3  # the 4th was asked, then killed: left RUNNING, not counted
    again = PruningLauncher(storage, monkeypatch)
    _sweeper(RepBenchOptunaSweeperImpl, storage, 6, again, tmp_path, seed=1).sweep(["x=interval(0,1)"])
    assert len(again.launched) == 6 - 3
    assert sum(t.state.is_finished() for t in _trials(storage)) == 6
    done = PruningLauncher(storage, monkeypatch)
    _sweeper(RepBenchOptunaSweeperImpl, storage, 6, done, tmp_path, seed=2).sweep(["x=interval(0,1)"])
    assert done.launched == []  # the study already holds n_trials finished trials: nothing to run


def test_a_study_with_only_pruned_trials_has_no_best(tmp_path, monkeypatch) -> None:
    storage = sqlite_url(str(tmp_path / "s.db"))
    sw = _sweeper(RepBenchOptunaSweeperImpl, storage, 2, PruningLauncher(storage, monkeypatch), tmp_path)
    with pytest.raises(ValueError, match=r"no COMPLETE trial .*'pruned': 2.*lower the threshold"):
        sw.sweep(["x=interval(0.6,1)"])  # every x collapses


def test_bad_return_values_are_named() -> None:
    assert objective_values(0.25, 1) == [0.25] and objective_values((0.5, 0.25), 2) == [0.5, 0.25]
    with pytest.raises(ValueError, match=r"returned \[0.5\], expected a float"):
        objective_values([0.5], 1)
    with pytest.raises(ValueError, match=r"returned 1 values \[0.5\], expected a list of 2 floats"):
        objective_values([0.5], 2)


def test_trial_number_override_is_checked(tmp_path, monkeypatch) -> None:
    assert trial_number(["model.lr=0.1", "+optuna_trial=3"]) == 3 and trial_number(["model.lr=0.1"]) is None
    with pytest.raises(ValueError, match=r"'\+optuna_trial=x' is not a trial number.*drop it"):
        trial_number(["+optuna_trial=x"])
    storage = sqlite_url(str(tmp_path / "s.db"))
    study = optuna.create_study(study_name="s", storage=storage, direction="maximize")
    trial = study.ask()
    trial.suggest_float("model.lr", 1e-4, 1e-1, log=True)
    sweep = OmegaConf.create({"storage": storage, "study_name": "s"})
    cb = OptunaPruning("val/score", optuna.pruners.ThresholdPruner(lower=0.05))
    for overrides, match in [
        (["+optuna_trial=7"], "has no trial 7"),
        (["model.lr=0.5", "+optuna_trial=0"], r"parameters \['model.lr=.*'\] that are not this job's overrides"),
    ]:
        monkeypatch.setattr("src.sweeps.pruning._hydra_sweep", lambda o=overrides: (sweep, o))
        with pytest.raises(ValueError, match=match):
            cb.on_fit_start(_trainer(0.5, 0), None)
    study.tell(trial, 0.5)
    monkeypatch.setattr(
        "src.sweeps.pruning._hydra_sweep", lambda: (sweep, [f"model.lr={trial.params['model.lr']}", "+optuna_trial=0"])
    )
    with pytest.raises(ValueError, match="trial 0 of study 's' is COMPLETE, not open"):
        cb.on_fit_start(_trainer(0.5, 0), None)


def test_sweep_job_hparams_and_metrics_reach_tensorboard(tmp_path) -> None:
    """src.train ends each job with log_hparams_with_metrics(flat_hparams(cfg), metrics): the HParams plugin data of
    the event file holds the trial's hyperparameters (model/lr as the sweeper set it) and the metric tags."""
    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    from src.utils.hparams import flat_hparams, log_hparams_with_metrics

    cfg = {"model": {"lr": 0.0123, "_target_": "repbench.models.X"}, "seed": 0, "task_name": "train"}
    logger = TensorBoardLogger(str(tmp_path), name="tb", version=0)
    logger.experiment.add_scalar("val/synbench/score", 0.7, 0)
    assert log_hparams_with_metrics([logger], flat_hparams(cfg), ["val/synbench/score"]) == 1
    logger.experiment.close()
    acc = EventAccumulator(str(tmp_path / "tb" / "version_0"))
    acc.Reload()
    content = {k: plugin_data_pb2.HParamsPluginData.FromString(v) for k, v in acc.PluginTagToContent("hparams").items()}
    session = next(c.session_start_info for c in content.values() if c.HasField("session_start_info"))
    assert session.hparams["model/lr"].number_value == pytest.approx(0.0123, rel=1e-12)  # stored as a double
    assert session.hparams["task_name"].string_value == "train" and "model/_target_" not in session.hparams
    experiment = next(c.experiment for c in content.values() if c.HasField("experiment"))
    assert [m.name.tag for m in experiment.metric_infos] == ["val/synbench/score"]
    assert acc.Scalars("val/synbench/score")[0].value == pytest.approx(0.7, rel=1e-7)  # float32 in the event file


class TradeOffLauncher(FakeLauncher):
    """Two objectives of a robust fine-tune as a function of lam: utility = lam / (1 + lam) (0 at lam = 0: the
    collapsed student), R_dr = 0.2 * utility (lower is more robust). Every point is on the trade-off, so without a
    limit lam = 0 (lowest R_dr) is on the Pareto front."""

    def _job(self, overrides: tuple[str, ...]) -> list[float]:
        lam = float(dict(o.split("=", 1) for o in overrides)["lam"])
        utility = lam / (1.0 + lam)
        return [utility, 0.2 * utility]


def _pareto_sweeper(storage: str, tmp_path: Path, limits, sampler=None):
    sampler = sampler or optuna.samplers.GridSampler({"lam": [0.0, 1.0, 3.0, 10.0]})
    sw = RepBenchOptunaSweeperImpl(
        sampler, ["maximize", "minimize"], storage, "s", 4, 1, 0.0, None, None, None, limits=limits
    )
    tmp_path.mkdir(parents=True, exist_ok=True)
    sw.config = OmegaConf.create({"hydra": {"sweep": {"dir": str(tmp_path)}}})
    sw.launcher, sw.hydra_context, sw.job_idx = TradeOffLauncher(), object(), 0
    return sw


@pytest.mark.parametrize("limits", [None, [0.6, None]])
def test_utility_limit_keeps_the_collapsed_point_off_the_front(tmp_path, limits) -> None:
    storage = sqlite_url(str(tmp_path / "s.db"))
    _pareto_sweeper(storage, tmp_path, limits).sweep(["lam=choice(0.0,1.0,3.0,10.0)"])
    results = OmegaConf.load(tmp_path / "optimization_results.yaml")
    lams = sorted(s.params.lam for s in results.solutions)
    if limits is None:
        assert lams == [0.0, 1.0, 3.0, 10.0]  # every point trades utility for R_dr: all non-dominated
        assert "limits" not in results and "beyond_limits" not in results.trials
    else:  # utility 0 (lam 0) and 0.5 (lam 1) are below 0.6; 0.75 (lam 3) and 0.909 (lam 10) pass
        assert lams == [3.0, 10.0] and results.trials.beyond_limits == 2 and results.limits == [0.6, None]
        violations = {t.params["lam"]: t.user_attrs["limit_violations"] for t in _trials(storage)}
        assert violations[0.0] == pytest.approx([0.6, 0.0], abs=1e-12)  # limit - utility for a maximised objective
        assert violations[10.0][0] < 0 and violations[10.0][1] == 0.0


def test_limits_reach_nsga2_as_constraints(tmp_path) -> None:
    """NSGA-II ranks infeasible trials below feasible ones through Optuna's constraints_func; Optuna 2.10 calls it
    before the trial's values are stored, so it reads the violations the sweeper set as a user attribute."""
    storage = sqlite_url(str(tmp_path / "s.db"))
    sampler = optuna.samplers.NSGAIISampler(seed=0, population_size=2)
    sw = _pareto_sweeper(storage, tmp_path, [0.6, None], sampler=sampler)
    sw.sweep(["lam=choice(0.0,1.0,3.0,10.0)"])
    trials = [t for t in _trials(storage) if t.state == TrialState.COMPLETE]
    assert trials and all(
        t.system_attrs["nsga2:constraints"] == pytest.approx(t.user_attrs["limit_violations"]) for t in trials
    )


def test_limits_are_checked_against_the_directions(tmp_path) -> None:
    storage = sqlite_url(str(tmp_path / "s.db"))
    with pytest.raises(ValueError, match=r"limits \[0.6\] has 1 entries for 2 objectives.*null"):
        _pareto_sweeper(storage, tmp_path, [0.6]).sweep(["lam=choice(0.0,1.0)"])
    with pytest.raises(ValueError, match=r"limit 'high' is not a finite number"):
        _pareto_sweeper(storage, tmp_path, ["high", None]).sweep(["lam=choice(0.0,1.0)"])


def test_no_trial_within_the_limits_is_an_error(tmp_path) -> None:
    storage = sqlite_url(str(tmp_path / "s.db"))
    with pytest.raises(ValueError, match=r"no COMPLETE trial within the limits \[0.99, None\].*'beyond_limits': 4"):
        _pareto_sweeper(storage, tmp_path, [0.99, None]).sweep(["lam=choice(0.0,1.0,3.0,10.0)"])


def test_rerun_of_a_finished_study_writes_the_results_into_a_new_sweep_dir(tmp_path, monkeypatch) -> None:
    """S03: the documented resume of a finished study launches no job, so nothing creates the sweep folder; the
    results are still written there."""
    storage = sqlite_url(str(tmp_path / "s.db"))
    _sweeper(RepBenchOptunaSweeperImpl, storage, 2, PruningLauncher(storage, monkeypatch), tmp_path / "a").sweep(
        ["x=interval(0,0.5)"]
    )
    again = PruningLauncher(storage, monkeypatch)
    sw = _sweeper(RepBenchOptunaSweeperImpl, storage, 2, again, tmp_path / "a")
    sw.config.hydra.sweep.dir = str(tmp_path / "b" / "c")  # not created by _sweeper
    sw.sweep(["x=interval(0,0.5)"])
    assert again.launched == []
    results = OmegaConf.load(tmp_path / "b" / "c" / "optimization_results.yaml")
    assert results.trials == {"complete": 2, "pruned": 0, "fail": 0}


@pytest.mark.parametrize("n_trials", [0, -3])
def test_n_trials_below_one_is_refused_before_the_study_is_opened(tmp_path, monkeypatch, n_trials) -> None:
    """S01/S04: the key is named (not a pruner that this sweep does not have), and no study file is created."""
    storage = sqlite_url(str(tmp_path / "s.db"))
    sw = _sweeper(RepBenchOptunaSweeperImpl, storage, n_trials, PruningLauncher(storage, monkeypatch), tmp_path)
    with pytest.raises(ValueError, match=rf"hydra.sweeper.n_trials must be >= 1, got {n_trials}"):
        sw.sweep(["x=interval(0,1)"])
    assert not (tmp_path / "s.db").exists()


def _finished_study(tmp_path: Path, monkeypatch) -> str:
    """The storage URL of a study with 2 COMPLETE trials (x <= COLLAPSE_AT: none collapses)."""
    storage = sqlite_url(str(tmp_path / "s.db"))
    _sweeper(RepBenchOptunaSweeperImpl, storage, 2, PruningLauncher(storage, monkeypatch), tmp_path).sweep(
        ["x=interval(0,0.5)"]
    )
    return storage


@pytest.mark.parametrize("damage", ["random bytes", "truncated"])
def test_a_corrupt_study_file_is_named_with_the_fix(tmp_path, monkeypatch, damage) -> None:
    """S05/S06: a study file replaced by random bytes, or truncated to 4 KiB (SQLite's page size here)."""
    import numpy as np

    storage = _finished_study(tmp_path, monkeypatch)
    file = tmp_path / "s.db"
    if damage == "random bytes":
        file.write_bytes(np.random.default_rng(0).bytes(20000))
    else:
        file.write_bytes(file.read_bytes()[:4096])
    sw = _sweeper(RepBenchOptunaSweeperImpl, storage, 3, PruningLauncher(storage, monkeypatch), tmp_path)
    with pytest.raises(RuntimeError, match=r"hydra.sweeper.storage=sqlite:///.*s\.db \(file .*s\.db\).*move it away"):
        sw.sweep(["x=interval(0,1)"])


def test_a_locked_study_file_names_the_other_worker_and_server_urls(tmp_path, monkeypatch) -> None:
    """S07: another connection holds an exclusive lock on the study file."""
    import sqlite3

    storage = _finished_study(tmp_path, monkeypatch)
    holder = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        locked = f"{storage}?timeout=0.1"  # SQLite's busy wait (default 5 s) cut to 0.1 s: the lock is never released
        sw = _sweeper(RepBenchOptunaSweeperImpl, locked, 3, PruningLauncher(locked, monkeypatch), tmp_path)
        with pytest.raises(RuntimeError, match=r"\(file .*s\.db\): database is locked; another worker.*server URL"):
            sw.sweep(["x=interval(0,1)"])
    finally:
        holder.close()


def test_an_inverted_interval_names_the_parameter(tmp_path, monkeypatch) -> None:
    """S08b: Optuna's low > high message, with the parameter named; refused before the study is opened."""
    storage = sqlite_url(str(tmp_path / "s.db"))
    sw = _sweeper(RepBenchOptunaSweeperImpl, storage, 2, PruningLauncher(storage, monkeypatch), tmp_path)
    with pytest.raises(ValueError, match=r"parameter 'model.lr' \(model.lr=interval\(1, 0\).*low=1.0, high=0.0"):
        sw.sweep(["x=interval(0,1)", "model.lr=interval(1, 0)"])
    assert not (tmp_path / "s.db").exists()
