"""DivergenceRadius / CosineRobustness torchmetrics: equal to the functional core, and DDP-exact."""

from __future__ import annotations

import pytest
import torch

from src.divergence_radius import cosine_robustness, divergence_radius
from src.metrics import CosineRobustness, DivergenceRadius
from src.metrics.divergence_radius import robustness_metrics
from tests._multiprocess import run_in_processes

F64 = torch.float64
NAMES = ("brightness", "gaussian_noise", "jpeg_compression")


def _rand(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=F64)


def test_metric_equals_mean_of_functional_values() -> None:
    emb = _rand(7, 3, 6, 10, seed=0)
    for cls, fn in ((DivergenceRadius, divergence_radius), (CosineRobustness, cosine_robustness)):
        metric = cls(NAMES)
        metric.update(emb[:4])
        metric.update(emb[4:])
        out = metric.compute()
        ref = fn(emb).mean(0)
        # float64 sums of 7 values in [0, 1]: a few ulps
        for j, name in enumerate(NAMES):
            assert abs(float(out[name]) - float(ref[j])) <= 1e-14
        assert abs(float(out["mean"]) - float(ref.mean())) <= 1e-14


def test_single_perturbation_updates_and_missing_ones() -> None:
    metric = DivergenceRadius(NAMES)
    metric.update(_rand(3, 6, 4, seed=1), "brightness")
    with pytest.raises(RuntimeError, match="gaussian_noise"):
        metric.compute()
    metric.update_values(torch.tensor([0.1, 0.2], dtype=F64), "gaussian_noise")
    metric.update_values(torch.tensor([0.3], dtype=F64), "jpeg_compression")
    out = metric.compute()
    assert abs(float(out["gaussian_noise"]) - 0.15) <= 1e-15 and abs(float(out["jpeg_compression"]) - 0.3) <= 1e-15


def test_bad_input() -> None:
    with pytest.raises(ValueError, match="distinct"):
        DivergenceRadius(["fog", "fog"])
    metric = DivergenceRadius(NAMES)
    with pytest.raises(ValueError, match="unknown perturbation"):
        metric.update(_rand(2, 6, 4), "frost")
    with pytest.raises(ValueError, match=r"\(N, P, n, D\)"):
        metric.update(_rand(2, 6, 4))
    with pytest.raises(ValueError, match="non-finite"):
        metric.update_values(torch.tensor([[float("nan"), 0.0, 0.0]]))


# ---------------------------------------------------------------- DDP
def _images(n: int) -> torch.Tensor:
    return torch.rand(n, 3, 16, 16, generator=torch.Generator().manual_seed(n))


def tiny_features(x: torch.Tensor) -> torch.Tensor:
    """A fixed random feature map: 4x4 average pooling, a seeded projection to 8 dims, tanh (48 MACs a feature)."""
    w = torch.randn(48, 8, generator=torch.Generator().manual_seed(0))
    return torch.tanh(torch.nn.functional.adaptive_avg_pool2d(x, 4).flatten(1) @ w)


def _sweep(rank: int, world_size: int, n: int) -> dict[str, float]:
    return robustness_metrics(
        _images(n), tiny_features, perturbations=NAMES, m=3, seed=0, chunk_size=2, rank=rank, world_size=world_size
    )


def nan_features(x: torch.Tensor) -> torch.Tensor:
    return tiny_features(x) * float("nan")


def _on_rank(rank: int, world_size: int, values: torch.Tensor, n: int) -> tuple[dict, dict, str]:
    metric = DivergenceRadius(NAMES)
    metric.update_values(values[rank::world_size])  # 3 ranks, 2 rows: rank 2 has an empty (0, P) share
    # a failure on one rank (NaN features on rank 1 only) must raise on every rank, not deadlock the others
    fn = nan_features if rank == 1 else tiny_features
    try:
        robustness_metrics(_images(n), fn, perturbations=NAMES, m=1, chunk_size=1, rank=rank, world_size=world_size)
        failure = ""
    except Exception as exc:
        failure = f"{type(exc).__name__}: {exc}"
    return {k: float(v) for k, v in metric.compute().items()}, _sweep(rank, world_size, n), failure


@pytest.mark.slow
@pytest.mark.parametrize(("world", "n"), [(2, 7), (3, 3)])
def test_ddp_equals_one_process(world: int, n: int) -> None:
    """(a) metric states sum over ranks, an empty rank included: float64 sums of 2 values in another order agree
    to 2 ulps. (b) the sweep in chunks of 2 images over 2 or 3 ranks (n = 3: two chunks, one rank has none). Each
    chunk is computed with the same ops and the same (seed, chunk) noise on any rank; the only difference is the
    float32 feature arithmetic in a 1-thread worker vs this process: a 48-term dot product is exact to ≲ 48·u32 ≈
    3e-6 relative, tanh and the normalisation keep that order, and R_dr (1-Lipschitz) and R_cs (2-Lipschitz) in
    each unit point move by ≲ 1e-5; means inherit that. (c) NaN features on rank 1 raise on every rank."""
    values = torch.rand(2, len(NAMES), dtype=F64, generator=torch.Generator().manual_seed(1))
    metric = DivergenceRadius(NAMES)
    metric.update_values(values)
    ref_metric = {k: float(v) for k, v in metric.compute().items()}
    ref_sweep = _sweep(0, 1, n)
    for rank, res in enumerate(run_in_processes(_on_rank, world, values, n)):
        assert "__error__" not in res, res
        got_metric, got_sweep, failure = res
        assert failure.startswith("FloatingPointError" if rank == 1 else "RuntimeError: 1 other rank(s) failed")
        assert all(abs(got_metric[k] - ref_metric[k]) <= 4e-16 for k in ref_metric)
        assert got_sweep.keys() == ref_sweep.keys()
        assert all(abs(got_sweep[k] - ref_sweep[k]) <= 1e-5 for k in ref_sweep)
