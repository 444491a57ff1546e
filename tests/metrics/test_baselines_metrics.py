"""The baseline torchmetrics equal their functionals on the same data, in any batch order and under DDP."""

from __future__ import annotations

import pytest
import torch

from src.baselines import alpha_req, logme, rankme
from src.metrics import AlphaReQ, LogME, RankMe
from tests._multiprocess import run_in_processes
from tests.baselines.test_spectral import RANK_DEFICIENT, gram_route_tolerance, rank_deficient, rankme_definition

N, D, C = 240, 110, 3


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, C, (N,), generator=g)
    z = torch.randn(N, D, generator=g, dtype=torch.float64) * torch.arange(1, D + 1) ** -0.6 + 0.3
    z[:, 0] += y
    return z.float(), y  # float32 in: promoted to float64 by metrics and functionals alike


def _metrics():
    return {"rankme": RankMe(D), "alpha_req": AlphaReQ(D), "logme": LogME(D, C)}


def _functionals(z, y):
    return {"rankme": rankme(z), "alpha_req": alpha_req(z), "logme": logme(z, y)}


def _feed(metrics, z, y, idx) -> dict[str, float]:
    for part in torch.split(idx, 37):
        metrics["rankme"].update(z[part])
        metrics["alpha_req"].update(z[part])
        metrics["logme"].update(z[part], y[part])
    return {k: float(m.compute()) for k, m in metrics.items()}


# Tolerances: metric and functional factor the same float64 matrices summed in another order (batches of 37
# vs one product): the Gram entries differ by ≈ N·u·max|z|² ≈ 1e-13 relative. RankMe and LogME are smooth in the
# eigenvalues (relative change ≲ κ·1e-13 with the smallest kept σ ≈ 1e-3 of the largest here); α-ReQ fits logs of
# eigenvalues ≥ 1e-3·λ_max: shifts ≤ 1e-10. 1e-9 relative covers all three.
REL = 1e-9


def test_metric_equals_functional_in_any_batch_order() -> None:
    z, y = _data()
    expected = _functionals(z, y)
    for seed in (0, 1):
        order = torch.randperm(N, generator=torch.Generator().manual_seed(seed))
        got = _feed(_metrics(), z, y, order)
        for key, value in expected.items():
            assert got[key] == pytest.approx(value, rel=REL), key


@pytest.mark.parametrize("n, d, rank", RANK_DEFICIENT)
def test_rankme_metric_equals_the_singular_value_definition_on_rank_deficient_features(n, d, rank) -> None:
    # the torchmetric's Gram is Σ over batches of ZᵀZ (D×D, eigensolver dimension D); the bound of
    # gram_route_tolerance covers any summation order (its γ_N·‖|Z|ᵀ|Z|‖ term bounds every order of the n-term sums)
    z = rank_deficient(n, d, rank)
    metric = RankMe(d, eps=0.0)
    for part in torch.split(z, 37):
        metric.update(part)
    expected = rankme_definition(z, 0.0)
    assert abs(float(metric.compute()) - expected) <= gram_route_tolerance(z, 0.0, solver_dim=d) * expected


def test_metric_flags_and_errors() -> None:
    assert RankMe.higher_is_better and LogME.higher_is_better and AlphaReQ.higher_is_better is None
    with pytest.raises(ValueError, match="num_features=4"):
        RankMe(4).update(torch.randn(3, 5))
    with pytest.raises(ValueError, match=r"must lie in \[0, 3\)"):
        LogME(2, 3).update(torch.randn(4, 2), torch.tensor([0, 1, 2, 3]))
    with (
        pytest.raises(ValueError, match="at least 2 samples"),
        pytest.warns(UserWarning, match="before the ``update``"),
    ):
        LogME(2, 3).compute()


def _ddp(rank: int, world_size: int) -> dict[str, float]:
    z, y = _data()
    idx = torch.arange(rank, N, world_size)
    return _feed(_metrics(), z, y, idx)


@pytest.mark.slow
@pytest.mark.timeout(400)
def test_ddp_equals_single_process() -> None:
    results = run_in_processes(_ddp, 2, timeout=300)
    z, y = _data()
    expected = _functionals(z, y)
    for res in results:
        assert "__error__" not in res, res
        for key, value in expected.items():
            assert res[key] == pytest.approx(value, rel=REL), key
