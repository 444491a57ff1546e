"""Loss-data curve, MDL, SDL and ε-SC against hand computations."""

from __future__ import annotations

import math

import pytest
import torch

from src.baselines import (
    Bound,
    LossDataCurve,
    eps_sample_complexity,
    log_grid,
    loss_data_curve,
    mdl,
    reprieve_split,
    sdl,
    val_loss,
)


def _frequency_probe(x: torch.Tensor, y: torch.Tensor, c: int):
    """A probe that ignores x: Laplace-smoothed class frequencies of its training subset, (count_c + 1)/(m + C)."""
    p = (torch.bincount(y, minlength=c).double() + 1) / (len(y) + c)
    return lambda z: p.log().expand(len(z), c)


def test_mdl_is_the_hand_computed_online_code() -> None:
    # training labels of the permutation of seed 0 decide the subsets; with the frequency probe everything is by hand
    y = torch.tensor([0, 1, 1, 1, 0, 1, 1, 1])
    x = torch.randn(8, 2, generator=torch.Generator().manual_seed(0))
    yv = torch.tensor([1, 1, 0, 1])
    curve = loss_data_curve(x, y, x[:4], yv, sizes=(2, 4, 8), fit=_frequency_probe, seed=0)
    order = torch.randperm(8, generator=torch.Generator().manual_seed(0))
    losses = []
    for m in (2, 4, 8):
        ones = int(y[order[:m]].sum())
        p1, p0 = (ones + 1) / (m + 2), (m - ones + 1) / (m + 2)
        losses.append(-(3 * math.log(p1) + math.log(p0)) / 4)  # validation: three 1s and one 0
    # per-sample log-losses are exact to a few ulps
    assert curve.losses == pytest.approx(losses, rel=1e-14)
    online = 2 * math.log(2) + 2 * losses[0] + 4 * losses[1]  # first block uniform, then model of the prefix
    reprieve = 2 * losses[0] + 2 * losses[1] + 4 * losses[2]  # each block at the loss of the model trained on it
    assert mdl(curve) == pytest.approx(online, rel=1e-14)
    assert mdl(curve, "reprieve") == pytest.approx(reprieve, rel=1e-14)
    assert val_loss(curve) == losses[-1]
    bits = loss_data_curve(x, y, x[:4], yv, sizes=(2, 4, 8), fit=_frequency_probe, units="bits")
    assert mdl(bits) == pytest.approx(online / math.log(2), rel=1e-14)


def test_sdl_and_eps_sc_on_hand_made_curves() -> None:
    curve = LossDataCurve((10, 100, 1000), (2.0, 1.5, 0.5), num_classes=2)
    # online: 10·max(log 2 − 1, 0) + 90·(2 − 1) + 900·(1.5 − 1) = 0 + 90 + 450
    assert sdl(curve, 1.0) == Bound(540.0, False)
    # reprieve: 10·1 + 90·0.5 + 900·0 = 55
    assert sdl(curve, 1.0, "reprieve") == Bound(55.0, False)
    assert eps_sample_complexity(curve, 1.0) == Bound(1000.0, False)
    assert eps_sample_complexity(curve, 2.0) == Bound(10.0, False)
    never = LossDataCurve((10, 1843), (3.0, 2.0), num_classes=2)
    # the curve ends above ε: lower bounds, printed as the paper's Table 7
    assert eps_sample_complexity(never, 1.0) == Bound(1843.0, True)
    assert str(eps_sample_complexity(never, 1.0)) == "> 1843.00"
    assert sdl(never, 1.0, "reprieve") == Bound(10 * 2.0 + 1833 * 1.0, True)
    # MDL - SDL_1 = n_S when every loss exceeds 1 (reprieve), the relation visible in Table 7 (6820.76 - 4977.76)
    assert mdl(never, "reprieve") - sdl(never, 1.0, "reprieve").value == pytest.approx(1843.0, rel=1e-15)


def test_curve_is_deterministic_and_reaches_low_loss_on_separable_data() -> None:
    g = torch.Generator().manual_seed(0)
    y = torch.randint(0, 2, (300,), generator=g)
    x = torch.randn(300, 5, generator=g, dtype=torch.float64) + 3.0 * y[:, None]
    a = loss_data_curve(x[:200], y[:200], x[200:], y[200:])
    b = loss_data_curve(x[:200], y[:200], x[200:], y[200:])
    assert a == b
    assert a.sizes == log_grid(200) and a.sizes[0] == 10 and a.sizes[-1] == 200
    assert a.losses[-1] < 0.2 < math.log(2)  # well separated (6σ): a linear probe is far better than chance


def test_reprieve_split_gives_1843_of_2048() -> None:
    z, y = torch.zeros(2048, 1), torch.zeros(2048, dtype=torch.long)
    tr, _, va, _ = reprieve_split(z, y)
    assert (len(tr), len(va)) == (1843, 205)


def test_loss_data_bad_input() -> None:
    with pytest.raises(ValueError, match="strictly"):
        LossDataCurve((10, 10), (1.0, 1.0), 2)
    with pytest.raises(ValueError, match="sizes go up to 50"):
        loss_data_curve(torch.randn(20, 2), torch.arange(20) % 2, torch.randn(5, 2), torch.arange(5) % 2, sizes=(5, 50))
    with pytest.raises(ValueError, match="convention"):
        mdl(LossDataCurve((10,), (1.0,), 2), "bits")
    with pytest.raises(ValueError, match="columns"):
        loss_data_curve(torch.randn(20, 2), torch.arange(20) % 2, torch.randn(5, 3), torch.arange(5) % 2)


def test_fit_logistic_warns_only_when_the_convexity_bound_says_the_fit_is_off() -> None:
    import warnings

    import torch

    from src.baselines.loss_data import fit_logistic

    g = torch.Generator().manual_seed(0)
    x = torch.randn(64, 5, generator=g, dtype=torch.float64)
    y = (x[:, 0] > 0).long()
    with pytest.warns(RuntimeWarning, match=r"nats above its minimum"):
        fit_logistic(x, y, 2, max_iter=1)  # one step cannot close a gap of ~0.69 nats
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit_logistic(x, y, 2)  # converged: the bound ||grad||^2 / (2 l2) is far below 1e-6
