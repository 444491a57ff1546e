"""Batched exact minimum enclosing ball: throughput against the previous solver, and accuracy.

    python -m benchmarks.meb [--sets 288] [--repeats 3] [--threads 2]

Baseline (same process, interleaved repeats): the previous solver (subset enumeration over a working set, 2^support
cost, limited to supports of <= 13 points), loaded from git at ``BASELINE_COMMIT`` (the benchmark runs from the
repository). For each (n points, D) workload it reports the median sets/s of both, their ratio (new / old, > 1 =
faster), the max relative radius difference between them, and the max relative radius difference against an exact
reference: Welzl's recursion (tests/divergence_radius/reference_meb.py) for the small supports, the closed form for the
regular simplex (circumradius sqrt(1 − 1/k) of the k unit basis vectors, rotated into R^D).
Workloads: DivergenceRadius sweeps (clean + m perturbed unit embeddings along a smooth curve; m = 5, 20, 40 in
1280-d, the EfficientNet-Lite0 width, and m = 5 in 384-d), isotropic Gaussian clouds (supports of all n points), and
large supports the baseline refuses (regular simplices of 33 and 64 points, 1000 random unit vectors in R^512).
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch

from src.divergence_radius import minimum_enclosing_ball
from tests.divergence_radius.reference_meb import welzl_meb

F64 = torch.float64
#: the last commit of the enumeration solver (src/divergence_radius/meb.py before the interior-point/active-set solver)
BASELINE_COMMIT = "f8d8463f252cea0743643cdd044dafc32beb2c6c"


def baseline_solver() -> Callable | None:
    """The previous ``minimum_enclosing_ball`` from git (None when git or the commit is unavailable)."""
    try:
        text = subprocess.run(
            ["git", "show", f"{BASELINE_COMMIT}:src/divergence_radius/meb.py"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return None
    path = Path(tempfile.mkdtemp()) / "meb_baseline.py"
    path.write_text(text.replace("from ..utils.numerics import", "from src.utils.numerics import"))
    spec = importlib.util.spec_from_file_location("meb_baseline", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["meb_baseline"] = module
    spec.loader.exec_module(module)
    return module.minimum_enclosing_ball


def curve_sets(B: int, n: int, D: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(B, 1, D, generator=g, dtype=F64)
    dirs = 0.02 * torch.randn(B, 2, D, generator=g, dtype=F64)
    t = torch.linspace(0, 1, n, dtype=F64)[None, :, None]
    pts = base + t * dirs[:, :1] + t**2 * dirs[:, 1:] + 0.004 * torch.randn(B, n, D, generator=g, dtype=F64)
    return pts / pts.norm(dim=-1, keepdim=True)


def cloud_sets(B: int, n: int, D: int, seed: int) -> torch.Tensor:
    return torch.randn(B, n, D, generator=torch.Generator().manual_seed(seed), dtype=F64)


def sphere_sets(B: int, n: int, D: int, seed: int) -> torch.Tensor:
    p = cloud_sets(B, n, D, seed)
    return p / p.norm(dim=-1, keepdim=True)


def simplex_sets(B: int, n: int, D: int, seed: int) -> torch.Tensor:
    """n unit basis vectors rotated into R^D (random orthonormal columns): circumradius sqrt(1 − 1/n)."""
    q, _ = torch.linalg.qr(torch.randn(B, D, n, generator=torch.Generator().manual_seed(seed), dtype=F64))
    return q.transpose(1, 2)


def reference_radii(make: Callable, pts: torch.Tensor, n: int) -> torch.Tensor | None:
    if make is simplex_sets:
        return torch.full((pts.shape[0],), math.sqrt(1 - 1 / n), dtype=F64)
    if make is sphere_sets:
        return None  # supports of hundreds of points: no independent exact solver fast enough
    return torch.tensor([welzl_meb(p.numpy(), seed=i)[1] for i, p in enumerate(pts)], dtype=F64)


def timed(fn: Callable, pts: torch.Tensor) -> tuple[float, torch.Tensor]:
    t0 = time.perf_counter()
    _, r = fn(pts)
    return time.perf_counter() - t0, r


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", type=int, default=288, help="sets per batch (32 images x 9 perturbations)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    old = baseline_solver()
    workloads = [  # label, generator, n, D, sets (None: --sets), baseline can solve it
        ("curve m=5", curve_sets, 6, 1280, None, True),
        ("curve m=5", curve_sets, 6, 384, None, True),
        ("curve m=20", curve_sets, 21, 1280, None, True),
        ("curve m=40", curve_sets, 41, 1280, None, True),
        ("cloud n=6", cloud_sets, 6, 64, None, True),
        ("cloud n=10", cloud_sets, 10, 64, None, True),
        ("simplex k=33", simplex_sets, 33, 512, 4, False),
        ("simplex k=64", simplex_sets, 64, 1024, 2, False),
        ("sphere n=1000", sphere_sets, 1000, 512, 1, False),
    ]
    print(
        f"{'workload':<14} {'n':>4} {'D':>5} {'sets':>4} {'new sets/s':>11} {'old sets/s':>11} {'ratio':>6} "
        f"{'|new-old|/r':>11} {'|new-ref|/r':>11}"
    )
    for label, make, n, D, sets, old_ok in workloads:
        B = sets or args.sets
        pts = make(B, n, D, seed=n + D)
        t_new, t_old, diff = [], [], float("nan")
        for _ in range(args.repeats):  # interleaved: the machine's load hits both alike
            dt, r = timed(minimum_enclosing_ball, pts)
            t_new.append(dt)
            if old is not None and old_ok:
                dt, r_old = timed(old, pts)
                t_old.append(dt)
                diff = float(((r - r_old).abs() / r_old).max())
        ref = reference_radii(make, pts, n)
        err = float(((r - ref).abs() / ref).max()) if ref is not None else float("nan")
        new_rate = B / statistics.median(t_new)
        old_rate = B / statistics.median(t_old) if t_old else float("nan")
        print(
            f"{label:<14} {n:>4} {D:>5} {B:>4} {new_rate:>11.1f} {old_rate:>11.1f} {new_rate / old_rate:>6.2f} "
            f"{diff:>11.1e} {err:>11.1e}"
        )


if __name__ == "__main__":
    main()
