"""Baseline scores vs SynBench on one synthetic proxy problem (time of each, CPU).

    python -m benchmarks.baselines                    # n = 2048 train + 2048 test, D = 1280, one s value
    python benchmarks/baselines.py --n 512 --dim 256  # a quick run

Feature map: a fixed random linear map (seed 0) of flat Gaussian samples (d = 768) to D features followed by
tanh, so the timings isolate the scores (no backbone). Reports (a) ``synbench()`` at that one s (sampling,
statistics, eigh, ε solves, test pass; its forward time listed apart), (b) the proxy task's draw + forwards, and
(c) each baseline's wall time on the drawn features (:func:`src.baselines.baseline_scores`), the minimum over
``--repeats`` runs (robust to other load), with torch's thread count stated.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python benchmarks/baselines.py` from anywhere
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from src.baselines import baseline_scores, synthetic_task  # noqa: E402
from src.synbench import SynBenchConfig, synbench  # noqa: E402


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2048, help="training (and test) samples")
    ap.add_argument("--dim", type=int, default=1280, help="feature dimension D")
    ap.add_argument("--s", type=float, default=1.0, help="the separation s of the task")
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args(argv)
    d_in = 768
    w = torch.randn(d_in, args.dim, generator=torch.Generator().manual_seed(0)) / d_in**0.5

    def feature_fn(x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x.reshape(len(x), -1) @ w) * 4.0

    cfg = SynBenchConfig(s_values=(args.s,), n_train=args.n, n_test=args.n, normalization="none")
    best: dict[str, float] = {}

    def keep(name: str, seconds: float) -> None:
        best[name] = min(best.get(name, float("inf")), seconds)

    for _ in range(args.repeats):
        t0 = time.perf_counter()
        result = synbench(feature_fn, input_shape=(d_in,), config=cfg)
        keep("synbench_total", time.perf_counter() - t0)
        keep("synbench_forward", result.timings["forward_s"])
        t0 = time.perf_counter()
        task = synthetic_task(feature_fn, (d_in,), cfg, args.s)
        keep("proxy_task_draw_and_forward", time.perf_counter() - t0)
        scores = baseline_scores(*task)
        for name, seconds in scores.seconds.items():
            keep(name, seconds)
    best["synbench_without_forward"] = best["synbench_total"] - best["synbench_forward"]
    out = {
        "n": args.n,
        "dim": args.dim,
        "s": args.s,
        "threads": torch.get_num_threads(),
        "seconds": best,
        "scores": dict(scores),
        "lower_bounds": sorted(scores.lower_bounds),
    }
    print(json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
