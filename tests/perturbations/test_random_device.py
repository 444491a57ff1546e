"""Draws on the images' device (Philox engine): reproducible, independent of batch size and thread count, right
distributions; the device code paths (Philox draws, frost's gather) give on the CPU what the CPU path gives."""

from __future__ import annotations

import pytest
import torch

from src.perturbations import PERTURBATIONS, perturb
from src.perturbations._random import ENGINES, engine_for, rand, rand_bits, randint, randn, set_engine
from src.perturbations.weather import FROST_FILES, frost_layers, frost_layers_gather, frost_starts

RANDOM = [name for name, spec in PERTURBATIONS.items() if not spec.deterministic]
# fog draws its fractal level by level (all images' coarse level first), so its images depend on the batch size
PREFIX_STABLE = [name for name in RANDOM if name != "fog"]


@pytest.fixture
def engine():
    """Set the engine for one test and restore the previous choice."""
    before = set_engine("auto")
    yield set_engine
    set_engine(before)


@pytest.fixture
def restore_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


def _mid(name: str) -> float:
    return sum(PERTURBATIONS[name].domain) / 2


def test_engine_choice(engine):
    assert engine_for(torch.device("cpu")) == "mt" and engine_for(torch.device("cuda")) == "philox"
    engine("philox")
    assert engine_for(torch.device("cpu")) == "philox"
    engine("mt")
    assert engine_for(torch.device("cuda")) == "mt"
    with pytest.raises(ValueError, match="REPBENCH_PERTURB_RNG"):
        engine("pcg")
    assert ENGINES == ("auto", "philox", "mt")


@pytest.mark.parametrize("name", RANDOM)
@pytest.mark.parametrize("which", ["philox", "mt"])
def test_reproducible_and_independent_of_batch_size(name, which, engine):
    """Same seed, same images; an image's perturbation does not depend on how many images follow it (the image
    axis leads every draw), except fog's level-by-level fractal."""
    engine(which)
    x = torch.rand(5, 3, 32, 40, generator=torch.Generator().manual_seed(1))
    a = perturb(x, name, _mid(name), generator=torch.Generator().manual_seed(7))
    b = perturb(x, name, _mid(name), generator=torch.Generator().manual_seed(7))
    c = perturb(x, name, _mid(name), generator=torch.Generator().manual_seed(8))
    assert torch.equal(a, b) and not torch.equal(a, c)
    if name in PREFIX_STABLE:
        head = perturb(x[:2], name, _mid(name), generator=torch.Generator().manual_seed(7))
        assert torch.equal(head, a[:2])


@pytest.mark.parametrize("name", RANDOM)
def test_philox_same_images_for_any_thread_count(name, engine, restore_threads):
    """Philox blocks are functions of (key, counter) only: 1 and 2 threads give bit-identical images. 40 images of
    64² make 491,520 noise values, several Philox blocks."""
    engine("philox")
    x = torch.rand(40, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    out = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        out.append(perturb(x, name, _mid(name), generator=torch.Generator().manual_seed(7)))
    assert torch.equal(out[0], out[1])


def test_philox_draws_distribution(engine):
    """Moments within 5 Monte Carlo standard errors at n = 2¹⁸ values (SE of a mean σ/√n; of a normal sample
    variance σ²·√(2/n); U[-2, 2) has variance 16/12; a fair bit σ = 1/2; randint(0, 6): mean 2.5, variance 35/12)."""
    engine("philox")
    like, g, n = torch.zeros(1), torch.Generator().manual_seed(0), 1 << 18
    z = randn((n,), g, like).double()
    assert abs(z.mean().item()) < 5 * n**-0.5 and abs(z.var().item() - 1) < 5 * (2 / n) ** 0.5
    u = rand((n,), g, like, -2.0, 2.0).double()
    assert u.min() >= -2 and u.max() < 2 and abs(u.mean().item()) < 5 * (16 / 12 / n) ** 0.5
    bits = rand_bits((n,), g, like).double()
    assert abs(bits.mean().item() - 0.5) < 5 * 0.5 * n**-0.5
    r = randint(0, 6, (n,), g, like)
    assert r.dtype == torch.int64 and int(r.min()) == 0 and int(r.max()) == 5
    assert abs(r.double().mean().item() - 2.5) < 5 * (35 / 12 / n) ** 0.5
    assert torch.equal(torch.bincount(r, minlength=6) > 0, torch.ones(6, dtype=torch.bool))


def test_frost_gather_equals_the_cpu_crops():
    """The device path's crop origins and one-gather crops equal the CPU path's per-image slices, on the CPU."""
    h, w, n = 40, 56, 12
    g = torch.Generator().manual_seed(0)
    idx = torch.randint(0, len(FROST_FILES), (n,), generator=g)
    u = torch.rand(n, 2, generator=g)
    starts = frost_starts(idx, u, h, w)
    from src.perturbations.weather import _rescaled

    want = [
        [int(u[i, 0] * (_rescaled(int(idx[i]), h, w).shape[1] - h)), int(u[i, 1] * (_rescaled(int(idx[i]), h, w).shape[2] - w))]
        for i in range(n)
    ]  # fmt: skip
    assert starts.tolist() == want
    assert torch.equal(frost_layers_gather(idx, starts, h, w), frost_layers(idx, starts, h, w))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="device draws: needs a GPU")
@pytest.mark.parametrize("name", RANDOM)
def test_cuda_draws_equal_cpu_philox(name, engine):  # pragma: no cover - no GPU in CI
    """Philox words are exact integer arithmetic, so uniforms, integers and bits drawn on the GPU equal the CPU's
    bit for bit (normals: float64 Box-Muller, equal up to the last float64 ulp of log / cos / sin, below float32
    resolution but for rare ties: 1e-6). The perturbed images then differ only by the order of float32 operations
    on values in [0, 1] (filters of <= 31 taps): <= 31·2⁻²⁴·|taps sum 1| per pass, a few passes: 1e-5."""
    engine("philox")
    like_cpu, like_gpu = torch.zeros(1), torch.zeros(1, device="cuda")
    g = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    assert torch.equal(rand((1000,), g(), like_cpu), rand((1000,), g(), like_gpu).cpu())
    assert torch.equal(rand_bits((999,), g(), like_cpu), rand_bits((999,), g(), like_gpu).cpu())
    assert torch.equal(randint(0, 6, (999,), g(), like_cpu), randint(0, 6, (999,), g(), like_gpu).cpu())
    assert torch.allclose(randn((1000,), g(), like_cpu), randn((1000,), g(), like_gpu).cpu(), rtol=0, atol=1e-6)
    x = torch.rand(4, 3, 32, 40, generator=torch.Generator().manual_seed(1))
    a = perturb(x, name, _mid(name), generator=g())
    b = perturb(x.cuda(), name, _mid(name), generator=g())
    assert b.device.type == "cuda" and torch.allclose(a, b.cpu(), rtol=0, atol=1e-5)
