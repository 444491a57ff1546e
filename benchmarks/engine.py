"""Feature-extraction engine benchmarks: every figure is a ratio against a baseline measured in the same run.

    python -m benchmarks.engine                      # all parts
    python -m benchmarks.engine --part forward [--compile] [--autocast bf16]
    python -m benchmarks.engine --part allocator [--pairs 3]
    python -m benchmarks.engine --part synbench [--pairs 2]
    python -m benchmarks.engine --part scores [--seeds 12 13]

forward    in one process, interleaved repeats: the naive path (eager, NCHW, batch 256, inference mode: what
           SynBench's forwards were) against FeatureExtractor variants (default, NCHW, batch 64/128/512, optionally
           torch.compile and autocast). Ratio = paired per-repeat time ratio (median), feature error vs naive.
allocator  whole-process runs alternating REPBENCH_MALLOC=default / keep (subprocesses): wall time and the
           user/sys split of CPU time (resource.getrusage) of the same forward work.
synbench   the issue's done-when, whole processes alternating: `python -m src.synbench` with the official
           settings (lite0, 64 px, seed 12, 2048 + 2048 samples, eps {0, 0.2, 0.4}, 5 s values) against the bare
           eager NCHW batch-256 forwards of the same number of images (20480) with glibc's default malloc.
scores     in one process: synbench() total vs the engine's bare forwards of the same count (overhead), and
           scores against an NCHW-forward run at the same seed and against other seeds (Monte Carlo spread).
The machine may be shared: /proc/loadavg is printed with every part; prefer the ratios to absolute times.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python benchmarks/engine.py` from anywhere
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")

BACKBONE = "embedded:efficientnet_lite0"
S_VALUES = [0.5, 1.5, 2.5, 3.5, 4.5]
EPS = [0.0, 0.2, 0.4]


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:  # pragma: no cover - not Linux
        return "n/a"


def _setup(threads: int):
    """Allocator (per REPBENCH_MALLOC), threads, the backbone in eval mode."""
    from src.utils.allocator import keep_freed_memory

    state = keep_freed_memory()
    import torch

    torch.set_num_threads(threads)
    from src.backbones import create_backbone

    return state, create_backbone(BACKBONE).eval()


def naive_forward(bb, x, batch: int = 256):
    """The baseline: eager NCHW forwards in batches of 256 under inference mode."""
    import torch

    with torch.inference_mode():
        return torch.cat([bb.embed(c) for c in x.split(batch)])


def _rusage() -> tuple[float, float]:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime, r.ru_stime


def _timed(fn: Callable[[], object]) -> tuple[float, float, float]:
    """(wall, user CPU, sys CPU) seconds of one call."""
    u0, s0 = _rusage()
    t0 = time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    u1, s1 = _rusage()
    return wall, u1 - u0, s1 - s0


# -- part: forward ------------------------------------------------------------------------------------------------------
def part_forward(args) -> None:
    import torch

    from src.features import FeatureExtractor

    state, bb = _setup(args.threads)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(args.n, 3, args.image_size, args.image_size, generator=g) + 0.5  # SynBench-like inputs
    variants: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
        "naive eager NCHW b256": lambda t: naive_forward(bb, t),
        "engine default (auto=channels_last, b256)": FeatureExtractor(bb.embed),
        "engine NCHW b256": FeatureExtractor(bb.embed, memory_format="contiguous"),
        "engine channels_last b64": FeatureExtractor(bb.embed, max_batch=64),
        "engine channels_last b128": FeatureExtractor(bb.embed, max_batch=128),
        "engine channels_last b512": FeatureExtractor(bb.embed, max_batch=512),
    }
    if args.autocast:
        variants[f"engine {args.autocast}"] = FeatureExtractor(bb.embed, precision=args.autocast)
    notes: dict[str, str] = {}
    if args.compile:
        ext = FeatureExtractor(bb.embed, compile=True)
        t0 = time.perf_counter()
        ext(x[:256])
        notes["engine compile (inductor, freezing)"] = f"compile {time.perf_counter() - t0:.1f} s"
        variants["engine compile (inductor, freezing)"] = ext
    print(
        f"forward: {BACKBONE} at {args.image_size} px, {args.n} images, {torch.get_num_threads()} threads, "
        f"allocator {'kept' if state.applied else 'default'} ({state.reason}); load before {loadavg()}"
    )
    ref = variants["naive eager NCHW b256"](x)
    errors = {}
    for name, fn in variants.items():
        z = fn(x)  # warm-up (oneDNN primitive caches, allocator) and the feature comparison
        errors[name] = float(((z.double() - ref.double()).norm(dim=1) / ref.double().norm(dim=1)).max())
    times: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(args.repeats):
        for name, fn in variants.items():
            times[name].append(_timed(lambda fn=fn: fn(x))[0])
    base = times["naive eager NCHW b256"]
    print(f"{'variant':44s} {'img/s':>7s} {'ratio':>6s} {'max rel. feature diff':>22s}")
    for name, ts in times.items():
        ratio = statistics.median(b / t for b, t in zip(base, ts))
        extra = f"  ({notes[name]})" if name in notes else ""
        print(f"{name:44s} {args.n / min(ts):7.0f} {ratio:5.2f}x {errors[name]:22.1e}{extra}")
    print(f"load after {loadavg()}")


# -- part: allocator -----------------------------------------------------------------------------------------------------
def _worker(args) -> None:
    """One whole-process measurement (run by the parent in a subprocess); prints a JSON line."""
    import torch

    from src.features import FeatureExtractor

    t_start = time.perf_counter()
    state, bb = _setup(args.threads)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 3, args.image_size, args.image_size, generator=g) + 0.5
    batches = args.n // 256
    if args.work == "bare":
        fn = lambda: [naive_forward(bb, x) for _ in range(batches)]  # noqa: E731
    else:
        ext = FeatureExtractor(bb.embed)
        fn = lambda: [ext(x) for _ in range(batches)]  # noqa: E731
    naive_forward(bb, x[:32])  # warm-up
    wall, user, sys_ = _timed(fn)
    print(
        json.dumps(
            {
                "applied": state.applied,
                "wall": wall,
                "user": user,
                "sys": sys_,
                "process_wall": time.perf_counter() - t_start,
            }
        )
    )


def _subprocess(argv: list[str], malloc: str) -> tuple[dict, float]:
    env = dict(os.environ, REPBENCH_MALLOC=malloc, PYTHONPATH=str(ROOT))
    t0 = time.perf_counter()
    res = subprocess.run([sys.executable, *argv], env=env, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed:\n{res.stderr[-3000:]}")
    lines = [ln for ln in res.stdout.splitlines() if ln.startswith("{")]
    return (json.loads(lines[-1]) if lines else {}), wall


def part_allocator(args) -> None:
    print(
        f"allocator: whole processes alternating REPBENCH_MALLOC=default/keep, {args.pairs} pairs, {args.n} images "
        f"of {args.image_size} px per process; load before {loadavg()}"
    )
    for work in ("bare", "engine"):
        runs: dict[str, list[dict]] = {"default": [], "keep": []}
        for _ in range(args.pairs):
            for malloc in ("default", "keep"):
                argv = ["-m", "benchmarks.engine", "--part", "worker", "--work", work, "--n", str(args.n)]
                argv += ["--image-size", str(args.image_size), "--threads", str(args.threads)]
                runs[malloc].append(_subprocess(argv, malloc)[0])
        ratio = statistics.median(d["wall"] / k["wall"] for d, k in zip(runs["default"], runs["keep"]))
        for malloc, rs in runs.items():
            walls = [r["wall"] for r in rs]
            share = statistics.median(r["sys"] / (r["user"] + r["sys"]) for r in rs)
            print(
                f"  {work:6s} malloc={malloc:7s} img/s {args.n / statistics.median(walls):6.0f}  "
                f"sys share of CPU {share:5.1%}  (walls {', '.join(f'{w:.1f}' for w in walls)} s)"
            )
        print(f"  {work:6s} speed-up from keeping freed memory: {ratio:.2f}x (median of paired ratios)")
    print(f"load after {loadavg()}")


# -- part: synbench ------------------------------------------------------------------------------------------------------
def _cli_argv(out: str, extra: list[str]) -> list[str]:
    return [
        "-m",
        "src.synbench",
        f"backbones=[{BACKBONE}]",
        "input_size=64",
        f"reduced.s_values=[{','.join(map(str, S_VALUES))}]",
        "reduced.n_train=2048",
        "reduced.n_test=2048",
        f"synbench.eps=[{','.join(map(str, EPS))}]",
        "+synbench.seed=12",
        "progress=false",
        f"hydra.run.dir={out}",
        *extra,
    ]


def part_synbench(args) -> None:

    n_images = len(S_VALUES) * (2048 + 2048)
    print(
        f"synbench: `python -m src.synbench` (lite0, 64 px, seed 12, 2048 + 2048, eps {EPS}, {len(S_VALUES)} s "
        f"values) vs bare eager NCHW b256 forwards of {n_images} images with glibc's default malloc; whole processes "
        f"alternating, {args.pairs} pairs; load before {loadavg()}"
    )
    walls: dict[str, list[float]] = {"bare": [], "cli": []}
    timed_bare: list[float] = []
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.pairs):
            argv = ["-m", "benchmarks.engine", "--part", "worker", "--work", "bare", "--n", str(n_images)]
            argv += ["--threads", str(args.threads)]
            rec, wall = _subprocess(argv, "default")
            walls["bare"].append(wall)
            timed_bare.append(rec["wall"])
            _, wall = _subprocess(_cli_argv(os.path.join(tmp, f"run{i}"), args.cli_overrides), "keep")
            walls["cli"].append(wall)
    ratio = statistics.median(b / c for b, c in zip(walls["bare"], walls["cli"]))
    ratio_timed = statistics.median(b / c for b, c in zip(timed_bare, walls["cli"]))
    print(f"  bare forwards, whole process:   {', '.join(f'{w:.1f}' for w in walls['bare'])} s")
    print(f"  bare forwards, timed part only: {', '.join(f'{w:.1f}' for w in timed_bare)} s")
    print(f"  python -m src.synbench:         {', '.join(f'{w:.1f}' for w in walls['cli'])} s")
    print(
        f"  speed-up of the CLI over the bare path: {ratio:.2f}x (whole process vs whole process), "
        f"{ratio_timed:.2f}x (whole CLI process vs the bare forwards alone); load after {loadavg()}"
    )


def part_scores(args) -> None:
    import torch

    from src.features import FeatureExtractor
    from src.synbench import SynBenchConfig, synbench

    n_images = len(S_VALUES) * (2048 + 2048)
    state, bb = _setup(args.threads)
    cfg = lambda seed: SynBenchConfig(  # noqa: E731
        s_values=tuple(S_VALUES), n_train=2048, n_test=2048, eps=tuple(EPS), seed=seed
    )
    print(f"scores: in one process, allocator {'kept' if state.applied else 'default'}; load {loadavg()}")
    results = {}
    for seed in args.seeds:
        results[("engine", seed)] = synbench(bb.embed, input_shape=(3, 64, 64), config=cfg(seed))
    results[("naive", args.seeds[0])] = synbench(
        bb.embed, input_shape=(3, 64, 64), config=cfg(args.seeds[0]), extractor={"memory_format": "contiguous"}
    )
    ext = FeatureExtractor(bb.embed)
    x = torch.randn(256, 3, 64, 64) + 0.5
    t0 = time.perf_counter()
    for _ in range(n_images // 256):
        ext(x)
    floor = time.perf_counter() - t0
    first = results[("engine", args.seeds[0])]
    t = first.timings
    print(
        f"  synbench() total {t['total_s']:.1f} s, its forwards {t['forward_s']:.1f} s, engine bare forwards of the "
        f"same count {floor:.1f} s: total / bare = {t['total_s'] / floor:.2f}x (target <= 1.10)"
    )
    print(f"  NCHW-engine run: total {results[('naive', args.seeds[0])].timings['total_s']:.1f} s")
    print(f"  {'run':16s} " + " ".join(f"eps={e:g}".rjust(9) for e in EPS) + "   (a_T = 0.7)")
    for (kind, seed), res in results.items():
        print(f"  {kind + ' seed ' + str(seed):16s} " + " ".join(f"{res.score(e, 0.7):9.4f}" for e in EPS))
    print(f"load after {loadavg()}")


def precision_effect(
    backbone: str = "timm:vit_base_patch16_224",
    device: str = "cuda",
    seeds: tuple[int, ...] = (0, 1, 2),
    precisions: tuple[str, ...] = ("fp32", "tf32", "bf16"),
    full: bool = True,
    eps: tuple[float, ...] = (0.0, 0.2, 0.4),
    a_T: float = 0.7,
) -> dict:
    """The effect of each extractor precision on SynBench scores, in Monte Carlo standard errors (for the lead's GPU
    run; issue 17 item 3). For every seed, SynBench runs once per precision on the SAME samples (same seed), so
    score_p − score_fp32 is the precision's effect alone; the seed-to-seed standard deviation of the fp32 score is
    the Monte Carlo standard error of one run at this budget (``full``: the official 49 s values × (2048 + 2048)
    images; else the reduced budget). Returns {"sd": {eps: sd}, "effect": {p: {eps: mean paired diff}},
    "effect_in_se": {p: {eps: diff / sd}}, "seconds": {p: mean wall}, "scores": {(p, seed): {eps: score}}}."""
    import statistics

    import torch

    from src.backbones import create_backbone
    from src.synbench import SynBenchConfig, synbench

    bb = create_backbone(backbone, pretrained=False).to(device).eval()
    size = tuple(getattr(bb, "input_size", (3, 224, 224)))
    base = {} if full else {"s_values": (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5), "n_test": 1024}
    scores, seconds = {}, {p: [] for p in precisions}
    for seed in seeds:
        for p in precisions:
            if device.startswith("cuda"):
                torch.cuda.synchronize()
            t = time.perf_counter()
            res = synbench(
                bb.embed, input_shape=size, config=SynBenchConfig(seed=seed, **base), device=device,
                extractor={"precision": p},
            )  # fmt: skip
            seconds[p].append(time.perf_counter() - t)
            scores[(p, seed)] = {e: float(res.score(e, a_T)) for e in eps}
    sd = {e: statistics.stdev(scores[("fp32", s)][e] for s in seeds) if len(seeds) > 1 else float("nan") for e in eps}
    effect = {
        p: {e: statistics.fmean(scores[(p, s)][e] - scores[("fp32", s)][e] for s in seeds) for e in eps}
        for p in precisions
    }
    out = {
        "sd": sd,
        "effect": effect,
        "effect_in_se": {p: {e: effect[p][e] / sd[e] if sd[e] > 0 else float("nan") for e in eps} for p in effect},
        "seconds": {p: statistics.fmean(v) for p, v in seconds.items()},
        "scores": scores,
    }
    print(f"precision effect on SynBench-Score (a_T = {a_T}), {backbone} on {device}, seeds {list(seeds)}")
    for p in precisions:
        cells = " ".join(f"eps={e:g}: {effect[p][e]:+.4f} ({out['effect_in_se'][p][e]:+.2f} SE)" for e in eps)
        print(f"  {p:5s} {out['seconds'][p]:7.1f} s  {cells}")
    print("  seed-to-seed SD (fp32): " + " ".join(f"eps={e:g}: {sd[e]:.4f}" for e in eps))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=["all", "forward", "allocator", "synbench", "scores", "worker"], default="all")
    ap.add_argument("--n", type=int, default=None, help="images per measurement (forward 1024, allocator 2048)")
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--threads", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--compile", action="store_true", help="forward: add torch.compile (tens of seconds to compile)")
    ap.add_argument("--autocast", choices=["bf16", "fp16"], default=None, help="deprecated: the extractor's precision")
    ap.add_argument("--seeds", type=int, nargs="+", default=[12, 13])
    ap.add_argument("--work", choices=["bare", "engine"], default="bare", help=argparse.SUPPRESS)
    ap.add_argument("--cli-overrides", nargs="*", default=[], help="extra Hydra overrides for the synbench CLI")
    args = ap.parse_args()
    if args.part == "worker":
        args.n = args.n or 2048
        return _worker(args)
    parts = ["forward", "allocator", "synbench", "scores"] if args.part == "all" else [args.part]
    n = args.n
    for part in parts:
        args.n = n or (1024 if part == "forward" else 2048)
        runner = {
            "forward": part_forward,
            "allocator": part_allocator,
            "synbench": part_synbench,
            "scores": part_scores,
        }
        runner[part](args)
        print()


if __name__ == "__main__":
    main()
