"""keep_freed_memory: opt-out, bad setting, and its effect (freed large blocks stay in the process).

Each case runs in a fresh interpreter: malloc settings are process-wide and must not depend on test order."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Allocate 256 MiB with libc malloc, touch every page, free it, and report the resident set size (RSS) before,
# while held, and after the free (from /proc/self/statm, in MiB).
_PROBE = """
import ctypes, json, os, sys
from src.utils.allocator import keep_freed_memory
state = keep_freed_memory()
libc = ctypes.CDLL("libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.argtypes = [ctypes.c_void_p]
libc.memset.argtypes = [ctypes.c_void_p, ctypes.c_int, ctypes.c_size_t]
page = os.sysconf("SC_PAGE_SIZE")
rss = lambda: int(open("/proc/self/statm").read().split()[1]) * page / 2**20
n = 256 * 2**20
r0 = rss()
p = libc.malloc(n)
libc.memset(p, 1, n)
r1 = rss()
libc.free(p)
r2 = rss()
print(json.dumps({"applied": state.applied, "reason": state.reason, "held": r1 - r0, "after_free": r2 - r0}))
"""


def _run(code: str, malloc_env: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "REPBENCH_MALLOC"}
    if malloc_env is not None:
        env["REPBENCH_MALLOC"] = malloc_env
    env["PYTHONPATH"] = str(ROOT)
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)


glibc = pytest.mark.skipif(
    not sys.platform.startswith("linux") or os.confstr("CS_GNU_LIBC_VERSION") is None,
    reason="mallopt settings exist in glibc only",
)


@glibc
def test_freed_block_stays_resident_when_applied():
    """256 MiB held: RSS grows by ~256 MiB. Default glibc serves it with mmap and munmaps it on free (RSS back
    down); with keep_freed_memory it comes from the heap and stays (RSS still up). The thresholds (200 / 50 MiB)
    sit far from both outcomes (256 vs ~0 MiB), so other allocations of the interpreter (< 1 MiB here) cannot
    flip them."""
    kept = json.loads(_run(_PROBE, None).stdout)
    assert kept["applied"] and kept["held"] > 200 and kept["after_free"] > 200, kept
    default = json.loads(_run(_PROBE, "default").stdout)
    assert not default["applied"] and "REPBENCH_MALLOC=default" in default["reason"]
    assert default["held"] > 200 and default["after_free"] < 50, default


def test_bad_setting_names_the_variable():
    res = _run("from src.utils.allocator import keep_freed_memory; keep_freed_memory()", "jemalloc-please")
    assert res.returncode != 0 and "REPBENCH_MALLOC" in res.stderr and "default" in res.stderr


@glibc
def test_idempotent_state_and_release():
    code = (
        "from src.utils.allocator import keep_freed_memory, allocator_state, release_freed_memory\n"
        "assert allocator_state() is None\n"
        "a = keep_freed_memory(); b = keep_freed_memory()\n"
        "assert a is b and allocator_state() is a and a.applied\n"
        "assert isinstance(release_freed_memory(), bool)\n"
        "print('ok')"
    )
    res = _run(code, "keep")
    assert res.stdout.strip() == "ok", res.stderr
