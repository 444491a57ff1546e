"""The sharded moment loop under torch.distributed (gloo): every rank gets the unsharded totals."""

from __future__ import annotations

import pytest
import torch

from src.task_prior import task_prior_moments
from src.utils.distributed import process_seams
from tests._multiprocess import run_in_processes

N, D, T, BLOCK = 20, 4, 0.05, 16  # 2 row blocks: with 3 ranks one rank owns none and contributes zeros


def _features() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    return torch.randn(N, D, generator=g, dtype=torch.float64), torch.randn(N, D, generator=g, dtype=torch.float64)


def _rank_moments(rank: int, world_size: int) -> tuple[float, float]:
    xe, xp = _features()
    shard, reduce = process_seams()
    assert shard.rank == rank and shard.world_size == world_size
    return task_prior_moments(xe, xp, T, block_size=BLOCK, shard=shard, reduce=reduce)


@pytest.mark.slow
@pytest.mark.parametrize("world_size", [2, 3])
def test_ddp_moments_equal_single_process(world_size):
    """Each rank sums its own blocks (a different order than one process): the difference is bounded by the
    summation rounding n² u Σ|term| ≤ 400 · 2.2e-16 · Σ|M_ij| ≤ 400 · 2.2e-16 · n‖M‖_F = 1.8e-12 < 1e-11
    (M/‖M‖_F has unit Frobenius norm; Var's terms are smaller still)."""
    xe, xp = _features()
    ref = task_prior_moments(xe, xp, T, block_size=BLOCK)
    results = run_in_processes(_rank_moments, world_size)
    for res in results:
        assert not isinstance(res, dict), res
        assert abs(res[0] - ref[0]) <= 1e-11 and abs(res[1] - ref[1]) <= 1e-11
