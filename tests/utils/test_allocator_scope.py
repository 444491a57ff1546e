"""freed_memory_kept (src/utils/allocator.py): the library's entry points keep freed memory for the duration of a
call in a process that did not call keep_freed_memory, and leave glibc's warmed-up settings behind.

Malloc settings are process-wide, so the effect is read in fresh interpreters (resident memory after freeing a block
that glibc either keeps in its heap or returns with munmap); which entry points enter the scope is read in-process
from the scope's nesting depth, seen by the feature function while it runs. No timing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from src.utils import allocator

ROOT = Path(__file__).resolve().parents[2]

glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
    reason="mallopt settings exist in glibc only",
)

# Resident memory (MiB) given back by free() of a touched block of `mib` MiB (~mib: mmap'd and munmapped; ~0: kept
# in the heap), inside and after the scope.
_PROBE = """
import ctypes, json, os, sys
from src.utils.allocator import allocator_state, freed_memory_kept, keep_freed_memory, release_freed_memory
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
page = os.sysconf("SC_PAGE_SIZE")
rss = lambda: int(open("/proc/self/statm").read().split()[1]) * page / 2**20
def returned(mib):
    p = libc.malloc(mib * 2**20); libc.memset(p, 1, mib * 2**20); held = rss(); libc.free(p); return held - rss()
out = {"untouched": allocator_state() is None}
if "keep" in sys.argv:
    keep_freed_memory()
with freed_memory_kept() as applied:
    out["applied"] = applied
    with freed_memory_kept() as inner:
        out["inner"] = inner
    out["inside_after_inner"] = returned(48)  # the inner block's exit restored nothing
release_freed_memory()  # an empty heap top: the next blocks are placed by the restored settings alone
out["after_48"] = returned(48)  # above the 32 MiB threshold: mmap'd again, returned on free
out["after_16"] = returned(16)  # below it: from the heap, kept (trimmed only above 64 MiB)
print(json.dumps(out))
"""


def _probe(*args: str, malloc_env: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "REPBENCH_MALLOC"}
    if malloc_env is not None:
        env["REPBENCH_MALLOC"] = malloc_env
    env["PYTHONPATH"] = str(ROOT)
    res = subprocess.run(
        [sys.executable, "-c", _PROBE, *args], env=env, capture_output=True, text=True, timeout=120, check=True
    )
    return json.loads(res.stdout)


@glibc
def test_scope_keeps_inside_and_restores_the_warm_defaults():
    """Inside: a freed 48 MiB block stays resident (heap, no trim); after: it is mmap'd and given back (M_MMAP_MAX and
    the 32 MiB threshold restored), while a 16 MiB block stays (threshold 32 MiB, trim 64 MiB). The bounds (8 / 40
    MiB) sit far from both outcomes (~0 vs 16 or 48)."""
    out = _probe()
    assert out["untouched"] and out["applied"] and out["inner"]
    assert out["inside_after_inner"] < 8, out
    assert out["after_48"] > 40, out
    assert out["after_16"] < 8, out


@glibc
def test_opt_out_and_process_wide_setting_leave_the_scope_idle():
    off = _probe(malloc_env="default")
    assert not off["applied"] and off["inside_after_inner"] > 40, off  # glibc's own behaviour: mmap'd, given back
    kept = _probe("keep")
    assert not kept["applied"] and not kept["inner"], kept  # keep_freed_memory already holds: nothing to scope
    assert kept["inside_after_inner"] < 8 and kept["after_48"] < 8, kept  # and stays in force after the block


def test_bad_setting_is_refused(monkeypatch):
    monkeypatch.setenv("REPBENCH_MALLOC", "jemalloc-please")
    with pytest.raises(ValueError, match="REPBENCH_MALLOC"):
        with allocator.freed_memory_kept():
            pass  # pragma: no cover
    assert allocator._depth == 0


def test_import_changes_no_allocator_state():
    code = "import src, src.features, src.synbench, src.divergence_radius, src.metrics; from src.utils import allocator; print(allocator._depth, allocator._scoped, allocator.allocator_state())"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HF_HUB_OFFLINE": "1"}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert res.stdout.split() == ["0", "False", "None"], res.stderr[-2000:]


def _depth_seen(dim: int = 4):
    seen: list[int] = []

    def fn(x: torch.Tensor) -> torch.Tensor:
        seen.append(allocator._depth)
        return x.flatten(1)[:, :dim].float()

    return fn, seen


def test_entry_points_run_inside_the_scope():
    from src.divergence_radius.protocol import cache_perturbations, robustness_sweep
    from src.features import FeatureExtractor
    from src.metrics.divergence_radius import robustness_metrics
    from src.synbench import SynBenchConfig, synbench

    assert allocator._depth == 0
    fn, seen = _depth_seen()
    FeatureExtractor(fn)(torch.rand(3, 3, 8, 8))
    assert seen and all(d >= 1 for d in seen)

    seen.clear()
    images = torch.rand(4, 3, 16, 16)
    robustness_sweep(images, lambda x: (seen.append(allocator._depth), x.flatten(1)[:, :4])[1], m=2,
                     perturbations=["brightness"])  # fmt: skip
    assert seen and all(d >= 2 for d in seen)  # the sweep's scope, and the extractor's inside it
    seen.clear()
    robustness_metrics(images, fn, m=2, perturbations=["brightness"],
                       perturbed=cache_perturbations(images, m=2, perturbations=["brightness"]))  # fmt: skip
    assert seen and all(d >= 2 for d in seen)

    seen.clear()
    cfg = SynBenchConfig(s_values=(1.0,), n_train=32, n_test=32, eps=(0.0,), chunk_size=32, batch_size=32)
    synbench(fn, input_shape=(3, 4, 4), config=cfg)
    assert seen and all(d >= 2 for d in seen)  # run_protocol's scope around the draws and the forwards
    assert allocator._depth == 0 and not allocator._scoped
