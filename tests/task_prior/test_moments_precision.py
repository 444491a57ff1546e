"""Precision and device of the tiled moments (issue 17): float32 products within their derived bound, "auto" choosing
by the bound at the given temperature, the row-scale fold at extreme temperatures, CUDA equal to the CPU."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.special import expit

from src.task_prior import centered_cosine_kernel, task_prior_moments
from src.task_prior.kernels import CenteredCosine
from src.task_prior.moments import (
    F32_CHUNK,
    U32,
    choose_precision,
    float32_error_bounds,
    float32_product_error,
    kernel_source,
)
from tests.task_prior.test_moments import _features, _numpy_kernel, _numpy_moments, _tolerances


def _reference(xe: torch.Tensor, xp: torch.Tensor, t: float):
    """Dense numpy float64 kernels with the explicit centring matrix (independent of the factored loop): M/‖M‖_F,
    raw K, and the moments."""
    m = _numpy_kernel(xe.numpy())
    m = m / np.linalg.norm(m)
    k = _numpy_kernel(xp.numpy())
    return m, k, _numpy_moments(m, k, t)


def _float32_bounds(m: np.ndarray, k: np.ndarray, t: float, rho_m: float, rho_k: float) -> tuple[float, float]:
    """The bounds of ``float32_error_bounds``' docstring on |ΔE| and |ΔVar| (both kernels' products in float32):
    K part ρ_K·Σ|M|σ and ρ_K·Var; M part ρ_M‖M‖_F‖σ‖_F and 2ρ_M‖M‖_F‖M∘w‖_F + ρ_M²‖M‖_F²/4, times (1 + ρ_K)."""
    p = expit(k / t)
    w = p * (1 - p)
    fro = np.linalg.norm(m)
    var = float((m**2 * w).sum())
    be = rho_k * float((np.abs(m) * p).sum()) + (1 + rho_k) * rho_m * fro * np.linalg.norm(p)
    bv = rho_k * var + (1 + rho_k) * (2 * rho_m * fro * np.linalg.norm(m * w) + rho_m**2 * fro**2 / 4)
    return be, bv


def test_float32_product_error_closed_form():
    # γ_{L+3} with L = min(chunk, D): the chunk caps the float32 accumulation length
    assert float32_product_error(5) == pytest.approx(8 * U32 / (1 - 8 * U32), rel=1e-15)
    k = (F32_CHUNK + 3) * U32
    assert float32_product_error(10_000) == pytest.approx(k / (1 - k), rel=1e-15)


@pytest.mark.parametrize("temperature", [0.01, 0.3])
@pytest.mark.parametrize("dim", [5, 300])  # 300 > F32_CHUNK: two chunks summed in float64
def test_float32_products_within_the_derived_bound(temperature, dim):
    n = 70
    xe, xp = _features(n, dim, 0), _features(n, dim, 1)
    m, k, (e_ref, v_ref) = _reference(xe, xp, temperature)
    rho_m, rho_k = float32_error_bounds(CenteredCosine(xe), CenteredCosine(xp), temperature)
    assert 0 < rho_m < 1e-3 and 0 < rho_k < 1e-1  # the bound is informative at these sizes
    e, v = task_prior_moments(xe, xp, temperature, block_size=16, precision="float32")
    be, bv = _float32_bounds(m, k, temperature, rho_m, rho_k)
    tol_e, tol_v = _tolerances(m, k, temperature, dim)  # the float64 reference's own rounding, on top
    assert abs(e - e_ref) <= be + tol_e
    assert abs(v - v_ref) <= bv + tol_v
    # and float32 really ran: the float64 path is much closer (its tolerance is ~1e-13, the float32 error ≥ 1e-12
    # for any non-trivial product of length ≥ 5 at these magnitudes)
    e64, v64 = task_prior_moments(xe, xp, temperature, block_size=16)
    assert abs(e64 - e_ref) <= tol_e and abs(v64 - v_ref) <= tol_v
    assert (e, v) != (e64, v64)


def test_float32_bound_terms_match_their_definitions():
    """ρ_K = expm1(c·max‖x̃_i‖²/(‖K‖·T)), ρ_M = c·tr(M)/‖M‖_F, recomputed from the dense kernels (tr and ‖·‖_F of
    the raw M; max‖x̃_i‖² = max K_ii); agreement to 1e-12 relative (float64 sums of ≤ 70·300 terms)."""
    n, d, t = 70, 300, 0.05
    xe, xp = _features(n, d, 2), _features(n, d, 3)
    m_raw, k_raw = _numpy_kernel(xe.numpy()), _numpy_kernel(xp.numpy())
    c = float32_product_error(d)
    rho_m, rho_k = float32_error_bounds(CenteredCosine(xe), CenteredCosine(xp), t, prior_norm=2.0)
    assert rho_m == pytest.approx(c * np.trace(m_raw) / np.linalg.norm(m_raw), rel=1e-12)
    assert rho_k == pytest.approx(np.expm1(c * np.diag(k_raw).max() / 2.0 / t), rel=1e-12)
    # tr(M)/‖M‖_F ≤ √rank(M) ≤ √(d − 1)... here rank ≤ min(n − 1, d): the bound is c·√rank at worst
    assert rho_m <= c * np.sqrt(min(n - 1, d)) * (1 + 1e-12)


def test_auto_chooses_by_the_bound_at_the_given_temperature():
    n, d = 40, 8
    xe, xp = _features(n, d, 4), _features(n, d, 5)
    msrc, ksrc = CenteredCosine(xe), CenteredCosine(xp)
    rho_m, rho_k = float32_error_bounds(msrc, ksrc, 1.0)
    # ρ_K ∝ 1/T (for small ε): at T = 1 with rtol just above both bounds everything is float32 ...
    rtol = 1.01 * max(rho_m, rho_k)
    assert choose_precision("auto", msrc, ksrc, 1.0, rtol=rtol) == (torch.float32, torch.float32)
    # ... at T = 1e-4 K's bound is 10⁴× larger: K falls back to float64, M (no T in its bound) stays float32
    assert choose_precision("auto", msrc, ksrc, 1e-4, rtol=rtol) == (torch.float32, torch.float64)
    assert choose_precision("float64", msrc, ksrc, 1.0) == (torch.float64, torch.float64)
    assert choose_precision("float32", msrc, ksrc, 1e-9) == (torch.float32, torch.float32)
    # auto's result: within the float32 bound of the reference at T = 1, equal to the float64 path at tiny rtol
    m, k, (e_ref, v_ref) = _reference(xe, xp, 1.0)
    e, v = task_prior_moments(xe, xp, 1.0, precision="auto", rtol=rtol)
    be, bv = _float32_bounds(m, k, 1.0, rho_m, rho_k)
    tol_e, tol_v = _tolerances(m, k, 1.0, d)
    assert abs(e - e_ref) <= be + tol_e and abs(v - v_ref) <= bv + tol_v
    assert task_prior_moments(xe, xp, 1.0, precision="auto", rtol=1e-12) == task_prior_moments(xe, xp, 1.0)


def test_dense_kernels_have_no_float32_products():
    """Precomputed kernels are used as given: their bound is 0 and "float32" changes nothing."""
    x = _features(20, 4, 6)
    k = centered_cosine_kernel(x)
    assert float32_error_bounds(kernel_source(None, k, "eval"), kernel_source(None, k, "prior"), 0.1) == (0.0, 0.0)
    a = task_prior_moments(None, None, 0.1, eval_kernel=k, prior_kernel=k)
    assert task_prior_moments(None, None, 0.1, eval_kernel=k, prior_kernel=k, precision="float32") == a


@pytest.mark.parametrize("temperature", [1e-310, 5e-324])
def test_extreme_temperature_does_not_fold_an_infinite_scale(temperature):
    """1/(‖K‖·T) overflows float64: the tile is divided after the product (K/T = ±inf, never 0·inf = NaN). The limit
    is the step σ -> 1[K > 0]: E = Σ M_ij 1[K_ij > 0] (no K entry is within 1e-10 of 0 here, far above the 1e-15
    rounding of an entry), Var = 0 (w = σ(x)σ(−x) = 0 at x = ±inf)."""
    n, d = 30, 4
    xe, xp = _features(n, d, 7), _features(n, d, 8)
    m = centered_cosine_kernel(xe, frobenius=True).numpy()
    k = centered_cosine_kernel(xp).numpy()
    assert np.abs(k).min() > 1e-10
    e, v = task_prior_moments(xe, xp, temperature, block_size=7)
    # Σ of n² = 900 terms |M_ij| ≤ 1 in two orders: ≤ 2·n²·u·Σ|M| of rounding
    assert abs(e - float((m * (k > 0)).sum())) <= 2 * n * n * np.finfo(np.float64).eps * np.abs(m).sum()
    assert v == 0.0


def test_bad_precision_and_rtol_raise_clearly():
    x = _features(10, 3, 9)
    with pytest.raises(ValueError, match=r"precision must be one of .*'float64'"):
        task_prior_moments(x, x, 0.1, precision="fp16")
    with pytest.raises(ValueError, match="rtol must be a finite number > 0"):
        task_prior_moments(x, x, 0.1, precision="auto", rtol=0.0)


def test_device_argument_on_cpu_is_the_same_computation():
    x, y = _features(30, 4, 10), _features(30, 4, 11)
    assert task_prior_moments(x, y, 0.05, device="cpu") == task_prior_moments(x, y, 0.05)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("precision", ["float64", "float32"])
def test_cuda_equals_cpu(precision):
    """The same loop on CUDA: float64 within the float64 tolerance (different BLAS order), float32 within twice the
    float32 bound (each device's error is within the bound of the exact value)."""
    n, d, t = 300, 40, 0.05
    xe, xp = _features(n, d, 12), _features(n, d, 13)
    a = task_prior_moments(xe, xp, t, block_size=128, precision=precision)
    b = task_prior_moments(xe, xp, t, block_size=128, precision=precision, device="cuda")
    m, k, _ = _reference(xe, xp, t)
    tol_e, tol_v = _tolerances(m, k, t, d)
    if precision == "float32":
        be, bv = _float32_bounds(m, k, t, *float32_error_bounds(CenteredCosine(xe), CenteredCosine(xp), t))
        tol_e, tol_v = tol_e + 2 * be, tol_v + 2 * bv
    assert abs(a[0] - b[0]) <= tol_e and abs(a[1] - b[1]) <= tol_v


def test_float32_products_run_with_tf32_off_whatever_the_process_set(monkeypatch):
    """The float32 error bound assumes IEEE products: _product switches TF32 off around its GEMMs (and restores the
    caller's switch). Checked through the switch torch.mm sees, on any device."""
    from src.task_prior import moments as mod

    seen = []
    real_mm = torch.mm

    def spy(*args, **kwargs):
        seen.append(torch.backends.cuda.matmul.allow_tf32)
        return real_mm(*args, **kwargs)

    before = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = True
    try:
        monkeypatch.setattr(mod.torch, "mm", spy)
        a = torch.randn(4, 300)
        out = torch.empty(4, 4, dtype=torch.float64)
        mod._product(a, a, out, torch.empty(4, 4))
        assert seen and not any(seen) and torch.backends.cuda.matmul.allow_tf32
    finally:
        torch.backends.cuda.matmul.allow_tf32 = before


def test_config_carries_the_moment_precision_to_the_prior_matrix():
    """TaskPriorConfig.moment_precision / moment_rtol reach task_prior_moments (prior_matrix): float32 moments within
    1e-5 relative of float64 on tiny features (the derived bound at these sizes is ~1e-5 or below: D = 8, T = 0.01,
    moment terms O(1)); a bad value is refused by the one validator."""
    from src.task_prior import TaskPriorConfig
    from src.task_prior.matrix import prior_matrix

    g = torch.Generator().manual_seed(0)
    feats = {"a": torch.randn(40, 8, generator=g), "b": torch.randn(40, 8, generator=g)}
    exact = prior_matrix(feats, TaskPriorConfig(prior_backbone="embedded:efficientnet_lite0"))
    f32 = prior_matrix(feats, TaskPriorConfig(prior_backbone="embedded:efficientnet_lite0", moment_precision="float32"))
    assert torch.allclose(f32["mean"], exact["mean"], rtol=1e-5) and not torch.equal(f32["var"], exact["var"])
    with pytest.raises(ValueError, match=r"moment_precision must be one of \('float64', 'float32', 'auto'\)"):
        TaskPriorConfig(moment_precision="half")
