"""Process-wide CPU thread-count contexts for small linear algebra (torch intra-op threads, numpy/scipy BLAS)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

__all__ = ["torch_threads", "blas_threads"]


@contextlib.contextmanager
def torch_threads(n: int | None) -> Iterator[None]:
    """Temporarily set torch's intra-op CPU thread count (None: unchanged); restored on exit.

    Used for small linear algebra: multithreaded BLAS/LAPACK synchronises at every step and collapses on
    loaded / oversubscribed CPUs (measured on 2 busy cores: a (2×256)@(256×16) float64 matmul 16 ms with 2
    threads vs 2 µs with 1; eigh of D = 1280 up to 23 s vs 0.34 s), while 1 thread costs little when the CPU is
    idle (eigh 0.34 s vs 0.22 s). Process-global: not thread-safe against concurrent torch use.
    """
    before = torch.get_num_threads()
    if n is None or n == before:
        yield
        return
    if int(n) < 1:
        raise ValueError(f"thread count must be None or >= 1, got {n}")
    torch.set_num_threads(int(n))
    try:
        yield
    finally:
        torch.set_num_threads(before)


def blas_threads(n: int) -> Any:
    """Limit numpy/scipy's BLAS threads like :func:`torch_threads` (threadpoolctl if installed, else no-op)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl comes with scikit-learn
        return contextlib.nullcontext()
    return threadpool_limits(limits=n, user_api="blas")
