"""A warm interpreter that runs each documented snippet in a child of its own, forked from it.

Importing torch, Lightning and RepBench takes seconds per interpreter (10 s and more on a busy 2-core machine), more
than most documented snippets take. The server imports them once, before it runs anything; each request (a Python
block, or ``python -m <module> args...``) runs in a fresh fork of that untouched process, in its own working folder,
with its output in a log file: a block cannot see what an earlier one did, as in ``python -c`` / ``python -m``.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

from .markdown import ROOT

_SERVER = r"""
import json, os, runpy, sys, traceback
for name in sys.argv[1:]:
    __import__(name)
reply, sys.stdout = sys.stdout, sys.stderr  # the pipe carries the replies only
print("ready", file=reply, flush=True)
for request in sys.stdin:
    req = json.loads(request)
    pid = os.fork()
    if pid == 0:
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)  # the requests stay the server's
        log = os.open(req["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(log, 1)
        os.dup2(log, 2)
        os.chdir(req["cwd"])
        sys.argv = list(req["argv"])
        code = 0
        try:
            if req.get("module"):
                runpy.run_module(req["module"], run_name="__main__", alter_sys=True)
            else:
                exec(compile(req["code"], "<doc block>", "exec"), {"__name__": "__main__"})
        except SystemExit as e:
            if e.code not in (None, 0):
                print(e.code if not isinstance(e.code, int) else f"exit {e.code}", file=sys.stderr)
                code = e.code if isinstance(e.code, int) else 1
        except BaseException:
            traceback.print_exc()
            code = 1
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    print(json.dumps(os.waitstatus_to_exitcode(status)), file=reply, flush=True)
"""

# imported once by the server: what the snippets import (the rest each child imports itself)
PRELOAD = (
    "torch",
    "lightning",
    "timm",
    "matplotlib.pyplot",
    "src.backbones",
    "src.callbacks",
    "src.metrics",
    "src.synbench",
    "src.divergence_radius",
    "src.task_prior",
    "src.sweep_report",
)


class ForkServer:
    def __init__(self, env: dict[str, str], preload: tuple[str, ...] = PRELOAD) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _SERVER, *preload],
            cwd=ROOT,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group: close() ends the server and a hung child together
        )
        assert self._reply(600) == "ready", "the fork server did not start"

    def _reply(self, timeout: float) -> str:
        ready, _, _ = select.select([self.proc.stdout], [], [], timeout)
        if not ready:
            self.close()
            raise TimeoutError(f"no reply from the fork server within {timeout:.0f} s (killed)")
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the fork server exited ({self.proc.poll()})")
        return line.strip()

    def run(
        self, cwd: Path, *, code: str = "", module: str = "", argv: list[str] | None = None, timeout: float = 300
    ) -> tuple[int, str]:
        """(exit status, output) of ``code`` (a Python block) or ``python -m module *argv`` run in ``cwd``."""
        log = Path(cwd) / "output.log"
        req = {
            "cwd": str(cwd),
            "log": str(log),
            "code": code,
            "module": module,
            "argv": [module or "-c", *(argv or [])],
        }
        try:
            self.proc.stdin.write(json.dumps(req) + "\n")
            self.proc.stdin.flush()
            status = int(self._reply(timeout))
        except BaseException:  # a timeout or an interrupt: a later reply would answer the next request
            self.close()
            raise
        return status, log.read_text(errors="replace")

    def close(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()


_shared: ForkServer | None = None


def shared_server() -> ForkServer:
    """One server for the session (the docs tests of every module share it), closed when the interpreter exits."""
    global _shared
    if _shared is None or _shared.proc.poll() is not None:
        import atexit

        env = {**os.environ, "HF_HUB_OFFLINE": "1", "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"}
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        _shared = ForkServer(env)
        atexit.register(_shared.close)
    return _shared
