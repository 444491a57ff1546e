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

Scoped (:func:`freed_memory_kept`): the library's heavy entry points (``synbench()``, ``SynBenchScore``,
``robustness_sweep`` / ``robustness_metrics``, ``task_prior_moments``-style embedding, :class:`~src.features.FeatureExtractor`
calls) keep freed memory *for the duration of the call* in a process that did not call :func:`keep_freed_memory`
(a user's training script, a notebook), so they run at the CLI's speed without the caller doing anything. Importing
RepBench changes no allocator setting; calling those functions does, as documented in :func:`freed_memory_kept`.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import logging
import os
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = [
    "ENV_VAR",
    "AllocatorState",
    "keep_freed_memory",
    "freed_memory_kept",
    "release_freed_memory",
    "allocator_state",
    "WARM_DEFAULTS",
]

log = logging.getLogger("repbench")

ENV_VAR = "REPBENCH_MALLOC"
"""Environment variable: ``default`` (or ``off``/``0``/``glibc``) leaves malloc untouched; unset or ``keep``
applies :func:`keep_freed_memory`."""

# glibc <malloc.h> parameter numbers for mallopt(3)
M_TRIM_THRESHOLD = -1
M_MMAP_THRESHOLD = -3
M_MMAP_MAX = -4
# The largest value mallopt's ``int`` argument holds: the heap is trimmed only when more than 2 GiB is free at
# its top, i.e. practically never during a run, yet a process that frees a truly huge block still returns it.
TRIM_THRESHOLD = 2**31 - 1
_OPT_OUT = {"default", "off", "0", "glibc", "none", "false"}
_KEEP = {"keep", "", "1", "on", "true"}

#: What :func:`freed_memory_kept` sets on exit: glibc's fully-warmed dynamic state on 64-bit Linux (glibc has no
#: getter for its settings, and any mallopt of these parameters turns the dynamic mmap threshold off for the rest of
#: the process). glibc's dynamic threshold starts at 128 KiB and rises to the size of each freed mmap'd block up to
#: DEFAULT_MMAP_THRESHOLD_MAX = 32 MiB, with the trim threshold at twice it; M_MMAP_MAX's default is 65536.
WARM_DEFAULTS = {"M_MMAP_MAX": 65536, "M_MMAP_THRESHOLD": 32 * 2**20, "M_TRIM_THRESHOLD": 64 * 2**20}


@dataclass(frozen=True)
class AllocatorState:
    """What :func:`keep_freed_memory` did: ``applied`` and why (``reason``)."""

    applied: bool
    reason: str


_state: AllocatorState | None = None


@functools.cache
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
    elif choice not in _KEEP:
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


_scope = threading.Lock()
_depth = 0  # nesting depth of freed_memory_kept blocks (over all threads: the settings are process-wide)
_scoped = False  # whether the outermost open block applied the settings


def _choice() -> str:
    choice = os.environ.get(ENV_VAR, "keep").strip().lower()
    if choice not in _OPT_OUT and choice not in _KEEP:
        raise ValueError(
            f"{ENV_VAR}={os.environ[ENV_VAR]!r} is not understood; use {ENV_VAR}=default to keep glibc's "
            f"malloc settings, or unset it (or {ENV_VAR}=keep) to keep freed memory in the process"
        )
    return choice


@contextlib.contextmanager
def freed_memory_kept() -> Iterator[bool]:
    """Keep freed memory in the process for the duration of the block (yields whether it applied anything).

    On entry to the outermost block: glibc ``mallopt(M_MMAP_MAX, 0)`` and ``mallopt(M_TRIM_THRESHOLD, 2**31 - 1)``
    (as :func:`keep_freed_memory`), so the activation buffers of the forwards inside are reused from the heap
    instead of being mmap'd and faulted in page by page on every op. On exit from it: the :data:`WARM_DEFAULTS`
    (``M_MMAP_MAX=65536``, ``M_MMAP_THRESHOLD=32 MiB``, ``M_TRIM_THRESHOLD=64 MiB``: glibc's own settings once its
    dynamic threshold has warmed up, which any forward of a CNN at batch 256 does) and nothing else: the memory kept
    during the block goes back to the kernel by glibc's ordinary trimming (the heap top above 64 MiB at the next
    free) or at once with :func:`release_freed_memory`. So the first block changes one thing for the rest of the
    process: glibc's mmap threshold is fixed at 32 MiB instead of adapting between 128 KiB and 32 MiB.

    Nothing is done (yields False) when :func:`keep_freed_memory` applied its process-wide setting already (the
    CLIs), with ``REPBENCH_MALLOC=default`` (read on every entry), or without glibc. Blocks nest and may be entered
    from several threads: only the outermost one sets and restores. Cheap (a few mallopt calls): the library's
    entry points enter it on every call."""
    global _depth, _scoped
    with _scope:
        if _depth == 0:
            choice = _choice()  # a bad REPBENCH_MALLOC is refused on every entry, whatever was applied before
            applied = bool(_state is not None and _state.applied)
            libc = None if applied or choice in _OPT_OUT else _libc()
            _scoped = bool(
                libc is not None
                and libc.mallopt(M_MMAP_MAX, 0) == 1
                and libc.mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD) == 1
            )
        _depth += 1
        active = _scoped
    try:
        yield active
    finally:
        with _scope:
            _depth -= 1
            if _depth == 0 and _scoped:
                _scoped = False
                libc = _libc()
                if libc is not None and not (_state is not None and _state.applied):
                    for name, value in WARM_DEFAULTS.items():
                        libc.mallopt(globals()[name], value)


def release_freed_memory() -> bool:
    """Give free heap memory back to the OS now (glibc ``malloc_trim(0)``); True when some was released."""
    libc = _libc()
    return bool(libc.malloc_trim(0)) if libc is not None else False


def allocator_state() -> AllocatorState | None:
    """The result of the last :func:`keep_freed_memory` call in this process (None: never called)."""
    return _state
