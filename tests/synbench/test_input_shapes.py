"""SynBench accepts any input shape (B, *input_shape) (issue "One shape for the three methods", item 1).

The task of the paper (Ko et al., "What Would Gauss Say About Representations?", ICML 2024, arXiv:2210.02989)
lives in R^d: flat vectors, images (C, H, W) and other ranks are all valid inputs with ``normalization="none"``;
normalizations that need image channels refuse other shapes with an error naming ``normalization`` and the fix.
"""

import math

import pytest
import torch
from scipy.stats import norm

from src.metrics.synbench_score import SynBenchScore
from src.synbench import SynBenchConfig, synbench
from src.synbench.plan import SamplingPlan
from src.synbench.sampling import channel_layout

NONE = dict(normalization="none")
TINY = dict(s_values=(1.0, 2.0), n_train=64, n_test=64, eps=(0.0, 0.4), a_T=(0.7,), **NONE)


def flat(x):
    return x.double().flatten(1)


def test_item1_identity_on_flat_vectors_matches_phi_s():
    # Identity features of flat vectors x ∈ R^16: the plug-in robust-Bayes (LDA) classifier at ε = 0 must reach
    # the closed-form Bayes accuracy a = Φ(s) (Theorem 3.1 (iii)) up to
    # * test noise: binomial standard error SE = √(a(1 − a)/n_test); 4 SE per s (two-sided 6e-5 each, so < 1e-3
    #   for the whole grid) and
    # * the finite-sample loss of the fitted classifier (it only lowers the accuracy): the class-mean difference is
    #   estimated with covariance (1/n₊ + 1/n₋)I ≈ (4/n)I, which tilts the direction by θ² ≈ (d − 1)/(n s²) and
    #   costs φ(s)·s·θ²/2 = φ(s)(d − 1)/(2 n s); the covariance estimate tilts it by θ² ≈ d/n more, costing
    #   φ(s)·s·d/(2n). Both together ≤ 0.002 for s ≥ 0.5, d = 16, n = 4000; we allow 0.003.
    d, n = 16, 4000
    s_values = (0.5, 1.0, 1.5, 2.0, 3.0)
    cfg = SynBenchConfig(s_values=s_values, n_train=n, n_test=n, eps=(0.0,), a_T=(0.7,), **NONE)
    res = synbench(lambda x: x.double(), input_shape=(d,), config=cfg)
    assert res.input_shape == (d,) and res.feature_dim == d
    a = torch.tensor(norm.cdf(s_values), dtype=torch.float64)
    torch.testing.assert_close(res.ref_accuracy, a, rtol=0, atol=1e-12)  # the reference is Φ(s) itself
    se = torch.sqrt(a * (1 - a) / n)
    dev = res.accuracy[:, 0] - a
    assert bool((dev.abs() <= 4 * se + 0.003).all()), (dev, se)


@pytest.mark.parametrize("covariance", ["identity", "banded"])
def test_item1_flat_vectors_draw_the_samples_of_one_channel_images(covariance):
    # A flat vector (d,) is one channel of d values: it draws exactly the samples of (1, H, W) with H·W = d,
    # flattened (same chunk seeds, same Gaussian-H band over the d values), so every number is bitwise equal.
    # Together with test_runner.py's identity-score test on (1, 4, 4) (score 1 within 0.05 on the official s grid)
    # this gives SynBench-Score ≈ 1 for the identity map of R^16.
    cfg = SynBenchConfig(**{**TINY, "covariance": covariance})
    vec = synbench(flat, input_shape=(16,), config=cfg)
    img = synbench(flat, input_shape=(1, 4, 4), config=cfg)
    assert torch.equal(vec.accuracy, img.accuracy) and torch.equal(vec.bound, img.bound)
    assert torch.equal(vec.ref_accuracy, img.ref_accuracy)  # same κ of the Gaussian-H reference
    plan = SamplingPlan.from_config(cfg, (16,))
    x, _ = plan.chunk(1.0, "train", 0)
    assert x.shape == (cfg.n_train, 16)  # one chunk, cut at n_train


@pytest.mark.parametrize(
    ("shape", "normalization"),
    [
        ((16,), "none"),
        ((1, 4, 4), "none"),
        ((3, 2, 2), "none"),
        ((2, 3, 4), "none"),
        ((2, 2, 2, 2), "none"),
        ((1, 4, 4), "backbone"),
        ((3, 2, 2), "backbone"),
        ((3, 2, 2), "imagenet"),
        ((16,), "backbone"),
    ],
)
def test_item1_any_input_shape_runs(shape, normalization):
    seen = []

    def fn(x):
        seen.append(tuple(x.shape[1:]))
        return flat(x)

    cfg = SynBenchConfig(**{**TINY, "normalization": normalization})
    res = synbench(fn, input_shape=shape, config=cfg)
    assert set(seen) == {shape}  # feature_fn gets (B, *input_shape)
    assert res.input_shape == shape and res.feature_dim == math.prod(shape)
    assert bool(((res.accuracy >= 0) & (res.accuracy <= 1)).all())
    assert math.isfinite(res.score(0.0))


def test_item1_synbench_score_metric_shares_the_plan():
    # the torchmetric runs the same plan: flat vectors give the numbers of synbench() exactly
    cfg = SynBenchConfig(**TINY)
    m = SynBenchScore(cfg, input_shape=(16,))
    m.update(flat)
    res = m.result()
    ref = synbench(flat, input_shape=(16,), config=cfg)
    assert res.input_shape == (16,)
    assert torch.equal(res.accuracy, ref.accuracy) and torch.equal(res.bound, ref.bound)


def test_item1_channel_layout():
    assert channel_layout((16,)) == (1, 16)  # a flat vector: one channel of d values
    assert channel_layout((3, 4, 5)) == (3, 20)
    assert channel_layout((2, 3)) == (2, 3)


def test_item1_imagenet_on_flat_vectors_names_normalization_and_fix():
    cfg = SynBenchConfig(**{**TINY, "normalization": "imagenet"})
    with pytest.raises(ValueError, match=r"normalization='imagenet'.*input_shape=\(64,\).*normalization='none'"):
        synbench(flat, input_shape=(64,), config=cfg)


def test_item1_imagenet_on_one_channel_names_normalization_and_fix():
    cfg = SynBenchConfig(**{**TINY, "normalization": "imagenet"})
    with pytest.raises(ValueError, match=r"normalization='imagenet'.*3 channels.*\(1, 4, 4\).*normalization='none'"):
        synbench(flat, input_shape=(1, 4, 4), config=cfg)
    with pytest.raises(ValueError, match=r"normalization='imagenet'.*normalization='none'"):
        SynBenchScore(cfg, input_shape=(2, 3, 4)).update(flat)


@pytest.mark.parametrize(
    ("shape", "error", "match"),
    [
        ((), ValueError, r"input_shape=\(\) is empty"),
        ((0, 4), ValueError, r"input_shape=\(0, 4\).*positive"),
        ((-3,), ValueError, r"input_shape=\(-3,\).*positive"),
        ((2.5,), TypeError, r"input_shape=\(2\.5,\).*integers"),
        (16, TypeError, r"input_shape=16.*sequence.*\(16,\)"),
        ("16", TypeError, r"input_shape='16'.*sequence"),
    ],
)
def test_item1_bad_input_shapes_are_refused(shape, error, match):
    with pytest.raises(error, match=match):
        synbench(flat, input_shape=shape, config=SynBenchConfig(**TINY))


def test_item1_backbone_mean_std_must_match_the_channels():
    # a flat vector is one channel: per-channel (mean, std) pairs of another length are refused, naming the fix
    with pytest.raises(ValueError, match=r"backbone_mean_std.*1 mean.*input_shape=\(16,\)"):
        synbench(flat, input_shape=(16,), config=SynBenchConfig(**TINY), backbone_mean_std=((0.5,) * 3, (0.2,) * 3))
    # one scalar (mean, std) of a flat standardising function is applied: the function then sees the raw samples
    cfg = SynBenchConfig(**TINY)
    base = synbench(flat, input_shape=(16,), config=cfg)
    res = synbench(lambda x: flat((x - 0.5) / 0.25), input_shape=(16,), config=cfg, backbone_mean_std=((0.5,), (0.25,)))
    # the standardisation undoes the folded affine x·0.25 + 0.5 up to float32 rounding of the samples; accuracies
    # are counts (1 count = 1/64) and margins move by ~1e-7 relative: counts equal, bounds within 1e-5
    torch.testing.assert_close(res.accuracy, base.accuracy, rtol=0, atol=0.1 / cfg.n_test)
    torch.testing.assert_close(res.bound, base.bound, rtol=1e-5, atol=0)


def test_callback_and_metric_refuse_bad_shapes_at_construction():
    """Refused when built, not after a whole training epoch (the callback's default normalization, "backbone", takes
    any shape; "imagenet" needs (3, H, W))."""
    from src.callbacks import SynBenchCallback
    from src.metrics import SynBenchScore

    with pytest.raises(ValueError, match="input_size must be >= 1"):
        SynBenchCallback(input_size=0)
    with pytest.raises(ValueError, match="normalization"):
        SynBenchCallback(input_size=(16,), config={"normalization": "imagenet"})
    SynBenchCallback(input_size=(16,))  # the callback's default: what the backbone takes, any shape
    with pytest.raises(TypeError, match="input_shape"):
        SynBenchScore(input_shape=16)
    SynBenchCallback(input_size=(16,), config={"normalization": "none"})  # any shape without normalization
