"""Clear early errors and consistent validation: a_T below the grid integral, the eigenvalue cut-off (negative,
mode, scale refusal), feature functions that return no tensor, and full=true = the official protocol."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from src.synbench import SynBenchConfig, synbench
from src.synbench.__main__ import protocol_fields
from src.synbench.bayes import evaluate_representation, retained_eig
from src.synbench.score import synbench_score
from src.synbench.theory import reference_curve
from src.utils.resources import config_dir

CONFIGS = config_dir()

SHAPE = (1, 4, 4)
SMALL = dict(s_values=(0.5, 1.0, 2.0), n_train=400, n_test=400, normalization="none", a_T=(0.7,), eps=(0.0, 0.4))


def flat(x: torch.Tensor) -> torch.Tensor:
    return x.double().flatten(1)


def _kappa() -> float:
    """Condition number of a 16-d sample covariance of 400 Gaussian-I draws (the pooled Σ of ``flat``):
    ≈ ((1 + √(16/400)) / (1 − √(16/400)))² ≈ 2.3."""
    z = torch.randn(SMALL["n_train"], 16, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    return float(torch.linalg.cond(torch.cov(z.T)))


def test_a_T_below_the_grid_is_refused_consistently() -> None:
    # config validation and the score function agree: grid integral needs a_T >= 0.6 (its first point), the
    # exact integral accepts [0.5, 1)
    for a_t in (0.5, 0.55, 0.599):
        with pytest.raises(ValueError, match="a_T"):
            SynBenchConfig(a_T=(a_t,))
        assert SynBenchConfig(a_T=(a_t,), integral="exact").a_T == (a_t,)
    a, b = reference_curve(np.linspace(0.5, 4.5, 9))
    with pytest.raises(ValueError, match="a_T = 0.55"):
        synbench_score(a, b, a, b, 0.55, "grid")
    assert synbench_score(a, b, a, b, 0.6, "grid") == 1.0
    assert synbench_score(0.9 * a + 0.05, b, a, b, 0.55, "exact") != synbench_score(
        0.9 * a + 0.05, b, a, b, 0.6, "exact"
    )
    res = synbench(flat, input_shape=SHAPE, config=SynBenchConfig(**{**SMALL, "a_T": (0.55,), "integral": "exact"}))
    with pytest.raises(ValueError, match="a_T"):
        res.score(0.0, 0.55, "grid")


def test_eig_tol_is_validated() -> None:
    for bad in (-1e-6, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="eig_tol"):
            SynBenchConfig(eig_tol=bad)
        with pytest.raises(ValueError, match="eig_tol"):
            retained_eig(torch.eye(3, dtype=torch.float64), bad)
    with pytest.raises(ValueError, match="eig_tol_mode"):
        SynBenchConfig(eig_tol_mode="percent")


def test_absolute_cut_off_refuses_and_relative_is_scale_invariant() -> None:
    g = torch.Generator().manual_seed(0)
    y = (torch.rand(600, generator=g) < 0.5).long()
    z = torch.randn(600, 6, generator=g, dtype=torch.float64) + 0.8 * (2 * y[:, None] - 1)
    yt = (torch.rand(500, generator=g) < 0.5).long()
    zt = torch.randn(500, 6, generator=g, dtype=torch.float64) + 0.8 * (2 * yt[:, None] - 1)
    base = evaluate_representation(z, y, zt, yt, [0.0, 0.3])
    small = 1e-4  # feature variances ~1e-8 < the official absolute cut-off 1e-6: every direction is dropped
    with pytest.raises(ValueError, match=r"drops 6 of 6 .*100\.0 % .*Fix: eig_tol_mode='relative'"):
        evaluate_representation(small * z, y, small * zt, yt, [0.0, 0.3])
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no warning: the relative cut-off 1e-6·λ_max drops nothing here
        rel = evaluate_representation(small * z, y, small * zt, yt, [0.0, 0.3], eig_tol_mode="relative")
    # Scaling by 1e-4 is exact up to rounding: margins move by ~κ(Σ)·u relative (κ ≈ 2 here), so no count changes
    # (1 count = 1/500 ≫ 1e-9) and bounds agree to 1e-9 ≫ κ·u·(D = 6) ≈ 1e-15.
    torch.testing.assert_close(rel[0], base[0], rtol=0, atol=1e-9)
    torch.testing.assert_close(rel[1], base[1], rtol=1e-9, atol=0)


@pytest.mark.parametrize(
    "fn,err,match",
    [
        (lambda x: (flat(x), flat(x)), TypeError, "tuple"),
        (lambda x: {"z": flat(x)}, TypeError, "dict"),
        (lambda x: flat(x).numpy(), TypeError, "ndarray"),
        (lambda x: flat(x)[:1], ValueError, "batch of"),
    ],
)
def test_feature_fn_must_return_a_feature_tensor(fn, err, match) -> None:
    with pytest.raises(err, match=match):
        synbench(fn, input_shape=SHAPE, config=SynBenchConfig(**SMALL))


def test_full_true_is_the_official_protocol() -> None:
    cfg = OmegaConf.load(CONFIGS / "synbench.yaml")
    cfg.full = True
    fields, size = protocol_fields(cfg)
    assert SynBenchConfig(**fields) == SynBenchConfig() and size is None
    cfg.full = False
    fields, size = protocol_fields(cfg)
    assert SynBenchConfig(**fields) == SynBenchConfig.budget("cpu", **cfg.synbench) and size == cfg.input_size


def test_small_scale_features_are_refused_with_the_absolute_cut_off() -> None:
    # features × 1e-4 have covariance eigenvalues ~1e-8 < the official absolute cut-off 1e-6: once a silent
    # score of 0, then a warning, now an error naming the fix and the config key (at the first s value)
    cfg = SynBenchConfig(**SMALL)
    with pytest.raises(ValueError, match=r"synbench\.eig_tol_mode=relative.*\(s = 0\.5\)"):
        synbench(lambda x: 1e-4 * flat(x), input_shape=SHAPE, config=cfg)
    rel = SynBenchConfig(**{**SMALL, "eig_tol_mode": "relative"})
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        small = synbench(lambda x: 1e-4 * flat(x), input_shape=SHAPE, config=rel)
    base = synbench(flat, input_shape=SHAPE, config=rel)
    # scaling only changes rounding: counts equal, bounds to 10·d·κ·u (κ of Σ ≈ I computed, ≈ 2.3)
    torch.testing.assert_close(small.accuracy, base.accuracy, rtol=0, atol=0.1 / rel.n_test)
    torch.testing.assert_close(small.bound, base.bound, rtol=10 * 16 * _kappa() * 2.0**-53, atol=0)


def test_large_feature_offsets_keep_their_digits() -> None:
    # The protocol accumulates about a common shift (rank 0's first-batch mean). With a zero shift, an offset of
    # 1e6 would cost (1e6)²·u ≈ 1e-4 relative in Σ; with the shift the centred data round at 1e6·u, so the
    # results match the unshifted features to 10·d·κ·u·(1 + 1e6/spread) with κ ≈ 2.3, spread ≈ 1 (≈ 4e-8).
    cfg = SynBenchConfig(**SMALL)
    base = synbench(flat, input_shape=SHAPE, config=cfg)
    off = synbench(lambda x: flat(x) + 1e6, input_shape=SHAPE, config=cfg)
    torch.testing.assert_close(off.accuracy, base.accuracy, rtol=0, atol=0.1 / cfg.n_test)
    torch.testing.assert_close(off.bound, base.bound, rtol=10 * 16 * _kappa() * 2.0**-53 * (1 + 1e6), atol=0)


@pytest.mark.parametrize(
    "field, value, error, match",
    [
        ("n_train", "abc", TypeError, r"^n_train must be an integer >= 4, got 'abc' \(str\)"),  # R29: no '<' on a str
        (
            "n_train",
            2.5,
            TypeError,
            r"^n_train must be an integer >= 4, got 2.5 \(float\); pass a whole number such as 4 \(a fraction is never "
            r"rounded or truncated\)",
        ),
        ("n_train", True, TypeError, r"^n_train must be an integer >= 4"),
        ("n_train", 2, ValueError, r"^n_train must be an integer >= 4, got 2 \(int\)"),
        ("n_test", 0, ValueError, r"^n_test must be an integer >= 1"),
        ("seed", -1, ValueError, r"^seed must be an integer >= 0"),
        ("batch_size", "x", TypeError, r"^batch_size must be an integer >= 1"),
        ("linalg_threads", 0, ValueError, r"^linalg_threads must be an integer >= 1"),
        ("s_values", ["x"], TypeError, r"^s_values must hold numbers only, got 'x' \(str\)"),
        ("class_prior", "half", TypeError, r"^class_prior must hold numbers only"),
    ],
)
def test_r29_fields_are_type_checked_before_they_are_compared(field, value, error, match) -> None:
    with pytest.raises(error, match=match):
        SynBenchConfig(**{field: value})


def test_integral_floats_are_read_as_integers() -> None:
    """Hydra reads ``n_train=1e4`` as the float 10000.0: taken exactly, stored as an int."""
    cfg = SynBenchConfig(n_train=1e4, n_test=np.int64(8), seed=0.0)
    assert (cfg.n_train, cfg.n_test, cfg.seed) == (10000, 8, 0) and type(cfg.n_train) is int
