"""The run folder as a user meets it: unique per run (also in the same second), locked while a run writes it,
checkpoints that are never truncated under a valid name, a resume hint that names a checkpoint that loads (quoted for
Hydra), training lengths checked before anything runs, and metrics.json / summary.md at the end.

Cases Q01, Q02, F01, F02, F03, C03, C09, C12, C14, C15 of the reliability audit."""

from __future__ import annotations

import errno
import json
import os
import re
import shlex
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
from hydra.core.override_parser.overrides_parser import OverridesParser
from lightning.pytorch.callbacks import ModelCheckpoint
from omegaconf import open_dict

import src.train as train_mod
from src.utils import atomic_write
from src.utils.checkpoint_io import AtomicCheckpointIO, atomic_write_bytes
from src.utils.hydra_utils import job_name, run_name
from src.utils.run_dir import LOCK_NAME, RunDirectoryInUseError, RunDirectoryLock

from .test_resume import OVERRIDES

ROOT = Path(__file__).resolve().parents[2]


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
