"""End-to-end synbench() runs on tiny inputs (src/synbench/runner.py)."""

import gc
import io
import json

import numpy as np
import pytest
import torch

from src.synbench import SynBenchConfig, SynBenchResult, synbench
from src.synbench.config import IMAGENET_MEAN, IMAGENET_STD
from src.synbench.runner import pixel_transform, resolve_backbone_mean_std

SHAPE = (1, 4, 4)  # d = 16 pixels
SMALL = dict(n_train=4000, n_test=4000, normalization="none")


def flat(x):
    return x.double().flatten(1)


def test_identity_features_score_near_one():
    res = synbench(flat, input_shape=SHAPE, config=SynBenchConfig(**SMALL))
    # Identity map: representation = raw data, so only finite-sample loss remains. With n = 4000 per s the
    # accuracy SE is ≤ 0.8 % per s and the plug-in LDA loss O(d/n) ≈ 0.4 %; over 49 s values the observed
    # deviation of the score from 1 is ~0.3 %. 0.05 leaves a 10× margin while any systematic error in the
    # classifier, the scaled bound or the reference (e.g. a wrong b(a)) moves the score by far more.
    for row in res.table():
        assert abs(row["score"] - 1.0) < 0.05, row
    for integral in ("grid", "exact"):
        assert abs(res.score(0.0, 0.7, integral) - 1.0) < 0.05


def test_orthogonal_projection_scores_zero():
    # x @ (I − 11ᵀ/d) = x − mean(x): the projection orthogonal to the mean direction 1/√d
    cfg = SynBenchConfig(n_train=1000, n_test=1000, normalization="none")
    res = synbench(lambda x: flat(x) - flat(x).mean(1, keepdim=True), input_shape=SHAPE, config=cfg)
    assert res.accuracy.max() < 0.6  # chance (0.5 ± 5 SE of 1000 samples)
    assert res.score(0.0, 0.7) == 0.0 and res.score(0.8, 0.7) == 0.0


def test_invariances_on_identical_samples():
    cfg = SynBenchConfig(s_values=(0.5, 1.0, 2.0, 3.0), n_train=500, n_test=500, normalization="none")
    base = synbench(flat, input_shape=SHAPE, config=cfg)
    q, _ = torch.linalg.qr(torch.randn(16, 16, generator=torch.Generator().manual_seed(0), dtype=torch.float64))
    c = torch.linspace(-50, 80, 16, dtype=torch.float64)
    # Each transform changes only rounding. The features are the raw pixels (Σ ≈ I): κ from a sample of the
    # same size; the shift by c adds max|c|/spread to the relative rounding of the centred data (the runner
    # centres on the first batch mean), then a solve at condition κ: tol = 10·d·κ·u·(1 + max|c|/spread).
    # Accuracies are counts (1 count = 1/500): margins move by ~tol relative, so counts are equal.
    g = torch.Generator().manual_seed(1)
    kappa = float(torch.linalg.cond(torch.cov(torch.randn(cfg.n_train, 16, generator=g, dtype=torch.float64).T)))
    tol = 10 * 16 * kappa * 2.0**-53 * (1 + 80 / 1.0)
    for fn in (lambda x: flat(x) @ q, lambda x: flat(x) + c, lambda x: 7.3 * flat(x)):
        res = synbench(fn, input_shape=SHAPE, config=cfg)
        torch.testing.assert_close(res.accuracy, base.accuracy, rtol=0, atol=0.1 / cfg.n_test)
        torch.testing.assert_close(res.bound, base.bound, rtol=tol, atol=0)
    # the batch size does not change the samples (whole chunks are drawn) and only splits the forwards of a
    # per-sample feature function: bitwise equal
    res = synbench(flat, input_shape=SHAPE, config=SynBenchConfig(**{**cfg.to_dict(), "batch_size": 7}))
    assert torch.equal(res.accuracy, base.accuracy) and torch.equal(res.bound, base.bound)


@pytest.mark.parametrize(
    "extra",
    [dict(covariance="banded"), dict(class_prior=0.3), dict(class_prior=0.3, prior_correction=True), dict(norm="linf")],
)
def test_variants_identity_near_one(extra):
    # Gaussian-H uses the Mahalanobis reference Φ(κs); τ ≠ 1/2 uses Theorem 3.1 (official) or A.3 (corrected);
    # ℓ∞: for μ̃ ∝ 1 every robust direction coincides with LDA on the raw data. Same tolerance as above.
    cfg = SynBenchConfig(n_train=3000, n_test=3000, normalization="none", eps=(0.0, 0.4), a_T=(0.7,), **extra)
    res = synbench(flat, input_shape=SHAPE, config=cfg)
    for row in res.table():
        assert abs(row["score"] - 1.0) < 0.05, (extra, row)


def test_real_conv_net_serialization_and_figure():
    torch.manual_seed(0)
    net = torch.nn.Sequential(
        torch.nn.Conv2d(3, 8, 3),
        torch.nn.BatchNorm2d(8),
        torch.nn.ReLU(),
        torch.nn.Conv2d(8, 16, 3, stride=2),
        torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(2),
        torch.nn.Flatten(),
    ).train()
    running = net[1].running_mean.clone()
    cfg = SynBenchConfig(
        s_values=tuple(np.round(np.arange(0.5, 5.0, 0.5), 10)), n_train=512, n_test=512, eps=(0.0, 0.2, 0.6)
    )
    res = synbench(net, input_shape=(3, 12, 12), config=cfg, progress=True)
    assert net.training and torch.equal(net[1].running_mean, running)  # ran in eval mode, mode restored
    assert res.feature_dim == 64
    for row in res.table():
        assert 0.0 <= row["score"] <= 1.0
    back = SynBenchResult.from_dict(json.loads(json.dumps(res.to_dict())))
    assert back.table() == res.table() and back.config == res.config
    assert res.best_eps(0.7) in cfg.eps and "| a_T |" in res.to_markdown()
    curves = res.curves()
    assert curves["reference"].shape == (100,) and set(curves["eps"]) == set(cfg.eps)
    fig = res.figure()
    assert len(fig.axes[0].lines) == 1 + len(cfg.eps)
    fig.savefig(io.BytesIO(), format="png")


def test_bad_features():
    cfg = SynBenchConfig(s_values=(1.0, 2.0), n_train=64, n_test=64, normalization="none", a_T=(0.7,))
    with pytest.warns(RuntimeWarning, match="degenerate"):
        res = synbench(lambda x: torch.ones(x.shape[0], 5), input_shape=SHAPE, config=cfg)
    assert res.score(0.0) == 0.0 and res.accuracy.eq(0.5).all()
    with pytest.raises(ValueError, match=r"NaN or inf.*s = 1.0"):
        synbench(lambda x: flat(x) / 0.0, input_shape=SHAPE, config=cfg)
    calls = []

    def nan_in_test(x):  # finite on the one train batch, NaN on the test batch
        calls.append(1)
        return flat(x) * (1.0 if len(calls) == 1 else float("nan"))

    with pytest.raises(ValueError, match="NaN or inf"):
        cfg2 = SynBenchConfig(**{**cfg.to_dict(), "n_train": 64, "n_test": 32})
        synbench(nan_in_test, input_shape=SHAPE, config=cfg2)
    with pytest.raises(ValueError):
        SynBenchConfig(eps=(1.2,))
    with pytest.raises(ValueError):
        SynBenchConfig(normalization="imagenet2")


def test_normalization_conventions():
    class Bb:  # stands in for a Backbone: normalises internally with its own mean/std
        mean, std = (0.5, 0.5, 0.5), (0.5, 0.5, 0.5)

        def embed(self, x):
            return x

    bb = Bb()
    assert resolve_backbone_mean_std(bb.embed, None, 3) == (bb.mean, bb.std)
    assert resolve_backbone_mean_std(flat, None, 3) is None
    x = torch.rand(2, 3, 4, 4)
    n_bb = lambda v: (v - 0.5) / 0.5  # noqa: E731
    m_in, s_in = torch.tensor(IMAGENET_MEAN).view(3, 1, 1), torch.tensor(IMAGENET_STD).view(3, 1, 1)
    a, b = pixel_transform("imagenet", 3, (bb.mean, bb.std))
    seen = n_bb(a.view(3, 1, 1) * x + b.view(3, 1, 1))
    torch.testing.assert_close(seen, (x - m_in) / s_in)  # the network sees ImageNet-normalised pixels
    a, b = pixel_transform("none", 3, (bb.mean, bb.std))
    torch.testing.assert_close(n_bb(a.view(3, 1, 1) * x + b.view(3, 1, 1)), x)  # raw pixels
    assert pixel_transform("backbone", 3, (bb.mean, bb.std)) is None
    a, b = pixel_transform("imagenet", 3, None)
    torch.testing.assert_close(a.view(3, 1, 1) * x + b.view(3, 1, 1), (x - m_in) / s_in)


def test_memory_does_not_grow_with_s():
    # Peak RSS is too noisy (±25 MiB allocator jitter) for a unit test; instead count the large tensors
    # (≥ D² elements: sums of outer products, covariances, eigenvectors) alive at every forward call. Only one
    # s's statistics may be alive at a time, so the maximum must not depend on the number of s values.
    # (benchmarks/synbench.py reports peak RSS against the number of s values.)
    d = 64
    r = torch.randn(48, d)

    def count() -> int:
        return sum(1 for o in gc.get_objects() if issubclass(type(o), torch.Tensor) and o.numel() >= d * d)

    def run(k):
        gc.collect()  # garbage of earlier tests must not be counted, nor collected half-way through this run
        base = count()
        counts = []

        def fn(x):
            counts.append(count() - base)
            return x.flatten(1) @ r

        cfg = SynBenchConfig(
            s_values=tuple(0.5 * (i + 1) for i in range(k)),
            n_train=128,
            n_test=128,
            eps=(0.0, 0.5),
            normalization="none",
            a_T=(0.7,),
        )
        synbench(fn, input_shape=(3, 4, 4), config=cfg)
        return max(counts)

    # Statistics kept per s would add at least one large tensor per extra s value: 6 more for 8 vs 2 s values. The
    # allowance of 1 covers a tensor of the test process itself (the gc sees every object of the process) that is
    # created or freed while the run counts; it cannot hide a per-s growth of 6.
    assert run(8) <= run(2) + 1


def test_compare_backbones_seeds_random_weight_backbones_by_the_config_seed() -> None:
    """A ``pretrained: false`` backbone gets the same weights in every comparison of one config (its seed), as in the
    DivergenceRadius and Task-Prior comparisons: two runs give equal scores, whatever the global generator did."""
    from src.synbench.compare import compare_backbones

    cfg = {"s_values": (1.0, 3.0), "n_train": 64, "n_test": 32, "eps": (0.0, 0.2)}
    net = [{"name": "timm:test_efficientnet", "pretrained": False}]
    torch.manual_seed(1)
    a = compare_backbones(net, cfg, input_size=16).rows
    torch.manual_seed(2)
    b = compare_backbones(net, cfg, input_size=16).rows
    assert a == b
