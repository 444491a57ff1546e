"""Keep freed memory inside the process: stop glibc's page-fault churn on large activation buffers.

Why: glibc ``malloc`` serves every block above ``M_MMAP_THRESHOLD`` (128 KiB, growing dynamically up to 32 MiB)
with a fresh ``mmap`` and returns it to the kernel with ``munmap`` on ``free``; and it trims the top of the heap
whenever more than ``M_TRIM_THRESHOLD`` is free there. A CNN forward at batch 256 allocates and frees tens of
activation buffers of 1-100 MB per batch, so every op faults its output's pages back in from the kernel
(zero-filled, one fault per 4 KiB page). Measured on a 2-core CPU machine (lite0, 64 px, batch 256): 35-45 % of
the process's CPU time was kernel (sys) time. With ``M_MMAP_MAX = 0`` (no mmap'd chunks: large blocks come from
the heap) and a large ``M_TRIM_THRESHOLD`` (the heap top is never given back), freed buffers are reused from the
heap and the sys share drops to ~0 (``python -m benchmarks.engine --part allocator``; docs/speed.md).

Cost: the process keeps its peak heap (resident memory does not shrink after a big allocation is freed). For a
long-running feature extraction or training job that is what one wants; call :func:`release_freed_memory` to
give free memory back explicitly (``malloc_trim(0)``).

Other allocators (jemalloc, tcmalloc, mimalloc) also avoid the churn but must be loaded before the interpreter
starts (``LD_PRELOAD``); none is a plain PyPI dependency (``cmeel-mimalloc`` ships a shared library), so the
in-process glibc setting is the default and works from any script: call :func:`keep_freed_memory` first thing.
Opt out with the environment variable ``REPBENCH_MALLOC=default``.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys
from dataclasses import dataclass

__all__ = ["ENV_VAR", "AllocatorState", "keep_freed_memory", "release_freed_memory", "allocator_state"]

log = logging.getLogger("repbench")

ENV_VAR = "REPBENCH_MALLOC"
"""Environment variable: ``default`` (or ``off``/``0``/``glibc``) leaves malloc untouched; unset or ``keep``
applies :func:`keep_freed_memory`."""

# glibc <malloc.h> parameter numbers for mallopt(3)
M_TRIM_THRESHOLD = -1
M_MMAP_MAX = -4
# The largest value mallopt's ``int`` argument holds: the heap is trimmed only when more than 2 GiB is free at
# its top, i.e. practically never during a run, yet a process that frees a truly huge block still returns it.
TRIM_THRESHOLD = 2**31 - 1
_OPT_OUT = {"default", "off", "0", "glibc", "none", "false"}


@dataclass(frozen=True)
class AllocatorState:
    """What :func:`keep_freed_memory` did: ``applied`` and why (``reason``)."""

    applied: bool
    reason: str


_state: AllocatorState | None = None


def _libc() -> ctypes.CDLL | None:
    """glibc (the only libc with ``mallopt``'s parameter numbers above), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
        libc.gnu_get_libc_version.restype = ctypes.c_char_p
        libc.gnu_get_libc_version()
        libc.mallopt.argtypes = [ctypes.c_int, ctypes.c_int]
        libc.mallopt.restype = ctypes.c_int
        libc.malloc_trim.argtypes = [ctypes.c_size_t]
        libc.malloc_trim.restype = ctypes.c_int
    except (OSError, AttributeError):  # musl, or no libc found: nothing to tune
        return None
    return libc


def keep_freed_memory(force: bool = False) -> AllocatorState:
    """Tell glibc malloc to keep freed large blocks for reuse (``mallopt(M_MMAP_MAX, 0)``,
    ``mallopt(M_TRIM_THRESHOLD, 2**31 - 1)``). Idempotent; cheap; call it before the big allocations start
    (blocks already mmap'd keep their old behaviour until freed).

    Skipped (returns ``applied=False`` with the reason) when ``REPBENCH_MALLOC=default`` (opt-out), on a
    non-glibc platform, or when mallopt refuses. ``force`` re-applies even after an earlier call.
    """
    global _state
    if _state is not None and not force:
        return _state
    choice = os.environ.get(ENV_VAR, "keep").strip().lower()
    if choice in _OPT_OUT:
        _state = AllocatorState(False, f"{ENV_VAR}={choice}: glibc malloc defaults kept")
    elif choice not in {"keep", "", "1", "on", "true"}:
        raise ValueError(
            f"{ENV_VAR}={os.environ[ENV_VAR]!r} is not understood; use {ENV_VAR}=default to keep glibc's "
            f"malloc settings, or unset it (or {ENV_VAR}=keep) to keep freed memory in the process"
        )
    else:
        libc = _libc()
        if libc is None:
            _state = AllocatorState(False, f"no glibc mallopt on this platform ({sys.platform})")
        elif libc.mallopt(M_MMAP_MAX, 0) != 1 or libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) != 1:
            _state = AllocatorState(False, "glibc mallopt refused the settings")
        else:
            _state = AllocatorState(True, "glibc: M_MMAP_MAX=0, M_TRIM_THRESHOLD=2**31-1")
    log.debug("allocator: %s", _state.reason)
    return _state


def release_freed_memory() -> bool:
    """Give free heap memory back to the OS now (glibc ``malloc_trim(0)``); True when some was released."""
    libc = _libc()
    return bool(libc.malloc_trim(0)) if libc is not None else False


def allocator_state() -> AllocatorState | None:
    """The result of the last :func:`keep_freed_memory` call in this process (None: never called)."""
    return _state
