"""Philox-4x32-10 (src/rng/philox.py): published known answers, counter/offset algebra, independence of the work
split (threads, blocks, compiled vs eager), and the distribution of bits, uniforms and normals."""

from __future__ import annotations

import math

import pytest
import torch

from src.rng import philox
from src.rng.philox import normal, philox4x32, random_bits, stream_key, uniform

# Random123's known-answer vectors, tests/kat_vectors of https://github.com/DEShawResearch/random123 (D. E. Shaw
# Research; the reference implementation of Salmon et al., SC 2011): name, rounds, counter (4 words), key (2 words),
# expected output (4 words).
KAT = """
philox4x32 7 00000000 00000000 00000000 00000000 00000000 00000000   5f6fb709 0d893f64 4f121f81 4f730a48
philox4x32 7 ffffffff ffffffff ffffffff ffffffff ffffffff ffffffff   5207ddc2 45165e59 4d8ee751 8c52f662
philox4x32 7 243f6a88 85a308d3 13198a2e 03707344 a4093822 299f31d0   4dfccaba 190a87f0 c47362ba b6b5242a
philox4x32 10 00000000 00000000 00000000 00000000 00000000 00000000   6627e8d5 e169c58d bc57ac4c 9b00dbd8
philox4x32 10 ffffffff ffffffff ffffffff ffffffff ffffffff ffffffff   408f276d 41c83b0e a20bc7c6 6d5451fd
philox4x32 10 243f6a88 85a308d3 13198a2e 03707344 a4093822 299f31d0   d16cfe09 94fdcceb 5001e420 24126ea1
"""


def _kat() -> list[tuple[int, list[int], list[int], list[int]]]:
    rows = []
    for line in KAT.strip().splitlines():
        f = line.split()
        words = [int(v, 16) for v in f[2:]]
        rows.append((int(f[1]), words[:4], words[4:6], words[6:]))
    return rows


@pytest.mark.parametrize("rounds,counter,key,expected", _kat())
def test_known_answers(rounds, counter, key, expected):
    out = philox4x32(torch.tensor(counter), tuple(key), rounds=rounds)
    assert out.tolist() == expected
    assert philox4x32(torch.tensor([counter, counter]), torch.tensor(key), rounds=rounds).tolist() == [expected] * 2


def _explicit(key, first, count):
    """Words of counters first … first+count−1 through philox4x32 with the documented counter layout."""
    idx = torch.arange(first, first + count)
    ctr = torch.stack([idx & 0xFFFFFFFF, idx >> 32, torch.zeros_like(idx), torch.zeros_like(idx)], -1)
    return philox4x32(ctr, key).reshape(-1)


def test_counter_layout_across_the_32_bit_boundary():
    key = stream_key(7)
    first = (1 << 32) - 3  # counters 2^32−3 … 2^32+2: the low word wraps, the high word carries
    got = random_bits(key, 24, offset=4 * first)
    assert torch.equal(got, _explicit(key, first, 6))
    assert got.view(6, 4).unique(dim=0).shape[0] == 6  # the carry gives new counters, not repeats


@pytest.mark.parametrize("k,n", [(0, 5), (1, 7), (3, 1), (5, 40000), (12345, 70001)])
def test_offsets(k, n):
    key = stream_key(1, 2, 3)
    assert torch.equal(random_bits(key, n, offset=k), random_bits(key, n + k)[k:])
    assert torch.equal(normal(key, n, offset=k), normal(key, n + k)[k:])
    assert torch.equal(uniform(key, n, offset=k), uniform(key, n + k)[k:])


def test_stream_key_and_key_forms():
    k = stream_key(0, 1)
    assert k != stream_key(1, 0) and all(0 <= w < 2**32 for w in k)
    assert torch.equal(random_bits(k, 10), random_bits(torch.tensor(k), 10))
    with pytest.raises(ValueError, match="key words"):
        random_bits((2**32, 0), 3)
    with pytest.raises(ValueError, match="stream_key"):
        stream_key()
    with pytest.raises(ValueError, match=r"n must be an integer >= 0"):
        random_bits(k, -1)
    with pytest.raises(ValueError, match="counter"):
        philox4x32(torch.zeros(3, dtype=torch.int64), k)


def test_threads_blocks_and_compiled_give_the_same_words(monkeypatch):
    """The work split never changes a word: 1 vs 2 threads (the compiled kernel's loop split), BLOCK (used only by
    the eager CPU path) small or huge, the compiled words against :func:`counter_words` across the 2³³ carry."""
    key = stream_key(42)
    monkeypatch.setattr(philox, "BLOCK", 1 << 13)
    n = 9 * 4 * philox.BLOCK + 13  # ten CPU pieces
    prev = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = random_bits(key, n, offset=3), normal(key, n, offset=1)
        torch.set_num_threads(2)
        two = random_bits(key, n, offset=3), normal(key, n, offset=1)
    finally:
        torch.set_num_threads(prev)
    assert torch.equal(one[0], two[0]) and torch.equal(one[1], two[1])
    monkeypatch.setattr(philox, "BLOCK", 1 << 40)  # one piece, as on a GPU
    assert torch.equal(random_bits(key, n, offset=3), one[0])
    assert torch.equal(normal(key, n, offset=1), one[1])
    first = torch.tensor((1 << 33) - 100)
    k0, k1 = torch.tensor(key[0]), torch.tensor(key[1])
    fused = philox._fused(torch.device("cpu"))  # compiled unless REPBENCH_PHILOX_COMPILE=0 or no compiler
    assert torch.equal(fused(first, 1000, k0, k1), philox.counter_words(torch.arange(1000) + first, k0, k1))


def test_compiled_and_eager_give_the_same_numbers(monkeypatch):
    """The compiled kernel (rounds + Box–Muller + cast fused) and eager ops give the same words, and on the CPU the
    same normals bit for bit (both evaluate float64 log / cos / sin with the same vectorised library; a last-ulp
    float64 difference would survive the float32 cast with probability ~2^-29 per value, so 10^5 values are equal
    unless the paths really differ); at 1 and 2 threads, over several pieces."""
    key, n = stream_key(77), 100_003
    monkeypatch.setattr(philox, "BLOCK", 1 << 12)  # several pieces
    monkeypatch.setenv("REPBENCH_PHILOX_COMPILE", "0")  # eager, in pieces of 4·BLOCK values
    monkeypatch.setattr(philox, "_FUSED", {})
    eager = random_bits(key, n, offset=5), normal(key, n, offset=3)
    monkeypatch.undo()
    monkeypatch.setattr(philox, "BLOCK", 1 << 12)
    prev = torch.get_num_threads()
    try:
        for threads in (1, 2):  # compiled (unless REPBENCH_PHILOX_COMPILE=0 or no compiler: then eager again)
            torch.set_num_threads(threads)
            assert torch.equal(random_bits(key, n, offset=5), eager[0])
            assert torch.equal(normal(key, n, offset=3), eager[1])
    finally:
        torch.set_num_threads(prev)


def test_bits_are_uniform_chi_square():
    """Top and bottom bytes of 2^18 words in 256 bins: X² ~ χ²(255) (mean 255, sd √510 ≈ 22.6) for a correct
    generator; the bound 400 is ≈ 6 sd (Wilson–Hilferty z ≈ 5.6, p ≈ 1e-8), so it fails only for real bias."""
    w = random_bits(stream_key(2024), 1 << 18)
    assert int(w.min()) >= 0 and int(w.max()) < 2**32
    expected = w.numel() / 256
    for byte in (w >> 24, w & 0xFF):
        counts = torch.bincount(byte, minlength=256).double()
        assert float(((counts - expected) ** 2 / expected).sum()) < 400


def test_uniform_open_interval():
    key = stream_key(5)
    for dtype in (torch.float64, torch.float32, torch.float16, torch.bfloat16):
        u = uniform(key, (64, 1024), dtype=dtype)
        assert u.dtype == dtype and u.shape == (64, 1024)
        assert float(u.min()) > 0 and float(u.max()) < 1
    # extreme words map inside (0, 1) for every dtype: word 0 → 2^-33, word 2^32−1 → 1 − 2^-33
    edge = torch.tensor([0.5, 2.0**32 - 0.5], dtype=torch.float64) * 2.0**-32
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        v = philox._open_unit(edge.clone(), dtype)
        assert float(v[0]) > 0 and float(v[1]) < 1


def test_normal_moments():
    """n = 2^20 normals. Box–Muller's pair (r cos θ, r sin θ) is uncorrelated in z, z², z³ and z⁴
    (E[r^k]·E[cos^a θ sin^b θ] factorises: E r⁴ · E cos²sin² = 8/8 = 1 = E z² E z², E r⁸ E cos⁴sin⁴ = 384·3/128 = 9),
    so the sample moments have their i.i.d. standard errors: mean 1/√n, variance √(2/n), skewness √(6/n), excess
    kurtosis √(24/n). Tolerances are 6 of them (a correct generator fails with p < 1e-8 each)."""
    n = 1 << 20
    z = normal(stream_key(9, 9), n, dtype=torch.float64)
    m = float(z.mean())
    c = z - m
    var = float((c**2).mean())
    skew = float((c**3).mean()) / var**1.5
    kurt = float((c**4).mean()) / var**2 - 3
    assert abs(m) < 6 / math.sqrt(n)
    assert abs(var - 1) < 6 * math.sqrt(2 / n)
    assert abs(skew) < 6 * math.sqrt(6 / n)
    assert abs(kurt) < 6 * math.sqrt(24 / n)
    assert float(z.abs().max()) <= math.sqrt(2 * 33 * math.log(2))  # u1 >= 2^-33
    # float32 is the float64 value rounded once
    assert torch.equal(normal(stream_key(9, 9), 1000), z[:1000].float())


def test_normal_shape_and_dtype_errors():
    key = stream_key(1)
    assert normal(key, (2, 3, 5)).shape == (2, 3, 5)
    assert normal(key, 0).numel() == 0
    with pytest.raises(ValueError, match="floating"):
        normal(key, 4, dtype=torch.int64)


def test_tensor_keys_and_counters_are_range_checked_like_the_pair_form():
    # PX13/PX14/PX34: a key or counter word outside [0, 2**32) once gave "words" < 0 or >= 2**32, uniforms outside
    # (0, 1) and NaN normals; the pair form was refused, the tensor form is now refused the same way
    for key in (torch.tensor([-1, 5]), torch.tensor([2**33, 5]), torch.tensor([2**63 + 5, 3], dtype=torch.uint64)):
        for draw in (random_bits, normal, uniform):
            with pytest.raises(ValueError, match=r"key words must lie in \[0, 2\*\*32\).*stream_key"):
                draw(key, 8)
    with pytest.raises(ValueError, match=r"counter words must lie in \[0, 2\*\*32\)"):
        philox4x32(torch.tensor([[2**40, 2**33, -5, 0]]), (0, 0))
    with pytest.raises(ValueError, match="key must be an integer Tensor"):
        random_bits(torch.tensor([True, False]), 3)
    # in range, every integer dtype is one key: the same words as the pair
    words = random_bits((7, 2**32 - 1), 9)
    for dtype in (torch.int64, torch.uint32):
        assert torch.equal(random_bits(torch.tensor([7, 2**32 - 1], dtype=dtype), 9), words)


def test_fractional_seeds_counts_offsets_are_refused_not_truncated():
    # PX10/PX30/PX31: int() made stream_key(1.5) == stream_key(1), n=2.7 drew 2 values and offset=1.9 read from 1
    key = stream_key(0)
    with pytest.raises(TypeError, match=r"stream_key word 0 must be an integer, got 1.5 \(float\)"):
        stream_key(1.5)
    with pytest.raises(TypeError, match=r"^n must be an integer >= 0 .*got 2.7 \(float\)"):
        random_bits(key, 2.7)
    with pytest.raises(TypeError, match=r"^offset must be an integer >= 0 .*got 1.9 \(float\)"):
        random_bits(key, 2, offset=1.9)
    with pytest.raises(TypeError, match=r"^offset must be an integer"):
        normal(key, 2, offset=0.5)
    with pytest.raises(TypeError, match=r"key word k0 must be an integer, got 1.5"):
        random_bits((1.5, 2), 3)
    # an integral value of another type is that integer (nothing is lost)
    assert stream_key(2.0) == stream_key(2) == stream_key(torch.tensor(2))
    assert torch.equal(random_bits(key, torch.tensor(3), offset=2.0), random_bits(key, 5)[2:])


def test_shape_rounds_and_dtype_errors_name_the_argument():
    key = stream_key(1)
    with pytest.raises(TypeError, match=r"^shape must be an integer >= 0 \(a size, or a sequence of sizes"):
        normal(key, 2.5)  # PX29: was "'float' object is not iterable"
    with pytest.raises(TypeError, match=r"^shape\[1\] must be an integer >= 0, got 1.5"):
        uniform(key, (2, 1.5))
    with pytest.raises(ValueError, match=r"^shape\[0\] must be an integer >= 0, got -1"):
        normal(key, (-1, 2))
    assert normal(key, torch.Size([2, 3])).shape == uniform(key, [2, 3]).shape == (2, 3)
    with pytest.raises(TypeError, match=r"^rounds must be an integer >= 0 .*got 2.5"):
        philox4x32(torch.zeros(1, 4, dtype=torch.int64), (0, 0), rounds=2.5)  # PX35
    for draw in (uniform, normal):  # PX23: float8 failed inside torch ("clamp_scalar_cpu" not implemented)
        with pytest.raises(ValueError, match=r"dtype must be one of the floating dtypes torch.float16.*float8_e4m3fn"):
            draw(key, 4, dtype=torch.float8_e4m3fn)
    with pytest.raises(ValueError, match="dtype must be one of"):
        philox.sampler_ready("cpu", torch.float8_e5m2)
    for dtype in philox.FLOAT_DTYPES:
        u = uniform(key, 64, dtype=dtype)
        assert u.dtype == dtype and bool(((u > 0) & (u < 1)).all())


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_words_equal_cpu():
    key = stream_key(3)
    n = 3 * 4 * philox.BLOCK + 5
    assert torch.equal(random_bits(key, n, offset=7, device="cuda").cpu(), random_bits(key, n, offset=7))
    zc, z = normal(key, n, device="cuda").cpu(), normal(key, n)
    # float64 log/cos/sin may differ in the last ulp between devices; after the float32 cast almost never
    assert float((zc != z).double().mean()) < 1e-3 and float((zc - z).abs().max()) < 1e-5
