"""SynBench sampling benchmark: Philox-4x32-10 draws (src/rng/philox.py) against today's torch.Generator randn.

    python -m benchmarks.sampling                   # draw rates (Mvalues/s) at 1 and 2 threads, old vs new
    python -m benchmarks.sampling --scores 3        # + old vs new SynBench scores over 3 seeds (EfficientNet-Lite0)

(a) Draw rates, in one process, interleaved, min of ``--repeats``: ``torch.randn`` from one CPU ``torch.Generator``
per chunk (the sampler before Philox: ``old``) and :func:`src.rng.philox.normal` (``new``), Mvalues/s at 1 and 2
torch threads, plus the full chunk (:func:`src.synbench.sampling.sample_chunk`, labels + mean + ImageNet affine)
both ways. Prints the thread scaling new(2)/new(1) (target >= 1.7) and new/old at each thread count.
(b) ``--scores k``: SynBench scores (a_T = 0.7, every ε) of ``embedded:efficientnet_lite0`` at ``--image-size`` px
for seeds 0 … k−1 with the Philox samples and with the old randn samples (the old sampler patched in), and the
mean difference in units of the seed-to-seed standard error (sd over seeds / √k).
(c) ``--whole-process k``: ``python -m src.synbench`` (the settings of ``benchmarks.engine --part synbench``: lite0,
64 px, 5 s values × (2048 + 2048)) as whole processes, alternating the Philox sampler and the old one patched in,
k pairs: what a user's run costs end to end, the kernel's compilation included.
(d) :func:`synbench_timing` — for the lead's GPU script (benchmarks/gpu.py): wall, forward and sampling time of
``synbench()`` with the side-stream overlap on and off.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from src.rng import philox  # noqa: E402
from src.synbench import sampling as S  # noqa: E402


def old_sample_chunk(chunk: int, **kw: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """The sampler before Philox: one torch.Generator per chunk seeded with chunk_seed, rand labels, randn noise."""
    device = kw.get("device", "cpu")
    shape = tuple(kw["input_shape"])
    cs, dtype = int(kw.get("chunk_size", 256)), kw.get("dtype", torch.float32)
    g = torch.Generator(device=device).manual_seed(S.chunk_seed(kw.get("seed", 0), kw["s"], kw["split"], chunk))
    y = (torch.rand(cs, generator=g, device=device) < kw.get("class_prior", 0.5)).long()
    x = torch.randn((cs, *shape), generator=g, device=device, dtype=dtype)
    d = math.prod(shape)
    per = x.view(cs, *S.channel_layout(shape))
    if kw.get("factor") is not None:
        per = S.apply_banded_factor(per, kw["factor"])
    mean = kw.get("mean_offset", 0.5) + (2.0 * y.to(dtype) - 1.0) * (kw["s"] / math.sqrt(d))
    aff = kw.get("channel_affine")
    if aff is None:
        return per.add_(mean.view(cs, 1, 1)).view(cs, *shape), y
    scale, shift = (t.to(device, dtype).view(-1, 1) for t in aff)
    return per.mul_(scale).add_(scale * mean.view(cs, 1, 1) + shift).view(cs, *shape), y


@contextlib.contextmanager
def old_sampler() -> Iterator[None]:
    """Patch the pre-Philox sampler into the SynBench plan (for score comparisons)."""
    from src.synbench import plan

    saved = plan.sample_chunk
    plan.sample_chunk = old_sample_chunk
    try:
        yield
    finally:
        plan.sample_chunk = saved


def _best(fn: Any, repeats: int) -> float:
    fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def draw_rates(n: int = 1 << 22, image: int = 64, repeats: int = 5) -> dict[str, float]:
    """Mvalues/s of old/new bare normals and old/new SynBench chunks at 1 and 2 threads (interleaved, min)."""
    key = philox.stream_key(0)
    kw = dict(s=1.0, input_shape=(3, image, image), seed=0, split="train", chunk_size=256)
    kw["channel_affine"] = (torch.full((3,), 2.0), torch.full((3,), -1.0))
    per_chunk = 256 * 3 * image * image
    chunks = max(1, n // per_chunk)
    out: dict[str, float] = {}
    philox.normal(key, 1 << 16)  # compiles the kernel once, outside the timings
    prev = torch.get_num_threads()
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            g = torch.Generator().manual_seed(0)
            cases = {
                "randn": (lambda g=g: torch.randn(n, generator=g), n),
                "philox": (lambda: philox.normal(key, n), n),
                "chunk_old": (lambda: [old_sample_chunk(c, **kw) for c in range(chunks)], chunks * per_chunk),
                "chunk_new": (lambda: [S.sample_chunk(c, **kw) for c in range(chunks)], chunks * per_chunk),
            }
            for name, (fn, count) in cases.items():
                out[f"{name}@{threads}"] = count / _best(fn, repeats) / 1e6
    finally:
        torch.set_num_threads(prev)
    return out


def scores(seeds: int, image: int = 32, n: int = 1024, s_values: tuple[float, ...] = (0.1, 1.0, 5.0)) -> dict:
    """SynBench a_T = 0.7 scores (per ε) of EfficientNet-Lite0 for ``seeds`` seeds, Philox vs old samples."""
    from src.backbones import create_backbone
    from src.synbench import SynBenchConfig, synbench

    bb = create_backbone("embedded:efficientnet_lite0").eval()
    res: dict[str, list[list[float]]] = {"new": [], "old": []}
    for seed in range(seeds):
        cfg = SynBenchConfig(s_values=s_values, n_train=n, n_test=n, seed=seed, a_T=(0.7,))
        for name in ("new", "old"):
            with old_sampler() if name == "old" else contextlib.nullcontext():
                r = synbench(bb.embed, input_shape=(3, image, image), config=cfg)
            res[name].append([r.score(eps, 0.7) for eps in cfg.eps])
    new, old = torch.tensor(res["new"], dtype=torch.float64), torch.tensor(res["old"], dtype=torch.float64)
    se = torch.sqrt((new.var(0) + old.var(0)) / 2 / seeds)  # seed-to-seed standard error of one method's mean
    return {
        "eps": list(cfg.eps),
        "new_mean": new.mean(0).tolist(),
        "old_mean": old.mean(0).tolist(),
        "diff_in_se": ((new.mean(0) - old.mean(0)) / se).tolist(),
        "se": se.tolist(),
    }


def synbench_timing(backbone: Any, device: Any = "cuda", budget: dict | None = None, overlap: bool = True) -> dict:
    """Wall, forward and non-forward seconds of ``synbench(backbone.embed, ...)`` on ``device``; ``budget``:
    SynBenchConfig fields (default: 3 s values of the official protocol at 224 px); ``overlap=False`` draws each
    batch on the caller's stream right before its forward (no side stream) for comparison. For benchmarks/gpu.py:

        from benchmarks.sampling import synbench_timing
        bb = create_backbone(...).to("cuda")
        print(synbench_timing(bb, "cuda"), synbench_timing(bb, "cuda", overlap=False))
    """
    from src.synbench import SynBenchConfig, protocol, synbench

    budget = {"s_values": (0.1, 1.0, 5.0), **dict(budget or {})}
    image = int(budget.pop("image_size", 224))
    cfg = SynBenchConfig(**budget)
    saved = protocol.draw_ahead
    if not overlap:
        protocol.draw_ahead = lambda batches, threads=None, device="cpu": saved(batches, threads, "cpu")
    try:
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        r = synbench(backbone.embed, input_shape=(3, image, image), config=cfg, device=device)
        wall = time.perf_counter() - t0
    finally:
        protocol.draw_ahead = saved
    fwd = float(r.timings.get("forward_s", float("nan")))
    images = len(cfg.s_values) * (cfg.n_train + cfg.n_test)
    return {"overlap": overlap, "wall_s": wall, "forward_s": fwd, "other_s": wall - fwd, "images": images}


def _cli_worker(sampler: str, overrides: list[str]) -> None:
    """Run ``python -m src.synbench`` with ``overrides`` in this process, the old sampler patched in if asked."""
    from src.synbench.__main__ import main as synbench_main

    sys.argv = ["src.synbench", *overrides]
    with old_sampler() if sampler == "old" else contextlib.nullcontext():
        synbench_main()


def whole_process(pairs: int) -> dict[str, list[float]]:
    """Wall seconds of whole ``python -m src.synbench`` processes, new (Philox) and old sampler alternating."""
    from benchmarks.engine import _cli_argv, _subprocess, loadavg

    walls: dict[str, list[float]] = {"new": [], "old": []}
    print(f"whole processes, {pairs} pairs; load before {loadavg()}")
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(pairs):
            for sampler in ("old", "new"):
                overrides = _cli_argv(os.path.join(tmp, f"{sampler}{i}"), [])[2:]
                argv = ["-m", "benchmarks.sampling", "--cli-worker", sampler, "--", *overrides]
                walls[sampler].append(_subprocess(argv, "keep")[1])  # the CLI's allocator setting
    ratio = statistics.median(o / n for o, n in zip(walls["old"], walls["new"]))
    for sampler, ws in walls.items():
        print(f"  python -m src.synbench, {sampler} sampler: {', '.join(f'{w:.1f}' for w in ws)} s")
    print(f"  old/new (median of paired ratios): {ratio:.2f}x; load after {loadavg()}")
    return walls


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=1 << 22, help="values per bare draw")
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--scores", type=int, default=0, help="seeds of the old-vs-new score comparison (0: skip)")
    ap.add_argument("--whole-process", type=int, default=0, help="pairs of whole SynBench CLI runs, old vs new")
    ap.add_argument("--cli-worker", choices=["old", "new"], default=None, help=argparse.SUPPRESS)
    ap.add_argument("overrides", nargs="*", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.cli_worker:
        return _cli_worker(args.cli_worker, args.overrides)
    print(f"philox compiled rounds: {philox.compile_enabled()}  (REPBENCH_PHILOX_COMPILE=0 for eager)")
    r = draw_rates(args.n, args.image_size, args.repeats)
    for threads in (1, 2):
        row = "  ".join(f"{k.split('@')[0]} {v:7.1f}" for k, v in r.items() if k.endswith(f"@{threads}"))
        print(f"{threads} thread(s), Mvalues/s: {row}")
    print(f"philox scaling 2 vs 1 thread: {r['philox@2'] / r['philox@1']:.2f}x (target >= 1.7)")
    for threads in (1, 2):
        print(
            f"new/old at {threads} thread(s): bare {r[f'philox@{threads}'] / r[f'randn@{threads}']:.2f}x, "
            f"chunk {r[f'chunk_new@{threads}'] / r[f'chunk_old@{threads}']:.2f}x"
        )
    if args.scores:
        print(scores(args.scores, image=min(args.image_size, 32)))
    if args.whole_process:
        whole_process(args.whole_process)


if __name__ == "__main__":
    main()
