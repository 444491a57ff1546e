"""The run folder as a user meets it: unique per run (also in the same second), locked while a run writes it,
checkpoints that are never truncated under a valid name, a resume hint that names a checkpoint that loads (quoted for
Hydra), training lengths checked before anything runs, and metrics.json / summary.md at the end.

Cases Q01, Q02, Q03, F01, F02, F03, C03, C09, C12, C14, C15 of the reliability audit."""

from __future__ import annotations

import errno
import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser
from lightning.pytorch.callbacks import ModelCheckpoint
from omegaconf import OmegaConf, open_dict

import src.train as train_mod
from src.utils import atomic_write
from src.utils.checkpoint_io import AtomicCheckpointIO, atomic_write_bytes
from src.utils.hydra_utils import job_name, run_name
from src.utils.run_dir import LOCK_NAME, RunDirectoryInUseError, RunDirectoryLock, RunFolderLock, RunFolderRefused

from .conftest import CONFIG_DIR
from .test_resume import OVERRIDES

ROOT = Path(__file__).resolve().parents[2]
#: every Hydra entry point (they all write a run folder through configs/hydra/default.yaml)
CLI_CONFIGS = ("train", "eval", "report", "synbench", "divergence_radius", "task_prior", "monitor_study")


# ---------------------------------------------------------------- Q02 / Q01: one run, one folder
def test_q02_run_names_differ_within_one_second_and_say_the_overrides(monkeypatch):
    """Within one second two names differ only through the random part: check it is there, comes from `secrets`
    (6 hex digits: two same-second runs collide with probability 2^-24) and that the overrides follow it."""
    import itertools

    from src.utils import hydra_utils

    draws = itertools.count()
    monkeypatch.setattr(hydra_utils.secrets, "token_hex", lambda n: f"{next(draws):0{2 * n}x}")
    names = [run_name("model.epsilon-0.25_seed-1") for _ in range(3)]
    assert [n.split("_")[2] for n in names] == ["000000", "000001", "000002"]
    monkeypatch.undo()
    name = run_name("model.epsilon-0.25_seed-1")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d_\d\d-\d\d-\d\d_[0-9a-f]{6}_model\.epsilon-0\.25_seed-1", name), name
    assert "=" not in run_name("a/b='x y'") and "/" not in run_name("a/b='x y'")
    assert job_name(3, "") == "3" and job_name(3, "lr-1") == "3_lr-1"
    long = run_name("x" * 500)
    assert len(long) < 140 and long.split("_", 3)[3] != run_name("x" * 499).split("_", 3)[3]


def test_q02_a_second_live_run_into_one_folder_is_refused(tmp_path):
    """A run folder held by a live process (here: the parent of this test process) is refused, naming the fix."""
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": os.getppid(), "host": os.uname().nodename, "started": "x"}))
    with pytest.raises(RunDirectoryInUseError, match=r"in use by another run .*hydra\.run\.dir"):
        RunDirectoryLock(tmp_path).acquire()


def test_q02_a_stale_lock_is_taken_over_and_released(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / LOCK_NAME).write_text(json.dumps({"pid": int(dead.stdout), "host": os.uname().nodename}))
    with RunDirectoryLock(tmp_path):
        assert json.loads((tmp_path / LOCK_NAME).read_text())["pid"] == os.getpid()
    assert not (tmp_path / LOCK_NAME).exists()


@pytest.mark.slow
def test_q01_q02_two_runs_started_together_get_two_folders(tmp_path):
    """Two `debug=fast` runs launched at the same moment (the CSV logger made the second one crash before): both
    exit 0, each in its own folder with its own config and metrics.json."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "REPBENCH_ROOT": str(tmp_path)}
    cmd = [sys.executable, "-m", "src.train", "debug=fast"]
    procs = [
        subprocess.Popen([*cmd, f"seed={s}"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        for s in (1, 2)
    ]
    errs = [p.communicate(timeout=300)[1].decode() for p in procs]
    assert [p.returncode for p in procs] == [0, 0], errs
    runs = sorted((tmp_path / "logs" / "train" / "runs").iterdir())
    assert len(runs) == 2
    seeds = sorted(json.loads((r / "metrics.json").read_text())["seed"] for r in runs)
    assert seeds == [1, 2]


# ---------------------------------------------------------------- Q03 / RC2: refused before Hydra writes
def _hydra_cfg(config: str, overrides: list[str]):
    """The composed config with its ``hydra`` node, as Hydra hands it to the callbacks."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=CONFIG_DIR):
        return compose(config, overrides=overrides, return_hydra_config=True)


def _held_by(pid: int, folder: Path, kind: str = "run") -> None:
    """A lock file in ``folder`` naming the live process ``pid`` of this host."""
    folder.mkdir(parents=True, exist_ok=True)
    record = {"pid": pid, "host": socket.gethostname(), "started": "x", "kind": kind}
    (folder / LOCK_NAME).write_text(json.dumps(record))


@pytest.mark.parametrize("config", CLI_CONFIGS)
def test_q03_every_cli_locks_its_folder_before_hydra_writes(config):
    """Every entry point's Hydra config carries the run-folder lock (a Hydra callback: it runs before run_job)."""
    cfg = _hydra_cfg(f"{config}.yaml", [])
    assert OmegaConf.select(cfg, "hydra.callbacks.run_folder_lock._target_") == "repbench.utils.run_dir.RunFolderLock"


def test_q03_the_callback_locks_the_folder_hydra_then_uses(tmp_path):
    """on_run_start locks the folder that run_job will resolve (the cached run name: no second folder), leaves the
    hydra node writable as it found it, is re-entrant for train() in the same process and releases at the end."""
    cfg = _hydra_cfg("train.yaml", [f"paths.log_dir={tmp_path}", "seed=3"])
    lock = RunFolderLock()
    lock.on_run_start(config=cfg)
    run_dir = Path(OmegaConf.select(cfg, "hydra.run.dir")).resolve()
    assert (run_dir / LOCK_NAME).is_file() and run_dir.parent == tmp_path.resolve() / "train" / "runs"
    assert not OmegaConf.is_readonly(cfg.hydra)
    with RunDirectoryLock(run_dir):  # train() inside the CLI's run
        pass
    assert (run_dir / LOCK_NAME).is_file()  # still the CLI's
    lock.on_run_end(config=cfg)
    assert list(run_dir.iterdir()) == []  # released; nothing else was written


def test_q03_a_folder_held_by_a_live_process_is_refused_naming_the_fix(tmp_path):
    """The refusal is a SystemExit (Hydra turns a callback's exception into a warning and runs on) whose message names
    the folder, the live pid and the fix; nothing is added to the folder."""
    _held_by(os.getppid(), tmp_path / "live")
    with pytest.raises(RunFolderRefused) as refused:
        RunFolderLock().on_run_start(config=_hydra_cfg("report.yaml", [f"hydra.run.dir={tmp_path / 'live'}"]))
    message = str(refused.value.code)
    assert f"run directory {tmp_path / 'live'} is in use by another run (pid {os.getppid()} " in message
    assert "pass another hydra.run.dir" in message and "Nothing was written" in message
    assert [p.name for p in (tmp_path / "live").iterdir()] == [LOCK_NAME]


def test_q03_a_run_inside_a_live_multirun_and_a_multirun_over_a_live_run_are_refused(tmp_path):
    """A multirun locks its sweep folder (its jobs' folders lie inside it, written by Hydra before any job code)."""
    _held_by(os.getppid(), tmp_path / "sweep", kind="multirun")
    with pytest.raises(RunFolderRefused, match=r"lies inside .*sweep, the folder of a live multirun .*hydra\.run\.dir"):
        RunFolderLock().on_run_start(config=_hydra_cfg("train.yaml", [f"hydra.run.dir={tmp_path / 'sweep' / '0'}"]))
    assert not (tmp_path / "sweep" / "0").exists()
    _held_by(os.getppid(), tmp_path / "other" / "0_seed-1")
    with pytest.raises(RunFolderRefused, match=r"0_seed-1 is in use by another run .*hydra\.sweep\.dir"):
        RunFolderLock().on_multirun_start(config=_hydra_cfg("train.yaml", [f"hydra.sweep.dir={tmp_path / 'other'}"]))
    assert not (tmp_path / "other" / LOCK_NAME).exists()


def test_q03_an_unwritable_run_folder_is_refused_naming_the_fix(tmp_path):
    (tmp_path / "a_file").write_text("not a folder")
    with pytest.raises(
        RunFolderRefused, match=r"a_file/run is not writable .*nothing was computed\. Fix: .*hydra\.run"
    ):
        RunFolderLock().on_run_start(
            config=_hydra_cfg("synbench.yaml", [f"hydra.run.dir={tmp_path / 'a_file' / 'run'}"])
        )


def _wait_for(condition, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


@pytest.mark.slow
def test_q03_a_refused_run_writes_nothing_into_the_live_runs_folder(tmp_path):
    """The reproduction at debug sizes, two real processes: run 1 trains in a folder (held alive by many epochs until
    run 2 is done), run 2 is pointed at the same folder. Run 2 exits 1 naming the folder, run 1's pid and the fix;
    the folder's .hydra/config.yaml, overrides.yaml and train.log stay run 1's."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    base = [sys.executable, "-m", "src.train", "backbone=timm_tiny_random", "data.image_size=16",
            "+trainer.limit_train_batches=2", "+trainer.limit_val_batches=2", "trainer.max_epochs=1000", "test=false",
            "callbacks.synbench=null", "callbacks.divergence_radius=null", "callbacks.rich_progress_bar=null",
            "model.eval_epsilons=[]", "model.scheduler=none", "logger=csv", f"hydra.run.dir={tmp_path / 'q3run'}"]  # fmt: skip
    folder = tmp_path / "q3run"
    live = subprocess.Popen([*base, "seed=1"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        # start-up on a loaded 2-core machine takes ~10-20 s; 240 s only bounds a hung start
        _wait_for(lambda: (folder / "checkpoints").is_dir() or live.poll() is not None, 240, "run 1 to start training")
        assert live.poll() is None, live.stderr.read().decode()
        before = {name: (folder / name).read_text() for name in (".hydra/config.yaml", ".hydra/overrides.yaml")}
        refused = subprocess.run([*base, "seed=2"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
        assert live.poll() is None, "run 1 ended before run 2 was refused: the test proves nothing"
    finally:
        live.send_signal(signal.SIGTERM)  # a scheduler's preemption: run 1 stops after its batch (status 143)
        live_err = live.communicate(timeout=120)[1].decode()  # stopping takes a second; 120 s bounds a hang
    assert refused.returncode == 1, refused.stderr
    assert f"run directory {folder} is in use by another run (pid {live.pid} " in refused.stderr
    assert "pass another hydra.run.dir" in refused.stderr and "Nothing was written" in refused.stderr
    assert live.returncode == 143, live_err
    after = {name: (folder / name).read_text() for name in before}
    assert (
        after == before and "seed: 1" in after[".hydra/config.yaml"] and "seed=2" not in after[".hydra/overrides.yaml"]
    )
    log = (folder / "train.log").read_text()
    assert "seed: 1" in log and "seed: 2" not in log and "seed=2" not in log and "RunDirectoryInUse" not in log
    assert not (folder / LOCK_NAME).exists()  # run 1 released its lock on the way out


# ---------------------------------------------------------------- F03: atomic saves
def test_f03_a_failed_save_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch):
    target = tmp_path / "last.ckpt"
    AtomicCheckpointIO().save_checkpoint({"epoch": 0, "w": torch.zeros(1000)}, target)
    good = target.read_bytes()

    def disk_full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(atomic_write.os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space left"):
        AtomicCheckpointIO().save_checkpoint({"epoch": 1, "w": torch.ones(5000)}, target)
    assert target.read_bytes() == good  # the old checkpoint, byte for byte
    assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]  # no partial file left
    assert torch.load(target, weights_only=True)["epoch"] == 0


def test_f03_writes_go_through_a_temporary_file_in_the_target_folder(tmp_path, monkeypatch):
    seen: list[Path] = []
    real_replace = os.replace

    def spy(src, dst):
        seen.append(Path(src))
        real_replace(src, dst)

    monkeypatch.setattr(atomic_write.os, "replace", spy)
    atomic_write_bytes(b"abc", tmp_path / "x.ckpt")
    assert seen and seen[0].parent == tmp_path and (tmp_path / "x.ckpt").read_bytes() == b"abc"


# ---------------------------------------------------------------- F01 / F02 / C14: the resume hint
def _trainer_with(dirpath: Path) -> types.SimpleNamespace:
    mc = ModelCheckpoint(dirpath=dirpath)
    return types.SimpleNamespace(callbacks=[mc], checkpoint_callbacks=[mc], global_step=20)


def test_f02_resume_hint_skips_a_truncated_newer_checkpoint(tmp_path):
    good = tmp_path / "last.ckpt"
    torch.save({"state_dict": {"w": torch.zeros(3)}, "epoch": 0}, good)
    truncated = tmp_path / "epoch_001.ckpt"
    truncated.write_bytes(good.read_bytes()[:200])
    os.utime(good, (1_000_000, 1_000_000))  # the truncated file is the newer one
    hint = train_mod._resume_hint(_trainer_with(tmp_path), "fit failed")
    assert f"ckpt_path={good}" in hint and "epoch_001" not in hint


def test_f01_no_loadable_checkpoint_says_so(tmp_path):
    (tmp_path / "epoch=0-step=2.ckpt").write_bytes(b"PK\x03\x04 truncated")
    (tmp_path / "on_exception.ckpt").write_bytes(b"")
    hint = train_mod._resume_hint(_trainer_with(tmp_path), "fit failed")
    assert "no checkpoint that loads" in hint and "ckpt_path" not in hint


@pytest.mark.parametrize("path", ["logs/r/csv/checkpoints/epoch=0-step=2.ckpt", "/a b/it's/x.ckpt", "plain/last.ckpt"])
def test_c14_resume_argument_is_one_shell_word_hydra_parses_back(path):
    arg = train_mod.resume_argument(path)
    (word,) = shlex.split(arg)  # one word for the shell
    (override,) = OverridesParser.create().parse_overrides([word])
    assert override.key_or_group == "ckpt_path" and override.value() == path


# ---------------------------------------------------------------- C03 / C09 / C12: training length up front
@pytest.mark.parametrize(
    "override, error, match",
    [
        ("trainer.max_epochs=abc", TypeError, r"trainer\.max_epochs must be an integer, got 'abc'"),
        ("trainer.max_epochs=0", ValueError, r"trainer\.max_epochs=0 trains nothing"),
        ("trainer.max_epochs=-1", ValueError, r"max_epochs=-1 .* trainer\.max_steps=N"),
        ("trainer.max_epochs=-3", ValueError, r"trainer\.max_epochs=-3 trains nothing"),
    ],
)
def test_c03_c09_c12_training_length_checked_before_anything(make_cfg, override, error, match):
    cfg = make_cfg(["debug=fast", override])
    with pytest.raises(error, match=match):
        train_mod.train(cfg)
    assert not list(Path(cfg.paths.output_dir).glob("**/*.ckpt"))  # refused before anything was written


def test_c12_infinite_epochs_with_max_steps_or_without_schedule_is_accepted(make_cfg):
    train_mod.check_trainer_length(make_cfg(["debug=fast", "trainer.max_epochs=-1", "+trainer.max_steps=4"]))
    train_mod.check_trainer_length(make_cfg(["debug=fast", "trainer.max_epochs=-1", "model.scheduler=none"]))


# ---------------------------------------------------------------- C15 + summary files
def test_c15_resuming_a_finished_run_names_the_problem_and_summary_files(make_cfg, tmp_path):
    cfg = make_cfg([*OVERRIDES, "trainer.max_epochs=1"])
    metrics, _ = train_mod.train(cfg)
    out = Path(cfg.paths.output_dir)
    summary = json.loads((out / "metrics.json").read_text())
    assert summary["metrics"]["val/acc"] == pytest.approx(metrics["val/acc"], abs=0.0)
    assert summary["last_checkpoint"].endswith("last.ckpt") and summary["seed"] == cfg.seed
    assert summary["pruned_epoch"] is None  # no OptunaPruning stopped this run
    assert "| `val/acc` |" in (out / "summary.md").read_text()
    assert not (out / LOCK_NAME).exists()  # released

    again = make_cfg([*OVERRIDES, "trainer.max_epochs=1", f"ckpt_path={out / 'checkpoints' / 'last.ckpt'}"])
    with open_dict(again):
        again.paths.output_dir = str(tmp_path / "second")
    with pytest.raises(ValueError, match=r"nothing left to train: .*trainer\.max_epochs"):
        train_mod.train(again)


def test_train_uses_atomic_checkpoint_io(make_cfg):
    _, objects = train_mod.train(make_cfg([*OVERRIDES, "trainer.max_epochs=1"]))
    assert isinstance(objects["trainer"].strategy.checkpoint_io, AtomicCheckpointIO)


def test_hparams_dashboard_lists_the_hyperparameters_and_final_metrics(make_cfg):
    """The HParams tab gets scalar hyperparameters (model/lr, ...) and the names of the logged metrics, written after
    fit and test closed their writers."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    cfg = make_cfg([*OVERRIDES, "trainer.max_epochs=1", "logger=tensorboard", "test=true"])
    metrics, _ = train_mod.train(cfg)
    found: dict[str, set[str]] = {}
    for f in Path(cfg.paths.output_dir).rglob("events.out.tfevents*"):
        acc = EventAccumulator(str(f))
        acc.Reload()
        try:
            contents = acc.PluginTagToContent("hparams").values()
        except KeyError:  # an event file without the HParams plugin's data
            continue
        for content in contents:
            data = plugin_data_pb2.HParamsPluginData.FromString(content)
            if data.HasField("experiment"):
                found["metrics"] = {m.name.tag for m in data.experiment.metric_infos}
            if data.HasField("session_start_info"):
                found["hparams"] = set(data.session_start_info.hparams)
    assert {"val/acc", "test/acc"} <= found["metrics"] <= set(metrics)
    assert {"model/lr", "model/epsilon", "backbone/name", "seed"} <= found["hparams"]
