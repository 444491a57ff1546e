"""Small numerical helpers shared by the three methods' cores (one owner each): exact power-of-two rescaling for
float64 sums at extreme scales, and the check of a ``generator=`` argument."""

from __future__ import annotations

import torch
from torch import Tensor

from .checks import check_int

__all__ = ["check_generator", "mix_seed", "seed_word", "pow2_exponent", "times_pow2"]


def pow2_exponent(x: Tensor, dim: int | tuple[int, ...]) -> Tensor:
    """The integer e (int32, ``keepdim``) with max |x| over ``dim`` in [2^(e−1), 2^e), 0 where x is all zero.

    Dividing by 2^e (:func:`times_pow2` with −e) is exact and brings the largest magnitude into [0.5, 1), so sums of
    squares neither overflow (1e200² = inf) nor underflow (1e-200² = 0) in float64.
    """
    return torch.frexp(x.abs().amax(dim, keepdim=True))[1]


def times_pow2(x: Tensor, e: Tensor) -> Tensor:
    """x · 2^e, exact (barring over/underflow of the result) for integer exponents |e| <= 2100.

    Applied as two factors 2^a · 2^b with a = ⌊e/2⌋, b = e − a: each lies in [−1050, 1050], where 2^a itself is
    representable (2^±1075 alone would over/underflow), and both scale in the same direction, so no intermediate
    loses bits that the result keeps.
    """
    a = torch.div(e, 2, rounding_mode="floor")
    b = e - a
    return x * torch.pow(2.0, a.to(x.dtype)) * torch.pow(2.0, b.to(x.dtype))


def check_generator(generator: object, name: str = "generator") -> torch.Generator | None:
    """``generator`` if it is None or a ``torch.Generator``, else a TypeError naming the argument and the fix."""
    if generator is not None and not isinstance(generator, torch.Generator):
        kind = f"{type(generator).__module__}.{type(generator).__qualname__}"
        raise TypeError(
            f"{name} must be a torch.Generator (or None for torch's default generator), got {kind}; "
            "use torch.Generator().manual_seed(seed)"
        )
    return generator


def seed_word(*values: int) -> int:
    """The one seed hash of RepBench: numpy's SeedSequence over the integers' 64-bit two's-complement words → one
    uniformly mixed 64-bit word; a value that is not exactly an integer is refused (:func:`~src.utils.checks.check_int`:
    1.5 would collide with 1). Every seed of the project derives from it (:func:`mix_seed`; SynBench's chunk keys,
    :func:`src.synbench.sampling.chunk_seed`)."""
    import numpy as np

    entropy = [check_int(v, f"seed word {i}") & 0xFFFFFFFFFFFFFFFF for i, v in enumerate(values)]
    return int(np.random.SeedSequence(entropy).generate_state(1, np.uint64)[0])


def mix_seed(*values: int) -> int:
    """A well-mixed 63-bit seed from integers (:func:`seed_word` shifted right by one), so that e.g. (seed, epoch) and
    (seed + 1, epoch − 1) give unrelated streams. The seed mixer of the data modules and the DivergenceRadius sweep.
    SynBench's chunk keys take the low 63 bits of the same word instead — the reduction its published scores were
    measured with (the counter-based generator planned for the GPU path will replace both at once)."""
    return seed_word(*values) >> 1
