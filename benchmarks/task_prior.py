"""Task Prior benchmark: time and peak memory of the closed-form moments; sampler throughput.

    python -m benchmarks.task_prior                    # n = 8192 (tiled vs dense), n = 100,000 (tiled, one shard)
    python -m benchmarks.task_prior --quick            # n = 2048 and n = 20,000: a few minutes
    python -m benchmarks.task_prior --full-large       # n = 100,000 all row blocks (hours on 2 CPU cores)
    python -m benchmarks.task_prior --part rate        # moments vs the GEMM rate, n = 2048/4096/8192, same process
    python -m benchmarks.task_prior --part rate --sizes 2048 4096 --dim 640   # smaller runs
    python -m benchmarks.task_prior --part probe       # the probes' cost per convention at the default sizes

(c) Rate (``--part rate``). In this process, interleaved ``--repeats`` times, best of each: the GEMM rate of
``torch.mm`` at the tile shape (block × D times D × block, float32 and float64, GFLOP/s), the previous tile loop
(``legacy_moment_sums``: the row and column slices and both kernels' tiles rebuilt per tile in float64, σ by
out-of-place operations) and ``task_prior_moments`` at each ``precision``; for each its wall time and achieved rate
= flops of the two n × n × D products (4·n²·D) / wall (the symmetric loop executes about half of them), the ratio
GEMM rate / achieved rate, and its difference to the float64 result next to the a-priori bound of
``float32_error_bounds``. ``moments_timing(n, D, device)`` is the same measurement for one size on any device
(benchmarks/gpu.py calls it on CUDA).

(a) Moments. Each case runs in a fresh subprocess, which reports its wall time and its extra peak memory: the
kernel-tracked peak resident set size (``ru_maxrss``) at the end minus the value right after the input features
(float32, n × D, eval and prior) were created — the memory the computation adds on top of its inputs. Cases:
``tiled`` = ``task_prior_moments`` (row/column tiles, float64, never n × n); ``dense`` = the authors' formulation
(both n × n kernels in float64, σ over the full matrix) where it fits. Tiled and dense alternate ``--repeats``
times; the minimum time of each and their ratio are printed. At n = 100,000 the default runs one round-robin shard
(``Shard(0, S)``: row block 0 against every column block, exactly what one of S ranks does) and extrapolates the
total time from its share of the tiles; memory does not depend on how many tiles run (one tile at a time).
(d) Probes (``--part probe``). In this process, interleaved ``--repeats`` times, best of each: the wall time of the
probes of one backbone (``evaluate_task_probes`` with each convention's probe: ``repbench`` = q-way softmax, full
batch on the 70 % training split, constant lr; ``authors`` = one BCE logit per task, batches of 256 over all n,
cosine lr), for ``--probe-epochs`` epochs on random features and labels after one warm-up call, extrapolated
linearly to the study's 100 epochs (every epoch costs the same; the one scoring pass is counted 100/epochs times, a
small overestimate). Sizes: the study's default (n = 600, D = 1280, 32 tasks), the paper preset
(n = 8192, D = 2048, 32 tasks) and the authors' run (n = 8192, D = 2048, 512 tasks).
(b) Sampler. In this process, interleaved: ``sample_task_labels`` (vectorised over tasks, Gumbel-max prefix sums)
vs a naive numpy loop like the authors' (one labeling at a time, ``rng.choice`` per point); labelings per second
and their ratio.
"""

from __future__ import annotations

import argparse
import json
import math
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python benchmarks/task_prior.py` from anywhere
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
import torch  # noqa: E402

from src.task_prior import centered_cosine_kernel, sample_task_labels, task_prior_moments  # noqa: E402
from src.task_prior.conventions import CONVENTIONS  # noqa: E402
from src.task_prior.kernels import CenteredCosine  # noqa: E402
from src.task_prior.moments import (  # noqa: E402
    float32_error_bounds,
    kernel_scale,
    kernel_source,
    sharded_moment_sums,
    tile_moment_sums,
)
from src.task_prior.probing import evaluate_task_probes, random_split  # noqa: E402
from src.task_prior.sampler import prior_factor  # noqa: E402
from src.utils.distributed import Shard  # noqa: E402

TEMPERATURE = 0.01


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def make_features(n: int, dim: int, seed: int, device: str | torch.device = "cpu") -> torch.Tensor:
    """float32 (n, dim): 10 clusters plus noise (a rough stand-in for pooled backbone features, non-negative).
    Drawn on ``device`` by its own generator (CUDA draws differ from the CPU's; the timing does not depend on them)."""
    g = torch.Generator(device=device).manual_seed(seed)
    centers = torch.rand(10, dim, generator=g, device=device)
    x = torch.empty(n, dim, device=device)
    for start in range(0, n, 65536):
        stop = min(start + 65536, n)
        idx = torch.randint(0, 10, (stop - start,), generator=g, device=device)
        x[start:stop] = centers[idx] + 0.5 * torch.rand(stop - start, dim, generator=g, device=device)
    return x


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def gemm_rate(dtype: torch.dtype, block: int, dim: int, device: str | torch.device = "cpu", repeats: int = 3) -> float:
    """GFLOP/s of ``torch.mm`` at the moments' tile shape, (block × dim) · (dim × block), best of ``repeats``."""
    device = torch.device(device)
    a = torch.randn(block, dim, dtype=dtype, device=device)
    b = torch.randn(block, dim, dtype=dtype, device=device)
    out = torch.empty(block, block, dtype=dtype, device=device)
    torch.mm(a, b.T, out=out)
    best = math.inf
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        for _ in range(3):
            torch.mm(a, b.T, out=out)
        _sync(device)
        best = min(best, (time.perf_counter() - t0) / 3)
    return 2 * block * block * dim / best / 1e9


def legacy_moment_sums(xe: torch.Tensor, xp: torch.Tensor, t: float, block: int) -> tuple[float, float]:
    """The tile loop before issue 17 (the baseline), from public pieces: per tile both kernels' row and column slices
    rebuilt in float64 (``CenteredCosine.block``), σ and the sums by out-of-place operations (``tile_moment_sums``);
    repbench convention (M/‖M‖_F, raw K), upper block triangle."""
    msrc, ksrc = CenteredCosine(xe), CenteredCosine(xp)
    en = msrc.frobenius_norm()
    n, nb = xe.shape[0], math.ceil(xe.shape[0] / block)
    out = torch.zeros(2, dtype=torch.float64, device=xe.device)
    for b in range(nb):
        rs = slice(b * block, min((b + 1) * block, n))
        for c in range(b, nb):
            cs = slice(c * block, (c + 1) * block)
            part = tile_moment_sums(msrc.block(rs, cs) / en, ksrc.block(rs, cs), t)
            out += part if c == b else 2.0 * part
    return float(out[0]), float(out[1])


def default_block(device: torch.device) -> int:
    """Tile side for the timing: 4096 on CUDA (fewer, larger kernels), the library default elsewhere."""
    return 4096 if device.type == "cuda" else 1024


def moments_timing(
    n: int,
    D: int,
    device: str,
    *,
    precision: str = "float64",
    block_size: int | None = None,
    temperature: float = TEMPERATURE,
    seed: int = 0,
) -> dict:
    """Wall time and achieved GFLOP/s of ``task_prior_moments`` on random features (``make_features``, drawn on
    ``device``), with the GEMM rate of that device at the tile shape measured in the same call.

    Returned keys: n, D, device, precision, block_size, seconds (the moments alone, features already on the device),
    gflops (4·n²·D / seconds: the two n × n × D products), gemm_gflops_float32 / _float64, gemm_over_achieved
    (GEMM rate of the products' dtype / achieved), mean, var, peak_gpu_mb (CUDA: peak allocated during the call).
    """
    dev = torch.device(device)
    bs = block_size or default_block(dev)
    xe, xp = make_features(n, D, seed, dev), make_features(n, D, seed + 1, dev)
    rates = {dt: gemm_rate(dt, min(bs, n), D, dev) for dt in (torch.float32, torch.float64)}
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)
        base = torch.cuda.memory_allocated(dev)
    _sync(dev)
    t0 = time.perf_counter()
    e, v = task_prior_moments(xe, xp, temperature, block_size=bs, precision=precision)
    _sync(dev)
    seconds = time.perf_counter() - t0
    gflops = 4 * n * n * D / seconds / 1e9
    ref_rate = rates[torch.float32 if precision == "float32" else torch.float64]
    out = {
        "n": n,
        "D": D,
        "device": str(dev) if dev.type != "cuda" else torch.cuda.get_device_name(dev),
        "precision": precision,
        "block_size": bs,
        "seconds": seconds,
        "gflops": gflops,
        "gemm_gflops_float32": rates[torch.float32],
        "gemm_gflops_float64": rates[torch.float64],
        "gemm_over_achieved": ref_rate / gflops,
        "mean": e,
        "var": v,
    }
    if dev.type == "cuda":
        out["peak_gpu_mb"] = (torch.cuda.max_memory_allocated(dev) - base) / 2**20
    return out


def _rate_cases(xe: torch.Tensor, xp: torch.Tensor, block: int, legacy: bool) -> dict:
    """name -> zero-argument callable returning (E, Var), for ``bench_rate``."""
    cases = {} if not legacy else {"legacy": lambda: legacy_moment_sums(xe, xp, TEMPERATURE, block)}
    for p in ("float64", "float32", "auto"):
        cases[p] = lambda p=p: task_prior_moments(xe, xp, TEMPERATURE, block_size=block, precision=p)
    return cases


def bench_rate(sizes: list[int], dim: int, block: int, repeats: int, threads: int, legacy: bool) -> None:
    """(c): GEMM rate vs the moments' achieved rate, interleaved in this process; errors vs float64 and the bound."""
    torch.set_num_threads(threads)
    g32, g64 = gemm_rate(torch.float32, block, dim), gemm_rate(torch.float64, block, dim)
    print(f"GEMM rate at the tile shape ({block} x {dim} x {block}): float32 {g32:.1f}, float64 {g64:.1f} GFLOP/s")
    for n in sizes:
        xe, xp = make_features(n, dim, 0), make_features(n, dim, 1)
        cases = _rate_cases(xe, xp, block, legacy)
        best: dict[str, float] = {}
        result: dict[str, tuple[float, float]] = {}
        for _ in range(repeats):
            for name, fn in cases.items():
                t0 = time.perf_counter()
                result[name] = fn()
                best[name] = min(best.get(name, math.inf), time.perf_counter() - t0)
        rho_m, rho_k = float32_error_bounds(CenteredCosine(xe), CenteredCosine(xp), TEMPERATURE)
        e64, v64 = result["float64"]
        flops = 4 * n * n * dim
        for name, sec in best.items():
            rate = flops / sec / 1e9
            ref = g32 if name == "float32" else g64
            err = f"rel. err E {abs(result[name][0] - e64) / abs(e64):.1e}, Var {abs(result[name][1] - v64) / v64:.1e}"
            print(
                f"n={n:>6} D={dim} {name:>8}: {sec:7.2f} s, {rate:6.1f} GFLOP/s (GEMM {ref:.1f}: "
                f"{ref / rate:.2f}x), {err}; speed-up over legacy {best.get('legacy', math.nan) / sec:.2f}x",
                flush=True,
            )
        print(f"  a-priori float32 bounds: rho_M {rho_m:.1e}, rho_K {rho_k:.1e} (T = {TEMPERATURE})", flush=True)


def dense_moments(xe: torch.Tensor, xp: torch.Tensor, t: float) -> tuple[float, float]:
    """The n × n formulation (float64): M/‖M‖_F and raw K materialised, σ over the whole matrix."""
    m = centered_cosine_kernel(xe, frobenius=True)
    k = centered_cosine_kernel(xp)
    p = torch.sigmoid(k / t)
    return float((m * p).sum()), float((m.square() * p * (1 - p)).sum())


def run_case(args: argparse.Namespace) -> dict:
    """One measurement inside a fresh process."""
    torch.set_num_threads(args.threads)
    xe, xp = make_features(args.n, args.dim, 0), make_features(args.n, args.dim, 1)
    base = _rss_mb()
    t0 = time.perf_counter()
    out: dict = {"impl": args.impl, "n": args.n, "dim": args.dim}
    if args.impl == "dense":
        e, v = dense_moments(xe, xp, TEMPERATURE)
        out["seconds"] = time.perf_counter() - t0
    else:
        msrc, ksrc = kernel_source(xe, None, "eval"), kernel_source(xp, None, "prior")
        en = kernel_scale(msrc, "frobenius", "eval_scale")
        setup = time.perf_counter() - t0
        nb = math.ceil(args.n / args.block)
        shard = Shard(0, args.shards)
        sums = sharded_moment_sums(msrc, ksrc, TEMPERATURE, shard=shard, block_size=args.block, eval_norm=en)
        loop = time.perf_counter() - t0 - setup
        tiles_done = sum(nb - b for b in shard.indices(nb))
        tiles_total = nb * (nb + 1) // 2
        e, v = float(sums[0]), float(sums[1])
        out.update(
            seconds=setup + loop * tiles_total / tiles_done,
            setup_seconds=setup,
            loop_seconds=loop,
            tiles_done=tiles_done,
            tiles_total=tiles_total,
            extrapolated=tiles_done < tiles_total,
        )
    out.update(mean=e, var=v, extra_peak_mb=_rss_mb() - base, inputs_mb=2 * xe.numel() * 4 / 2**20)
    return out


def spawn(n: int, dim: int, impl: str, block: int, shards: int, threads: int) -> dict:
    cmd = [sys.executable, "-m", "benchmarks.task_prior", "--case", impl, "--n", str(n), "--dim", str(dim)]
    cmd += ["--block", str(block), "--shards", str(shards), "--threads", str(threads)]
    res = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"case {impl} n={n} failed:\n{res.stderr[-3000:]}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def bench_moments(n: int, dim: int, block: int, repeats: int, dense: bool, shards: int, threads: int) -> None:
    runs: dict[str, list[dict]] = {"tiled": [], "dense": []}
    for _ in range(repeats):
        runs["tiled"].append(spawn(n, dim, "tiled", block, shards, threads))
        if dense:
            runs["dense"].append(spawn(n, dim, "dense", block, 1, threads))
    tiled = min(runs["tiled"], key=lambda r: r["seconds"])
    note = f" (extrapolated from {tiled['tiles_done']}/{tiled['tiles_total']} tiles)" if tiled["extrapolated"] else ""
    what = "partial E/Var of that shard" if tiled["extrapolated"] else "E/Var"
    print(
        f"n={n:>7} D={dim} tiled (block {block}): {tiled['seconds']:9.1f} s{note}, "
        f"setup {tiled['setup_seconds']:.1f} s, extra peak {tiled['extra_peak_mb']:8.1f} MB "
        f"(inputs {tiled['inputs_mb']:.0f} MB); {what} {tiled['mean']:.6g} / {tiled['var']:.6g}",
        flush=True,
    )
    if dense:
        d = min(runs["dense"], key=lambda r: r["seconds"])
        print(
            f"n={n:>7} D={dim} dense n×n       : {d['seconds']:9.1f} s, extra peak {d['extra_peak_mb']:8.1f} MB; "
            f"E={d['mean']:.6g} Var={d['var']:.6g}",
            flush=True,
        )
        print(
            f"  ratio tiled/dense: time {tiled['seconds'] / d['seconds']:.2f}, "
            f"extra peak memory {tiled['extra_peak_mb'] / d['extra_peak_mb']:.3f}; "
            f"|ΔE| = {abs(tiled['mean'] - d['mean']):.2e}, |ΔVar| = {abs(tiled['var'] - d['var']):.2e}",
            flush=True,
        )


def numpy_prefix_sampler(z: np.ndarray, q: int, t: float, rng: np.random.Generator) -> np.ndarray:
    """The naive loop (one labeling, one point at a time, ``rng.choice`` per point), like the authors' code."""
    n, r = z.shape
    u = np.zeros((r, q))
    labels = np.empty(n, dtype=np.int64)
    for i in rng.permutation(n):
        h = (z[i] @ u) / t
        h -= h.max()
        p = np.exp(h)
        p /= p.sum()
        c = rng.choice(q, p=p)
        labels[i] = c
        u[:, c] += z[i]
    return labels


def bench_sampler(n: int, dim: int, q: int, tasks: int, repeats: int, threads: int) -> None:
    torch.set_num_threads(threads)
    z = prior_factor(make_features(n, dim, 2))
    zn = z.numpy()
    rng = np.random.default_rng(0)
    g = torch.Generator().manual_seed(0)
    ours, naive = [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        sample_task_labels(None, q, TEMPERATURE, tasks, generator=g, factor=z, order="random")
        ours.append(tasks / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        numpy_prefix_sampler(zn, q, TEMPERATURE, rng)
        naive.append(1 / (time.perf_counter() - t0))
    print(
        f"sampler n={n} D={dim} q={q}: vectorised ({tasks} tasks/call) {max(ours):.2f} labelings/s, "
        f"numpy loop {max(naive):.3f} labelings/s, ratio {max(ours) / max(naive):.1f}x",
        flush=True,
    )


#: (n, D, tasks) of --part probe: the study's default, the paper preset, the authors' 512 tasks
PROBE_SIZES = ((600, 1280, 32), (8192, 2048, 32), (8192, 2048, 512))


def probe_timing(n: int, dim: int, tasks: int, convention: str, epochs: int, device: str = "cpu") -> float:
    """Seconds of ``convention``'s probes of one backbone (``tasks`` binary tasks, n random features of dimension
    ``dim``) trained for ``epochs`` epochs and scored, as ``compare_features`` runs them."""
    conv = CONVENTIONS[convention]
    x = make_features(n, dim, 0, device)
    labels = torch.randint(0, 2, (tasks, n), generator=torch.Generator().manual_seed(1))
    if conv.probe_split == "train":
        tr = te = torch.arange(n)
    else:
        tr, te = random_split(n, 0.3, seed=0)
    _sync(torch.device(device))
    t0 = time.perf_counter()
    evaluate_task_probes(x, labels, tr, te, 2, metric=conv.probe_metric, split=conv.probe_split, epochs=epochs,
                         **conv.probe_options)  # fmt: skip
    _sync(torch.device(device))
    return time.perf_counter() - t0


def bench_probe(epochs: int, repeats: int, threads: int) -> None:
    torch.set_num_threads(threads)
    for c in ("repbench", "authors"):  # warm-up: the first call pays torch's lazy initialisation (about 2 s here)
        probe_timing(64, 16, 2, c, 1)
    for n, dim, tasks in PROBE_SIZES:
        best = {c: math.inf for c in ("repbench", "authors")}
        for _ in range(repeats):
            for c in best:
                best[c] = min(best[c], probe_timing(n, dim, tasks, c, epochs))
        line = ", ".join(f"{c} {t / epochs * 100:.1f} s" for c, t in best.items())
        print(f"probes n={n} D={dim} tasks={tasks}, per backbone at 100 epochs ({epochs} measured): {line}, "
              f"ratio authors/repbench {best['authors'] / best['repbench']:.1f}", flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--case", choices=["tiled", "dense"], help="internal: run one case and print JSON")
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--dim", type=int, default=1280)
    ap.add_argument("--block", type=int, default=1024)
    ap.add_argument("--shards", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--quick", action="store_true", help="n = 2048 and 20,000 instead of 8192 and 100,000")
    ap.add_argument("--full-large", action="store_true", help="run every tile at the large n (no extrapolation)")
    ap.add_argument("--skip-sampler", action="store_true")
    ap.add_argument("--skip-moments", action="store_true")
    ap.add_argument("--part", choices=["all", "rate", "probe"], default="all", help="rate: (c) only; probe: (d) only")
    ap.add_argument("--probe-epochs", type=int, default=10, help="epochs measured by --part probe (x 100/this)")
    ap.add_argument("--sizes", type=int, nargs="+", default=[2048, 4096, 8192], help="n for --part rate")
    ap.add_argument("--no-legacy", action="store_true", help="--part rate without the previous loop")
    args = ap.parse_args()
    if args.case:
        args.impl = args.case
        print(json.dumps(run_case(args)))
        return
    if args.part == "rate":
        print(f"torch {torch.__version__}, {args.threads} threads, T = {TEMPERATURE}, load {_loadavg()}", flush=True)
        bench_rate(args.sizes, args.dim, args.block, args.repeats, args.threads, not args.no_legacy)
        print(f"load after: {_loadavg()}", flush=True)
        return
    if args.part == "probe":
        print(f"torch {torch.__version__}, {args.threads} threads, load {_loadavg()}", flush=True)
        bench_probe(args.probe_epochs, args.repeats, args.threads)
        print(f"load after: {_loadavg()}", flush=True)
        return
    small, large = (2048, 20_000) if args.quick else (8192, 100_000)
    print(f"torch {torch.__version__}, {args.threads} threads, T = {TEMPERATURE}", flush=True)
    if not args.skip_moments:
        bench_moments(small, args.dim, args.block, args.repeats, True, 1, args.threads)
        shards = 1 if args.full_large else math.ceil(large / args.block)  # one row block when extrapolating
        bench_moments(large, args.dim, args.block, 1, False, shards, args.threads)
    if not args.skip_sampler:
        bench_sampler(2048 if not args.quick else 512, args.dim, 2, 64, args.repeats, args.threads)


if __name__ == "__main__":
    main()
