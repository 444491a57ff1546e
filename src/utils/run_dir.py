"""One run, one run directory: an exclusive lock while a run writes into its folder.

Run folders are unique by name (configs/hydra/default.yaml adds a random part to the time stamp), but a user can still
point two runs at one folder (``hydra.run.dir=...``). Two runs writing one folder interleave their logs and leave one
run's ``last.ckpt`` beside the other's best checkpoint and config, all with exit status 0. :class:`RunDirectoryLock`
refuses the second run before it writes anything of its own.
"""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from types import TracebackType

__all__ = ["LOCK_NAME", "OUTPUT_DIR_FIX", "RunDirectoryInUseError", "RunDirectoryLock", "check_writable_dir"]

LOCK_NAME = ".repbench-run.lock"


class RunDirectoryInUseError(RuntimeError):
    """Another live process is writing into this run directory."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # exists, owned by someone else
        return True
    return True


class RunDirectoryLock:
    """``with RunDirectoryLock(run_dir): ...``: create ``<run_dir>/.repbench-run.lock`` exclusively (O_EXCL).

    A lock left by a process that no longer runs on this host (killed with SIGKILL) is taken over; a lock held by a
    live process, or by a process on another host, raises :class:`RunDirectoryInUseError` naming it and the fix.
    The lock file is removed on exit."""

    def __init__(self, run_dir: str | os.PathLike) -> None:
        self.path = Path(run_dir) / LOCK_NAME
        self._held = False

    def _owner(self) -> dict:
        try:
            return json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        me = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%d %H:%M:%S")}
        for _ in range(2):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                owner = self._owner()
                pid, host = owner.get("pid"), owner.get("host")
                if isinstance(pid, int) and host == me["host"] and pid != me["pid"] and not _alive(pid):
                    self.path.unlink(missing_ok=True)  # stale: its process is gone
                    continue
                if pid == me["pid"] and host == me["host"]:
                    raise RunDirectoryInUseError(
                        f"run directory {self.path.parent} is already in use by this process (a run inside a run?)"
                    ) from None
                raise RunDirectoryInUseError(
                    f"run directory {self.path.parent} is in use by another run (pid {pid} on {host}, started "
                    f"{owner.get('started', '?')}): two runs must not write one folder (their checkpoints, configs and "
                    "logs would mix). Give this run its own folder: drop the hydra.run.dir=... override (every run "
                    f"then gets a unique one) or pass another; if no such run is alive, delete {self.path}"
                ) from None
            with os.fdopen(fd, "w") as fh:
                json.dump(me, fh)
            self._held = True
            return
        raise RunDirectoryInUseError(f"could not lock run directory {self.path.parent}: {self.path} keeps reappearing")

    def release(self) -> None:
        if self._held:
            self.path.unlink(missing_ok=True)
            self._held = False

    def __enter__(self) -> RunDirectoryLock:
        self.acquire()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.release()


OUTPUT_DIR_FIX = (
    "point the run at a writable folder, e.g. hydra.run.dir=/tmp/my_run (paths.output_dir follows hydra.run.dir "
    "unless it is overridden itself)"
)


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
        reason = err.strerror or type(err).__name__
        raise OSError(f"output directory {out} is not writable ({reason}); nothing was computed. Fix: {fix}") from err
    return out
