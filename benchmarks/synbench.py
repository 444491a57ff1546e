"""SynBench speed and memory benchmark.

    python -m benchmarks.synbench                       # reduced budget: 64², n = 512 + 512 per s, 4 s values
    python benchmarks/synbench.py --image-size 224 --n 2048 --s-values 49   # the official protocol

Measures, in one process: (a) the wall time of ``synbench()`` on a backbone, (b) the time of the bare forwards of
the same number of images of the same shapes and batch sizes (the physical floor: pre-generated inputs, eval
mode, inference mode), their ratio (target ≤ 1.10), and the runner's own split (time inside ``feature_fn`` vs
the rest: sampling, statistics, eigh, per-ε solves). (a) and (b) are interleaved ``--repeats`` times; the
minimum of each is reported (robust to other load on the machine).
(c) Peak memory against the number of s values: each count runs in a fresh subprocess, which reports the peak
resident set size (RSS, psutil, polled every millisecond) *above* the RSS after loading the model and one
warm-up forward, plus the process-wide ``ru_maxrss``.

Backbone: ``src.backbones.create_backbone("embedded:efficientnet_lite0")`` when importable, else
``timm.create_model("resnet18", pretrained=False, num_classes=0)`` with ImageNet normalisation.
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python benchmarks/synbench.py` from anywhere
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from src.synbench import SynBenchConfig, synbench  # noqa: E402


def load_backbone(name: str):
    """(feature_fn, description): a Backbone's ``embed`` (normalises internally) or a timm fallback."""
    try:
        from src.backbones import create_backbone

        bb = create_backbone(name).eval()
        return bb.embed, f"{name} (D={bb.embed_dim})"
    except Exception as err:
        import timm

        from src.synbench.config import IMAGENET_MEAN, IMAGENET_STD

        model = timm.create_model("resnet18", pretrained=False, num_classes=0).eval()
        mean, std = torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)

        class Fallback:
            """Pixel-space embed with internal ImageNet normalisation, like the repo's Backbone."""

            def __init__(self) -> None:
                self.mean, self.std = IMAGENET_MEAN, IMAGENET_STD

            def embed(self, x: torch.Tensor) -> torch.Tensor:
                return model((x - mean) / std)

        return Fallback().embed, f"timm resnet18, random init (D={model.num_features}; {name} failed: {err})"


def batch_sizes(cfg: SynBenchConfig) -> list[int]:
    """The forward batch sizes synbench() uses: per s, train then test, full batches and a remainder."""
    out: list[int] = []
    for _ in cfg.s_values:
        for n in (cfg.n_train, cfg.n_test):
            out += [cfg.batch_size] * (n // cfg.batch_size) + ([n % cfg.batch_size] if n % cfg.batch_size else [])
    return out


def bare_forwards(fn, shape: tuple[int, ...], sizes: list[int]) -> float:
    """Seconds for the forwards alone on pre-generated inputs of the same shapes."""
    x = torch.randn(max(sizes), *shape)
    t0 = time.perf_counter()
    with torch.inference_mode():
        for b in sizes:
            fn(x[:b])
    return time.perf_counter() - t0


def memory_probe(args: argparse.Namespace) -> None:
    """Child process: peak RSS above the post-warm-up baseline for one synbench() run with k s values."""
    import psutil

    fn, _ = load_backbone(args.backbone)
    shape = (3, args.image_size, args.image_size)
    with torch.inference_mode():
        fn(torch.randn(args.memory_n, *shape))
    k = args.memory_probe
    cfg = SynBenchConfig(
        s_values=tuple(round(4.8 * (i + 1) / k, 6) for i in range(k)),
        n_train=args.memory_n,
        n_test=args.memory_n,
        batch_size=args.memory_n,
    )
    proc = psutil.Process()
    base = proc.memory_info().rss
    peak, stop = [base], threading.Event()

    def poll() -> None:
        while not stop.is_set():
            peak[0] = max(peak[0], proc.memory_info().rss)
            time.sleep(0.001)

    th = threading.Thread(target=poll, daemon=True)
    th.start()
    synbench(fn, input_shape=shape, config=cfg)
    stop.set()
    th.join()
    peak[0] = max(peak[0], proc.memory_info().rss)
    import resource

    print(
        json.dumps(
            {
                "k": k,
                "delta_mib": (peak[0] - base) / 2**20,
                "ru_maxrss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
            }
        )
    )


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--backbone", default="embedded:efficientnet_lite0")
    p.add_argument("--image-size", type=int, default=64)
    p.add_argument("--n", type=int, default=512, help="train and test samples per s value")
    p.add_argument("--s-values", type=int, default=4, help="number of s values (evenly spread over 0.1 … 4.9)")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--repeats", type=int, default=1)
    p.add_argument("--memory-s", type=int, nargs="*", default=[2, 4, 8], help="s counts for the memory probe")
    p.add_argument("--memory-n", type=int, default=64, help="samples per split in the memory probe")
    p.add_argument("--memory-probe", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.memory_probe:
        return memory_probe(args)

    fn, desc = load_backbone(args.backbone)
    shape = (3, args.image_size, args.image_size)
    k = args.s_values
    s_vals = tuple(round(0.1 + 4.8 * i / (k - 1), 6) for i in range(k)) if k > 1 else (2.5,)
    cfg = SynBenchConfig(s_values=s_vals, n_train=args.n, n_test=args.n, batch_size=args.batch_size)
    sizes = batch_sizes(cfg)
    bare_forwards(fn, shape, sizes[:1])  # warm-up
    bare, total, inner = math.inf, math.inf, math.inf
    res = None
    for _ in range(args.repeats):
        bare = min(bare, bare_forwards(fn, shape, sizes))
        t0 = time.perf_counter()
        res = synbench(fn, input_shape=shape, config=cfg)
        total = min(total, time.perf_counter() - t0)
        inner = min(inner, res.timings["forward_s"])
    mem = []
    for m in args.memory_s:
        cmd = [
            sys.executable,
            str(Path(__file__).resolve()),
            "--memory-probe",
            str(m),
            "--backbone",
            args.backbone,
            "--image-size",
            str(args.image_size),
            "--memory-n",
            str(args.memory_n),
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
        line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
        mem.append(json.loads(line[-1]) if line else {"k": m, "error": out.stderr.strip().splitlines()[-1:]})

    n_img = sum(sizes)
    print(
        f"\nSynBench benchmark: {desc}, input {shape}, {k} s values x ({args.n} train + {args.n} test) = "
        f"{n_img} images, batch {args.batch_size}, {torch.get_num_threads()} threads, eps grid {len(cfg.eps)}"
    )
    print("| quantity | value |\n| --- | --- |")
    print(f"| (b) bare forwards, same images | {bare:.2f} s ({n_img / bare:.1f} img/s) |")
    print(f"| (a) synbench() total | {total:.2f} s |")
    print(f"| ratio (a)/(b) (target <= 1.10) | {total / bare:.3f} |")
    print(f"| in-run: time inside feature_fn | {inner:.2f} s |")
    print(
        f"| in-run: everything else (sampling, stats, eigh, eps solves) | {total - inner:.2f} s "
        f"({(total - inner) / total:.1%} of total) |"
    )
    for m in mem:
        if "error" in m:
            print(f"| peak RSS, {m['k']} s values | failed: {m['error']} |")
        else:
            print(
                f"| peak RSS above baseline, {m['k']} s values (n={args.memory_n}) | {m['delta_mib']:.1f} MiB "
                f"(ru_maxrss {m['ru_maxrss_mib']:.0f} MiB) |"
            )
    if res is not None:
        try:
            print(f"\nscore (eps = 0, a_T = {cfg.a_T[0]}): {res.score(0.0):.3f}; best eps {res.best_eps()}")
        except ValueError as err:  # too few s values for a reference area above a_T
            print(f"\nscore not available: {err}")


if __name__ == "__main__":
    main()
