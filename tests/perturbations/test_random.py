"""The chunked parallel random draws: same values for any thread count, correct distributions, independent chunks."""

from __future__ import annotations

import pytest
import torch

from src.perturbations import PERTURBATIONS, perturb
from src.perturbations._random import CHUNK, rand, rand_bits, randn

RANDOM = [name for name, spec in PERTURBATIONS.items() if not spec.deterministic]


@pytest.fixture
def restore_threads():
    n = torch.get_num_threads()
    yield
    torch.set_num_threads(n)


@pytest.mark.parametrize("name", RANDOM)
def test_same_images_for_any_thread_count(name, restore_threads):
    """The chunking does not depend on the thread count: a seed gives bit-identical images with 1 and 2 threads.
    40 images of 64² make 491,520 noise values (327,680 elastic ones): two chunks, filled in parallel with 2 threads."""
    x = torch.rand(40, 3, 64, 64, generator=torch.Generator().manual_seed(1))
    k = sum(PERTURBATIONS[name].domain) / 2
    out = []
    for threads in (1, 2):
        torch.set_num_threads(threads)
        out.append(perturb(x, name, k, generator=torch.Generator().manual_seed(7)))
    assert torch.equal(out[0], out[1])


def test_draws_distribution_and_chunk_independence():
    """Moments within 5 Monte Carlo standard errors (n = 3·CHUNK values; SE of a mean σ/√n, of a normal sample
    variance σ²·√(2/n), of a correlation 1/√CHUNK), and no two chunks repeat each other."""
    like = torch.zeros(1)
    g = torch.Generator().manual_seed(0)
    n = 3 * CHUNK
    z = randn((n,), g, like).double()
    se = n**-0.5
    assert abs(z.mean().item()) < 5 * se
    assert abs(z.var().item() - 1) < 5 * (2 / n) ** 0.5
    u = rand((n,), g, like, -2.0, 2.0).double()  # U[-2, 2): mean 0, variance 16/12, SE of the mean √(16/12/n)
    assert u.min() >= -2 and u.max() < 2
    assert abs(u.mean().item()) < 5 * (16 / 12 / n) ** 0.5
    bits = rand_bits((n,), g, like).double()  # fair bits: mean 1/2, SE 1/(2√n)
    assert abs(bits.mean().item() - 0.5) < 5 * 0.5 * se
    chunks = z.view(3, CHUNK)
    assert not torch.equal(chunks[0], chunks[1]) and not torch.equal(chunks[1], chunks[2])
    assert abs(torch.corrcoef(chunks)[0, 1].item()) < 5 * CHUNK**-0.5  # uncorrelated streams


def test_seeded_and_default_generator():
    like = torch.zeros(1)
    a = randn((1000,), torch.Generator().manual_seed(3), like)
    b = randn((1000,), torch.Generator().manual_seed(3), like)
    c = randn((1000,), torch.Generator().manual_seed(4), like)
    assert torch.equal(a, b) and not torch.equal(a, c)
    torch.manual_seed(5)
    d = randn((1000,), None, like)
    torch.manual_seed(5)
    assert torch.equal(d, randn((1000,), None, like))  # None = torch's default generator, seeded by manual_seed
