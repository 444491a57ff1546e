"""Run a function in ``world_size`` CPU processes joined by a gloo process group (DDP tests)."""

from __future__ import annotations

import os
import pickle
import socket
import tempfile
from collections.abc import Callable
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world_size: int, port: int, fn: Callable, args: tuple, out_dir: str) -> None:
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world_size)
    try:
        result = fn(rank, world_size, *args)
    except BaseException as exc:  # reported to the parent
        result = {"__error__": f"{type(exc).__name__}: {exc}"}
    with open(os.path.join(out_dir, f"rank{rank}.pkl"), "wb") as f:  # our own results, not a checkpoint
        pickle.dump(result, f)
    dist.destroy_process_group()


def run_in_processes(fn: Callable[..., Any], world_size: int, *args: Any, timeout: float = 300.0) -> list[Any]:
    """``[fn(rank, world_size, *args) for each rank]``, each in its own spawned process inside one gloo group.

    ``fn`` must be importable (module level). A rank that raises yields ``{"__error__": "Type: message"}``; a hang
    beyond ``timeout`` seconds kills the processes and fails with TimeoutError.
    """
    ctx = mp.get_context("spawn")
    port = _free_port()
    with tempfile.TemporaryDirectory() as out_dir:
        procs = [ctx.Process(target=_worker, args=(r, world_size, port, fn, args, out_dir)) for r in range(world_size)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout)
        alive = [p for p in procs if p.is_alive()]
        for p in alive:
            p.kill()
        if alive:
            raise TimeoutError(
                f"{len(alive)} of {world_size} processes still running after {timeout:.0f} s (deadlock?)"
            )
        results = []
        for r in range(world_size):
            path = os.path.join(out_dir, f"rank{r}.pkl")
            if not os.path.exists(path):
                raise RuntimeError(f"rank {r} exited with code {procs[r].exitcode} and no result")
            with open(path, "rb") as f:
                results.append(pickle.load(f))
        return results
