"""One run, one run directory: an exclusive lock while a run writes into its folder.

Run folders are unique by name (configs/hydra/default.yaml adds a random part to the time stamp), but a user can still
point two runs at one folder (``hydra.run.dir=...``). Two runs writing one folder interleave their logs and leave one
run's ``last.ckpt`` beside the other's best checkpoint and config, all with exit status 0. :class:`RunDirectoryLock`
refuses the second run.

Every CLI takes the lock before Hydra writes anything into the folder: :class:`RunFolderLock` is a Hydra callback
(``hydra.callbacks.run_folder_lock`` in configs/hydra/default.yaml) whose ``on_run_start`` locks ``hydra.run.dir``
and whose ``on_multirun_start`` locks ``hydra.sweep.dir`` (the jobs' folders lie inside it). Hydra's ``run_job``
writes ``.hydra/config.yaml``, ``hydra.yaml``, ``overrides.yaml`` and the log file before any job callback or the
task function runs, so a lock taken there (as ``train()`` does for in-process callers) would come too late: the
refused run would already have replaced the live run's config. The lock is re-entrant within one process
(``train()`` inside a locked CLI run takes it again).
"""

from __future__ import annotations

import atexit
import json
import os
import socket
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from hydra.experimental.callback import Callback

__all__ = [
    "LOCK_NAME",
    "OUTPUT_DIR_FIX",
    "RunDirectoryInUseError",
    "RunDirectoryLock",
    "RunFolderLock",
    "RunFolderRefused",
    "check_writable_dir",
    "is_child_rank",
]

LOCK_NAME = ".repbench-run.lock"
_HELD: dict[str, int] = {}  # real path of a lock file this process holds -> number of holders (re-entrant lock)


class RunDirectoryInUseError(RuntimeError):
    """Another live process is writing into this run directory."""


class RunFolderRefused(SystemExit):
    """A run folder refused by :class:`RunFolderLock` before Hydra wrote into it (in use, or not writable).

    A SystemExit, not an Exception: Hydra turns an exception raised in a callback into a warning and runs the job
    anyway, so the refusal leaves through it; Python prints the message (the folder, the live pid, the fix) to
    stderr and the process exits with status 1."""


def is_child_rank() -> bool:
    """True in a DDP worker that Lightning launched as a copy of this command (it shares rank 0's run folder)."""
    return any(os.environ.get(k, "0") not in ("", "0") for k in ("LOCAL_RANK", "NODE_RANK", "RANK"))


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists on this host."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


def _read_owner(lock: Path) -> dict[str, Any]:
    """The JSON record of a lock file ({} if unreadable)."""
    try:
        owner = json.loads(lock.read_text())
    except (OSError, ValueError):
        return {}
    return owner if isinstance(owner, dict) else {}


def _owned_by_me(owner: dict[str, Any]) -> bool:
    """Whether a lock record names this process."""
    return owner.get("pid") == os.getpid() and owner.get("host") == socket.gethostname()


def _stale(owner: dict[str, Any]) -> bool:
    """Whether a lock record names a process of this host that no longer runs (killed with SIGKILL)."""
    pid = owner.get("pid")
    return isinstance(pid, int) and owner.get("host") == socket.gethostname() and not _alive(pid)


def _live_owner(lock: str | os.PathLike) -> dict[str, Any] | None:
    """The record of the lock file ``lock`` if another live process (or a process on another host) holds it; None
    when the file is absent, stale or this process's own."""
    path = Path(lock)
    if not path.is_file():
        return None
    owner = _read_owner(path)
    return None if _owned_by_me(owner) or _stale(owner) else owner


def _in_use_message(folder: Path, owner: dict[str, Any], key: str, lock: Path, inside: Path | None = None) -> str:
    """Why ``folder`` is refused (its live owner, pid and host) and the fix (another ``key``)."""
    what = "multirun" if owner.get("kind") == "multirun" else "run"
    where = f"lies inside {inside}, the folder of a live {what}" if inside else f"is in use by another {what}"
    return (
        f"run directory {folder} {where} (pid {owner.get('pid')} on {owner.get('host')}, started "
        f"{owner.get('started', '?')}): two runs must not write one folder (their checkpoints, configs and logs "
        f"would mix). Give this run its own folder: drop the {key}=... override (every run then gets a unique one) "
        f"or pass another {key}; if no such run is alive, delete {lock}"
    )


class RunDirectoryLock:
    """``with RunDirectoryLock(run_dir): ...``: create ``<run_dir>/.repbench-run.lock`` exclusively (O_EXCL).

    A lock left by a process that no longer runs on this host (killed with SIGKILL) is taken over; a lock held by a
    live process, or by a process on another host, raises :class:`RunDirectoryInUseError` naming it and the fix
    (another ``key``: ``hydra.run.dir``, or ``hydra.sweep.dir`` for a multirun, ``kind="multirun"``). Re-entrant
    within a process: a folder this process holds is taken again (counted), and the lock file is removed when the
    last holder releases it."""

    def __init__(self, run_dir: str | os.PathLike, *, key: str = "hydra.run.dir", kind: str = "run") -> None:
        self.path = Path(run_dir) / LOCK_NAME
        self.key, self.kind = key, kind
        self._held = False

    def _owner(self) -> dict[str, Any]:
        return _read_owner(self.path)

    def _id(self) -> str:
        return os.path.realpath(self.path)

    def acquire(self) -> None:
        if _HELD.get(self._id(), 0) > 0:  # this process holds it (the CLI's lock, then train()'s)
            _HELD[self._id()] += 1
            self._held = True
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S"),
              "kind": self.kind}  # fmt: skip
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                owner = self._owner()
                if _stale(owner) or (_owned_by_me(owner) and self._id() not in _HELD):
                    self.path.unlink(missing_ok=True)  # stale: its process is gone (or a forked parent's record)
                    continue
                raise RunDirectoryInUseError(_in_use_message(self.path.parent, owner, self.key, self.path)) from None
            with os.fdopen(fd, "w") as fh:
                json.dump(me, fh)
            _HELD[self._id()] = 1
            self._held = True
            return
        raise RunDirectoryInUseError(f"could not lock run directory {self.path.parent}: {self.path} keeps reappearing")

    def release(self) -> None:
        """Give the lock back (idempotent); the file goes with the last holder of this process."""
        if not self._held:
            return
        self._held = False
        left = _HELD.get(self._id(), 1) - 1
        if left > 0:
            _HELD[self._id()] = left
            return
        _HELD.pop(self._id(), None)
        self.path.unlink(missing_ok=True)

    def __enter__(self) -> RunDirectoryLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


def _resolved_dir(config: Any, key: str) -> Path:
    """The absolute folder of ``key`` (``hydra.run.dir`` / ``hydra.sweep.dir``) of Hydra's composed ``config``, resolved
    as Hydra's ``run_job`` resolves it (the same config object, so cached resolvers such as ``repbench_run_name`` give
    the folder the run then uses)."""
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import OmegaConf

    hydra_config = HydraConfig.instance()
    before, readonly = hydra_config.cfg, config.hydra._get_node_flag("readonly")
    hydra_config.set_config(config)  # as run_job does, so ${hydra:...} interpolations resolve; undone below
    try:
        return Path(os.path.abspath(str(OmegaConf.select(config, key))))
    finally:
        hydra_config.cfg = before
        OmegaConf.set_readonly(config.hydra, readonly)  # set_config made it read-only; a sweeper may still write


def _live_ancestor(folder: Path) -> tuple[Path, dict[str, Any]] | None:
    """A folder above ``folder`` that a live multirun holds (its jobs write below it), with the lock's record."""
    for parent in folder.parents:
        owner = _live_owner(parent / LOCK_NAME)
        if owner is not None and owner.get("kind") == "multirun":
            return parent, owner
    return None


def _live_child(folder: Path) -> tuple[Path, dict[str, Any]] | None:
    """A folder just below ``folder`` (where a multirun's jobs write) that a live run holds, with the lock's record."""
    if not folder.is_dir():
        return None
    for lock in sorted(folder.glob(f"*/{LOCK_NAME}")):
        owner = _live_owner(lock)
        if owner is not None:
            return lock.parent, owner
    return None


class RunFolderLock(Callback):
    """Hydra callback (configs/hydra/default.yaml: ``hydra.callbacks.run_folder_lock``) that locks the run folder
    before Hydra writes into it: ``hydra.run.dir`` at ``on_run_start``, ``hydra.sweep.dir`` at
    ``on_multirun_start``, released at the matching end (and at exit). A folder in use by another live process, a
    run inside a live multirun's folder and a multirun over a live run's folder are refused with
    :class:`RunFolderRefused`: the message (the folder, the live pid, the fix: another ``hydra.run.dir`` /
    ``hydra.sweep.dir``) on stderr, exit status 1, and the live run's ``.hydra/`` files and log stay its own; an
    unwritable folder likewise. DDP worker copies of the command (they share rank 0's folder) take no lock."""

    def __init__(self) -> None:
        self._locks: list[RunDirectoryLock] = []

    def _take(self, config: Any, key: str, kind: str) -> None:
        if is_child_rank():
            return
        folder = _resolved_dir(config, key)
        lock = RunDirectoryLock(folder, key=key, kind=kind)
        try:
            above = _live_ancestor(folder)
            if above is not None:  # a live multirun's jobs write there
                raise RunDirectoryInUseError(_in_use_message(folder, above[1], key, above[0] / LOCK_NAME, above[0]))
            below = _live_child(folder) if kind == "multirun" else None
            if below is not None:  # a live run in what would be one of this multirun's job folders
                raise RunDirectoryInUseError(_in_use_message(below[0], below[1], key, below[0] / LOCK_NAME))
            lock.acquire()
        except RunDirectoryInUseError as err:
            raise RunFolderRefused(f"RunDirectoryInUseError: {err}. Nothing was written into {folder}.") from None
        except OSError as err:  # the folder cannot be created or written: the message check_writable_dir gives
            fix = OUTPUT_DIR_FIX if kind == "run" else SWEEP_DIR_FIX
            raise RunFolderRefused(f"OSError: {_unwritable_message(folder, err, fix)}") from None
        self._locks.append(lock)
        atexit.register(lock.release)

    def _release(self) -> None:
        while self._locks:
            self._locks.pop().release()

    def on_run_start(self, config: Any, **kwargs: Any) -> None:
        self._take(config, "hydra.run.dir", "run")

    def on_run_end(self, config: Any, **kwargs: Any) -> None:
        self._release()

    def on_multirun_start(self, config: Any, **kwargs: Any) -> None:
        self._take(config, "hydra.sweep.dir", "multirun")

    def on_multirun_end(self, config: Any, **kwargs: Any) -> None:
        self._release()


OUTPUT_DIR_FIX = (
    "point the run at a writable folder, e.g. hydra.run.dir=/tmp/my_run (paths.output_dir follows hydra.run.dir "
    "unless it is overridden itself)"
)
SWEEP_DIR_FIX = "point the multirun at a writable folder, e.g. hydra.sweep.dir=/tmp/my_sweep"


def _unwritable_message(path: Path, err: OSError, fix: str) -> str:
    """``output directory <path> is not writable (<reason>); nothing was computed. Fix: <fix>``."""
    reason = err.strerror or type(err).__name__
    return f"output directory {path} is not writable ({reason}); nothing was computed. Fix: {fix}"


def check_writable_dir(path: str | Path, fix: str) -> Path:
    """Create ``path`` if needed and check that a file can be written there, before any work is done; else an
    OSError naming the directory, the reason and ``fix`` (e.g. "set hydra.run.dir=<a writable folder>").

    Shared by the report CLIs (``python -m src.synbench``, ``src.divergence_radius``, ``src.task_prior``), which would
    otherwise find an unwritable output directory only when writing their results, after all the work."""
    import tempfile

    out = Path(path)
    try:
        out.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=out, prefix=".repbench_write_check_"):
            pass
    except OSError as err:
        raise OSError(_unwritable_message(out, err, fix)) from err
    return out
