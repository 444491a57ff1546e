"""SynBenchScore: equals the runner on identical samples, and is exact under 2-process DDP (gloo)."""

from __future__ import annotations

import os
import socket

import pytest
import torch
import torch.multiprocessing as mp

from src.metrics import SynBenchScore
from src.metrics.synbench_score import synbench_distributed
from src.synbench import SynBenchConfig, synbench

CFG = SynBenchConfig(
    s_values=(0.5, 1.0, 2.0, 3.0),
    n_train=300,
    n_test=200,
    eps=(0.0, 0.2, 0.4),
    a_T=(0.7,),
    normalization="none",
    chunk_size=64,
    batch_size=64,
)
SHAPE = (3, 4, 4)
_P = torch.randn(48, 10, generator=torch.Generator().manual_seed(0))


def feature_fn(x: torch.Tensor) -> torch.Tensor:
    """A fixed non-linear map of the 48 pixels to 10 features (no normalisation inside)."""
    return torch.tanh(x.flatten(1) @ _P) + 0.1 * x.flatten(1)[:, :10]


feature_fn.mean, feature_fn.std = (0.0, 0.0, 0.0), (1.0, 1.0, 1.0)


def test_metric_reproduces_the_runner_exactly() -> None:
    res = synbench(feature_fn, input_shape=SHAPE, config=CFG)
    out, res2 = synbench_distributed(feature_fn, SHAPE, CFG)
    torch.testing.assert_close(res2.accuracy, res.accuracy, rtol=0, atol=1e-12)
    torch.testing.assert_close(res2.bound, res.bound, rtol=1e-9, atol=1e-12)
    from src.utils import format_eps

    for e in CFG.eps:
        assert out[f"score_eps_{format_eps(e)}"] == pytest.approx(res.score(e), abs=1e-12)
    assert out["score"] == pytest.approx(res.score(0.0), abs=1e-12)
    assert out["best_eps"] == res.best_eps()


def test_update_before_fit_and_empty_compute_are_errors() -> None:
    m = SynBenchScore(CFG)
    with pytest.raises(RuntimeError, match="fit"):
        m.update(torch.zeros(2, 3), torch.tensor([0, 1]), 0)
    with pytest.raises(RuntimeError, match="no test samples"):
        m.compute()


def _worker(rank: int, world: int, port: int, queue) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    try:
        out, res = synbench_distributed(feature_fn, SHAPE, CFG, rank=rank, world_size=world)
        queue.put((rank, out, res.accuracy.tolist(), res.bound.tolist()))
    finally:
        torch.distributed.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.timeout(180)
def test_two_processes_equal_one_process() -> None:
    single, res = synbench_distributed(feature_fn, SHAPE, CFG)
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, 2, port, queue)) for r in range(2)]
    for p in procs:
        p.start()
    got = [queue.get(timeout=150) for _ in procs]
    for p in procs:
        p.join(timeout=30)
    for rank, out, acc, bound in got:
        for k, v in single.items():
            assert out[k] == pytest.approx(v, abs=1e-6), (rank, k)
        torch.testing.assert_close(torch.tensor(acc, dtype=torch.float64), res.accuracy, rtol=0, atol=1e-9)
        torch.testing.assert_close(torch.tensor(bound, dtype=torch.float64), res.bound, rtol=1e-6, atol=1e-9)
