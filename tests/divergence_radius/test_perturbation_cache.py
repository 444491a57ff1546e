"""The perturbation cache of the DivergenceRadius sweep (src/divergence_radius/protocol.py): a fixed image set is
perturbed once; the sweep with ``perturbed=`` equals the uncached sweep bit for bit (R_dr, R_cs, ACC_p), for random
and deterministic perturbations, in one and two shards; a cache of other images / config / shard is refused; its
memory is the tensors' bytes (n_images × (1 + P·m) × 3 × H × W × 4 for float32)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from src.divergence_radius.protocol import (
    PerturbationCache,
    cache_perturbations,
    robustness_sweep,
    sweep_parameters,
)
from src.metrics.divergence_radius import robustness_metrics
from src.perturbations import perturb
from src.utils.distributed import Shard
from src.utils.numerics import mix_seed

RANDOM = ["gaussian_noise", "fog", "frost", "glass_blur"]  # draw from the chunk's generator
DETERMINISTIC = ["brightness", "jpeg_compression", "defocus_blur"]


def _net() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten()).eval()


def _images(n: int = 7, size: int = 16) -> torch.Tensor:
    return torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(1))


@pytest.mark.parametrize("names", [RANDOM, DETERMINISTIC], ids=["random", "deterministic"])
@pytest.mark.parametrize("world_size", [1, 2])
def test_cached_sweep_equals_uncached_bit_for_bit(names, world_size):
    net, x = _net(), _images()
    labels = torch.arange(7) % 4
    head = nn.Linear(32, 4).eval()
    opts = dict(perturbations=names, m=3, chunk_size=3, seed=5)
    for rank in range(world_size):
        shard = Shard(rank, world_size)
        cache = cache_perturbations(x, **opts, shard=shard)
        with torch.inference_mode():
            ref = robustness_sweep(x, net, **opts, shard=shard, labels=labels, classifier=head)
            got = robustness_sweep(x, net, **opts, shard=shard, labels=labels, classifier=head, perturbed=cache)
            again = robustness_sweep(x, net, **opts, shard=shard, labels=labels, classifier=head, perturbed=cache)
        for out in (got, again):  # the cache is not consumed or changed by a sweep
            assert torch.equal(out.index, ref.index) and out.names == ref.names
            assert torch.equal(out.r_dr, ref.r_dr) and torch.equal(out.r_cs, ref.r_cs)
            assert torch.equal(out.acc_p, ref.acc_p) and torch.equal(out.clean_correct, ref.clean_correct)
        sizes = [3, 3, 1]  # 7 images in chunks of 3
        assert ref.r_dr.shape == (sum(sizes[c] for c in range(rank, 3, world_size)), len(names))


def test_metrics_take_the_cache_and_match():
    net, x = _net(), _images(5)
    cfg = dict(perturbations=["gaussian_noise", "brightness"], m=2, chunk_size=2)
    for rank, world in ((0, 1), (0, 2), (1, 2)):
        cache = cache_perturbations(x, **cfg, shard=Shard(rank, world))
        ref = robustness_metrics(x, net, **cfg, rank=rank, world_size=world)
        assert robustness_metrics(x, net, **cfg, rank=rank, world_size=world, perturbed=cache) == ref


def test_versions_are_the_sweeps_draws():
    """Chunk c's versions: the clean images, then per perturbation its m versions drawn from one generator seeded by
    (seed, c) in the sweep's order: perturbation by perturbation, parameter by parameter."""
    x, names, m, seed = _images(5), ["fog", "brightness", "gaussian_noise"], 2, 3
    cache = cache_perturbations(x, perturbations=names, m=m, chunk_size=2, seed=seed, shard=Shard(1, 2))
    params = sweep_parameters(names, m, "equal", seed)
    assert [c for c, *_ in cache.chunks] == [1]  # shard 1 of 2 owns chunk 1 of 3 (images 2, 3)
    c, a, b, versions = cache.chunks[0]
    g = torch.Generator().manual_seed(mix_seed(seed, c))
    want = [x[a:b]] + [perturb(x[a:b], n, float(k), generator=g) for n in names for k in params[n]]
    assert (a, b) == (2, 4) and torch.equal(versions, torch.cat(want))


def test_memory_is_the_tensors_bytes_and_the_formula():
    x = _images(7, 16)
    cache = cache_perturbations(x, perturbations=["fog", "brightness"], m=3, chunk_size=3)
    assert isinstance(cache, PerturbationCache)
    assert cache.nbytes == sum(v.numel() * v.element_size() for *_, v in cache.chunks)
    assert cache.nbytes == 7 * (1 + 2 * 3) * 3 * 16 * 16 * 4
    half = cache_perturbations(x, perturbations=["fog", "brightness"], m=3, chunk_size=3, shard=Shard(1, 2))
    assert half.nbytes == 3 * (1 + 2 * 3) * 3 * 16 * 16 * 4  # chunk 1: images 3..5


def test_mismatched_cache_is_refused():
    net, x = _net(), _images(6)
    cfg = dict(perturbations=["fog", "brightness"], m=2, chunk_size=3, seed=0)
    cache = cache_perturbations(x, **cfg)
    robustness_sweep(x, net, **cfg, perturbed=cache)  # the matching call runs
    other = x.clone()
    other[0, 0, 0, 0] += 1e-3
    wrong = [
        ((other,), {**cfg}),
        ((x.double(),), {**cfg}),
        ((x,), {**cfg, "m": 3}),
        ((x,), {**cfg, "seed": 1}),
        ((x,), {**cfg, "chunk_size": 2}),
        ((x,), {**cfg, "perturbations": ["brightness", "fog"]}),
        ((x,), {**cfg, "mode": "random"}),
        ((x,), {**cfg, "shard": Shard(0, 2)}),
    ]
    assert cache.matches(x, **cfg) and cache.matches(x.clone(), cfg, shard=Shard(0, 1), device="cpu")
    for args, kwargs in wrong:
        with pytest.raises(ValueError, match="perturbed= holds the perturbations of other images"):
            robustness_sweep(*args, net, **kwargs, perturbed=cache)
        assert not cache.matches(*args, **kwargs)
    with pytest.raises(ValueError, match="cache_perturbations"):
        robustness_metrics(x, net, **{**cfg, "m": 3}, perturbed=cache)
    with pytest.raises(TypeError, match="PerturbationCache"):
        robustness_sweep(x, net, **cfg, perturbed=[v for *_, v in cache.chunks])
