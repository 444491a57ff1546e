"""Batched exact minimum enclosing ball: throughput and max relative radius error.

    python -m benchmarks.meb [--sets 256] [--repeats 3]

Baseline (same process, interleaved repeats): an independent exact solver, Welzl's recursion in numpy float64, one
point set at a time (tests/robustness/reference_meb.py). Reports, for each (n points, D) workload, the median sets/s
of both and their ratio, and the max relative radius difference |r − r_ref| / r_ref over all sets (target ≤ 1e-6).
Workloads: the DivergenceRadius case (clean + m = 5 perturbed unit embeddings along a smooth curve in 1280-d, the
EfficientNet-Lite0 width), the same with m = 20 (the working-set path), and isotropic Gaussian clouds (supports of
all n points: the enumeration's worst case).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from src.robustness import minimum_enclosing_ball
from tests.robustness.reference_meb import welzl_meb

F64 = torch.float64


def curve_sets(B: int, n: int, D: int, seed: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    base = torch.randn(B, 1, D, generator=g, dtype=F64)
    dirs = 0.02 * torch.randn(B, 2, D, generator=g, dtype=F64)
    t = torch.linspace(0, 1, n, dtype=F64)[None, :, None]
    pts = base + t * dirs[:, :1] + t**2 * dirs[:, 1:] + 0.004 * torch.randn(B, n, D, generator=g, dtype=F64)
    return pts / pts.norm(dim=-1, keepdim=True)


def cloud_sets(B: int, n: int, D: int, seed: int) -> torch.Tensor:
    return torch.randn(B, n, D, generator=torch.Generator().manual_seed(seed), dtype=F64)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sets", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    workloads = [
        ("curve m=5", curve_sets, 6, 1280),
        ("curve m=20", curve_sets, 21, 1280),
        ("cloud n=6", cloud_sets, 6, 64),
        ("cloud n=10", cloud_sets, 10, 64),
    ]
    print(
        f"{'workload':<12} {'n':>3} {'D':>5} {'batched sets/s':>15} {'welzl sets/s':>13} {'ratio':>7} {'max rel err':>12}"
    )
    for label, make, n, D in workloads:
        pts = make(args.sets, n, D, seed=n + D)
        arrays = [p.numpy() for p in pts]
        t_ours, t_ref, max_err = [], [], 0.0
        for _ in range(args.repeats):  # interleaved: the machine's load hits both alike
            t0 = time.perf_counter()
            _, r = minimum_enclosing_ball(pts)
            t_ours.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            r_ref = torch.tensor([welzl_meb(a)[1] for a in arrays], dtype=F64)
            t_ref.append(time.perf_counter() - t0)
            max_err = max(max_err, float(((r - r_ref).abs() / r_ref).max()))
        ours, ref = args.sets / statistics.median(t_ours), args.sets / statistics.median(t_ref)
        print(f"{label:<12} {n:>3} {D:>5} {ours:>15.0f} {ref:>13.0f} {ours / ref:>7.1f} {max_err:>12.2e}")


if __name__ == "__main__":
    torch.set_num_threads(min(2, torch.get_num_threads()))
    main()
