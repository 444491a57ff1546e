"""Synthetic Gaussian inputs (src/synbench/sampling.py): reproducibility and realised moments."""

import math

import numpy as np
import pytest
import torch

from src.synbench.sampling import (
    apply_banded_factor,
    banded_cholesky,
    banded_margin_scale,
    iter_samples,
    sample,
    sample_chunk,
)

BAND = (1.0, 0.5, 0.25, 0.125)


def _toeplitz(band, n):
    t = np.zeros((n, n))
    for k, c in enumerate(band):
        t += c * (np.eye(n, k=k) + (np.eye(n, k=-k) if k else 0))
    return t


def test_batch_size_independence_and_determinism():
    kw = dict(s=1.3, input_shape=(2, 3, 3), seed=4, split="train", chunk_size=64)
    ref_x, ref_y = sample(600, **kw)
    for bs in (7, 64, 2048):
        batches = list(iter_samples(600, bs, **kw))
        assert all(len(b[1]) == bs for b in batches[:-1])
        x, y = torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches])
        assert torch.equal(x, ref_x) and torch.equal(y, ref_y)
    x2, _ = sample(100, **kw)
    assert torch.equal(x2, ref_x[:100])  # sample i does not depend on n
    assert not torch.equal(sample(600, **{**kw, "seed": 5})[0], ref_x)
    assert not torch.equal(sample(600, **{**kw, "split": "test"})[0], ref_x)
    assert not torch.equal(sample(600, **{**kw, "s": 1.4})[1], ref_y)


def test_identity_moments_and_prior():
    n, s, shape = 40_000, 2.0, (1, 4, 4)
    x, y = sample(n, s=s, input_shape=shape, seed=0, class_prior=0.3)
    x = x.double().flatten(1)
    # class prior: within 5 binomial standard errors
    assert abs(y.double().mean().item() - 0.3) < 5 * math.sqrt(0.3 * 0.7 / n)
    for c, sign in ((1, 1.0), (0, -1.0)):
        xc = x[y == c]
        mean_err = (xc.mean(0) - (0.5 + sign * s / 4.0)).abs()  # μ = 0.5 ± s/√d, d = 16
        assert mean_err.max() < 5 * (1.0 / math.sqrt(len(xc)))  # per-pixel std 1 → SE 1/√n_c
        cov = torch.cov(xc.T).numpy()
        # entry (i, j) of a sample covariance has SE ≈ √((1 + δ_ij)/n_c); 6 SE over 136 entries
        se = np.sqrt((1 + np.eye(16)) / len(xc))
        assert np.all(np.abs(cov - np.eye(16)) < 6 * se)


def test_banded_factor_is_exact_and_sampled_covariance_matches():
    n_pix = 36
    f = banded_cholesky(BAND, n_pix)
    lower = sum(np.diag(f[k, : n_pix - k].numpy(), -k) for k in range(len(BAND)))
    # banded Cholesky is backward stable: ‖LLᵀ − T‖ ≤ c·b·u·‖T‖ (band b = 4, ‖T‖ ≤ c₀ + 2Σ|c_k| = 2.75); c = 10
    np.testing.assert_allclose(lower @ lower.T, _toeplitz(BAND, n_pix), atol=10 * 4 * 2.0**-53 * 2.75)
    e = torch.randn(3, 2, n_pix, dtype=torch.float64)
    # the banded product and the dense one sum the same ≤ b terms in other orders: ≤ b·u·Σ|L_ij e_j|; c = 10
    bound = 10 * 4 * 2.0**-53 * (np.abs(e.numpy()) @ np.abs(lower).T)
    assert np.all(np.abs(apply_banded_factor(e, f).numpy() - e.numpy() @ lower.T) <= bound)

    n = 30_000
    x, y = sample(n, s=0.7, input_shape=(2, 6, 6), seed=1, factor=f)
    x = x.double()
    r = (x - x.mean(0)).reshape(n, -1)
    r = r - 2 * 0.7 / math.sqrt(72) * ((y[:, None].double() - y.double().mean()) * 1.0)  # remove the class mean
    emp = (r.T @ r / n).numpy()
    target = np.kron(np.eye(2), _toeplitz(BAND, n_pix))  # channels independent, Toeplitz band inside
    # Gaussian entries: Var(r_i r_j) = T_ii T_jj + T_ij², so SE = √((T_ii T_jj + T_ij²)/n); 6 SE over the
    # 2628 distinct entries keeps the false-alarm probability below 1e-5
    se = np.sqrt((np.outer(np.diag(target), np.diag(target)) + target**2) / n)
    assert np.all(np.abs(emp - target) < 6 * se + 1e-12)


def test_banded_errors_and_margin_scale():
    with pytest.raises(ValueError, match="not positive definite"):
        banded_cholesky((1.0, 0.9, 0.9, 0.9), 100)
    with pytest.raises(ValueError):
        banded_cholesky((float("nan"),), 4)
    t = _toeplitz(BAND, 49)
    kappa = math.sqrt(np.ones(49) @ np.linalg.solve(t, np.ones(49)) / 49)
    # two solves of T x = 1 (banded Cholesky vs LU) at condition κ(T): 10·n·κ·u relative (n = 49)
    tol = 10 * 49 * np.linalg.cond(t) * 2.0**-53
    assert banded_margin_scale(BAND, 49) == pytest.approx(kappa, rel=tol)
    assert banded_margin_scale((1.0,), 49) == pytest.approx(1.0, rel=10 * 49 * 2.0**-53)  # T = I: sum rounding


def test_channel_affine_folded_into_sampling():
    kw = dict(s=0.5, input_shape=(3, 2, 2), seed=2)
    x, y = sample_chunk(0, **kw)
    scale, shift = torch.tensor([2.0, 0.5, 4.0]), torch.tensor([-1.0, 0.0, 3.0])
    xa, ya = sample_chunk(0, channel_affine=(scale, shift), **kw)
    assert torch.equal(y, ya)
    # float32: the folded affine rounds in another order, a few ulps of the largest operand (|x|·scale + |shift|
    # ≤ ~20 here): atol = 4·u₃₂·20 ≈ 5e-6, rtol 4·u₃₂ ≈ 5e-7
    u32 = 2.0**-24
    torch.testing.assert_close(xa, x * scale.view(3, 1, 1) + shift.view(3, 1, 1), rtol=4 * u32, atol=4 * u32 * 20)
    with pytest.raises(ValueError):
        sample_chunk(0, class_prior=1.0, **kw)


def test_chunk_is_the_chunks_philox_stream():
    """Chunk c = normals of stream chunk_key(seed, s, split, c) (+ the mean), labels = uniforms at LABEL_OFFSET;
    chunk_seed keeps the same 64-bit seed word."""
    from src.rng.philox import normal, stream_key, uniform
    from src.synbench.sampling import LABEL_OFFSET, chunk_key, chunk_seed
    from src.utils.numerics import seed_word

    kw = dict(s=2.0, input_shape=(3, 4, 4), seed=7, split="test", chunk_size=16, mean_offset=0.0)
    x, y = sample_chunk(3, **kw)
    key = chunk_key(7, 2.0, "test", 3)
    assert key == stream_key(7, 2_000_000, 1, 3)
    assert torch.equal(y, (uniform(key, 16, offset=LABEL_OFFSET, dtype=torch.float64) < 0.5).long())
    mean = (2.0 * y.float() - 1.0) * (2.0 / math.sqrt(48))
    assert torch.equal(x, normal(key, (16, 3, 4, 4)) + mean.view(16, 1, 1, 1))
    assert chunk_seed(7, 2.0, "test", 3) == seed_word(7, 2_000_000, 1, 3) & (2**63 - 1)
    assert key == (seed_word(7, 2_000_000, 1, 3) & 0xFFFFFFFF, seed_word(7, 2_000_000, 1, 3) >> 32)
    with pytest.raises(ValueError, match="split"):
        chunk_key(0, 1.0, "val", 0)


def test_chunk_independent_of_threads_and_of_the_device_code_path(monkeypatch):
    """The same chunk with 1 and 2 threads, and through the one-piece path a GPU takes (BLOCK beyond the chunk):
    bit-identical (every word is exact integer arithmetic, the float stage is the same eager ops per value)."""
    from src.rng import philox

    kw = dict(s=0.7, input_shape=(3, 32, 32), seed=1, split="train", chunk_size=64)
    prev = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = sample_chunk(2, **kw)
        torch.set_num_threads(2)
        two = sample_chunk(2, **kw)
    finally:
        torch.set_num_threads(prev)
    monkeypatch.setattr(philox, "BLOCK", 1 << 40)
    piece = sample_chunk(2, **kw)
    for a, b in ((one, two), (one, piece)):
        assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_labels_follow_the_class_prior():
    """4096 labels with τ = 0.3: the count is Binomial(4096, 0.3), sd √(4096·0.21) ≈ 29.3; 6 sd ≈ 176."""
    _, y = sample(4096, s=1.0, input_shape=(2,), seed=3, split="train", chunk_size=256, class_prior=0.3)
    assert abs(int(y.sum()) - 0.3 * 4096) < 6 * math.sqrt(4096 * 0.21)


def test_sample_on_device_is_deprecated_and_has_no_effect():
    from src.synbench.config import SynBenchConfig
    from src.synbench.runner import sampling_device

    with pytest.warns(DeprecationWarning, match="sample_on_device"):
        cfg = SynBenchConfig(sample_on_device=True)
    assert sampling_device(cfg, "cpu") == sampling_device(SynBenchConfig(), "cpu") == torch.device("cpu")


def test_draw_ahead_keeps_the_batches_and_restores_threads():
    from src.synbench.config import SynBenchConfig
    from src.synbench.plan import SamplingPlan
    from src.synbench.protocol import draw_ahead
    from src.utils.distributed import Shard

    cfg = SynBenchConfig(s_values=(1.0,), n_train=300, n_test=10, batch_size=128, chunk_size=64)
    plan = SamplingPlan.from_config(cfg, (3, 4, 4))
    prev = torch.get_num_threads()
    for shard in (Shard(), Shard(1, 2)):
        ref = list(plan.batches(1.0, "train", shard))
        got = list(draw_ahead(plan.batches(1.0, "train", shard), 1, "cpu"))
        assert len(got) == len(ref) and all(torch.equal(a[0], b[0]) for a, b in zip(got, ref))
    assert torch.get_num_threads() == prev


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_chunk_equals_cpu_chunk():
    """Labels bit-identical; noise equal except where a device's float64 log/cos/sin differs from the CPU's in the
    last ulp and that survives the float32 cast (rare: each such value moves by one float32 ulp, ≤ 2⁻²¹ at |z| < 8)."""
    from src.synbench.config import SynBenchConfig
    from src.synbench.plan import SamplingPlan
    from src.synbench.protocol import draw_ahead

    kw = dict(s=0.7, input_shape=(3, 32, 32), seed=1, split="train", chunk_size=256)
    xc, yc = sample_chunk(5, **kw)
    xg, yg = sample_chunk(5, device="cuda", **kw)
    assert torch.equal(yc, yg.cpu())
    assert float((xc != xg.cpu()).double().mean()) < 1e-3 and float((xc - xg.cpu()).abs().max()) < 2.0**-20
    plan = SamplingPlan.from_config(SynBenchConfig(n_train=600, batch_size=256), (3, 8, 8), device="cuda")
    ref = list(plan.batches(1.0, "train"))
    got = list(draw_ahead(plan.batches(1.0, "train"), None, "cuda"))
    torch.cuda.synchronize()
    assert all(torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) for a, b in zip(got, ref))
