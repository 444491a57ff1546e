"""RepBench on one GPU: the figures of docs/speed.md ("GPU") in one script (≤ 5 minutes on an H100-class card).

    python -m benchmarks.gpu                              # everything, on cuda (≈ 5 minutes)
    python -m benchmarks.gpu --full                       # fp32 and the score comparison on the whole budget too
    python -m benchmarks.gpu --part synbench              # one part: synbench | perturbations | task_prior | train
    python -m benchmarks.gpu --smoke --device cpu         # seconds-long dry run of every part (tiny sizes, any device)

Parts (each prints its rows as it goes, and all rows go to ``--out`` as JSON):

* **synbench**: ViT-B/16 (timm ``vit_base_patch16_224``, random weights: no download), 224 px, the official
  protocol (49 s values × (2048 + 2048) images = 200,704 forwards) through ``synbench(..., device=...)`` with the
  library's defaults and with each other extractor precision (timing rows: wall, forward seconds, scores at
  ε = 0 / 0.2 / 0.4, a_T = 0.7); fp32's official wall is extrapolated from a seventh of the budget (``--full``: run).
  Scores on the SAME samples (the samples are Philox streams, identical on every device): ``fp32``, ``tf32``,
  ``bf16`` on every 7th s value (``--full``: all), then ``--seeds k`` more seeds of the last precision for the
  seed-to-seed SD of the score at that budget; each precision's effect (score − fp32 score) in units of that SD.
* **consistency**: EfficientNet-Lite0 (pretrained, offline wheel) at 64 px, 3 s values, fp32: scores to 6 digits,
  to compare with the same part run on a CPU (same samples; only the float arithmetic differs).
* **perturbations**: images/s of each of the nine perturbations (256 images, 224 px, on the device) and of a full
  DivergenceRadius sweep (m = 5, ViT-B/16 forwards included): :func:`benchmarks.perturbations.perturbation_throughput`.
* **task_prior**: Task-Prior moments at n = 100,000 and 1,000,000, D = 1280, with the device's GEMM rate measured in
  the same call: :func:`benchmarks.task_prior.moments_timing`.
* **train**: the main job, ``python -m src.train trainer=gpu`` (a subprocess; wall and test metrics).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

EPS = (0.0, 0.2, 0.4)
A_T = 0.7
PRECISIONS = ("fp32", "tf32", "bf16")


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def device_name(device: torch.device) -> str:
    """The card's name (or "cpu"), for every table this script prints."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"


def _backbone(name: str, device: torch.device) -> Any:
    from src.backbones import create_backbone

    return create_backbone(name, pretrained=False).to(device).eval()


def _subset(budget: dict[str, Any], every: int) -> dict[str, Any]:
    """``budget`` on every ``every``-th of its s values (the official 49 → 7 for every = 7), same n per s."""
    from src.synbench import SynBenchConfig

    s_values = tuple(budget.get("s_values", SynBenchConfig().s_values))
    return {**budget, "s_values": s_values[::every]}


def synbench_rows(
    device: torch.device,
    backbone: str,
    size: int,
    budget: dict[str, Any],
    seeds: int,
    precisions: tuple[str, ...] = PRECISIONS,
    every: int = 7,
    full: bool = False,
) -> dict[str, Any]:
    """The SynBench table in two blocks.

    Timing, on ``budget`` (the official protocol): the library's defaults, then each other precision (the default
    precision's row is the defaults run; fp32 only with ``full``, else its wall is extrapolated from the subset,
    ×len(budget)/len(subset) s values, and labelled so). Scores, on the same samples: every precision on every
    ``every``-th s value of the budget (7 of 49: a seventh of the forwards), then ``seeds`` more seeds of the last
    precision there for the seed-to-seed SD of the score at that budget, and each precision's effect (score − fp32
    score) in units of that SD. ``full=True`` runs all of it on the whole budget (≈ 8 minutes on an H200).
    Returns {"rows": [...], "sd": {eps: sd}, "effect_in_sd": {...}, "fp32_extrapolated_wall_s": float | None}."""
    import inspect
    import statistics

    from src.features import FeatureExtractor
    from src.features.precision import DEFAULT_PRECISION
    from src.synbench import SynBenchConfig, synbench

    bb = _backbone(backbone, device)
    shape = (3, size, size)
    rows: list[dict[str, Any]] = []
    subset = budget if full else _subset(budget, every)
    tag = "official" if full else "subset"  # subset: every ``every``-th s value

    def run(label: str, seed: int, extractor: dict[str, Any] | None, on: dict[str, Any], block: str) -> dict[str, Any]:
        cfg = SynBenchConfig(seed=seed, **on)
        _sync(device)
        t0 = time.perf_counter()
        res = synbench(bb.embed, input_shape=shape, config=cfg, device=device, extractor=extractor)
        _sync(device)
        wall = time.perf_counter() - t0
        row = {
            "setting": label,
            "budget": block,
            "seed": seed,
            "images": len(cfg.s_values) * (cfg.n_train + cfg.n_test),
            "wall_s": round(wall, 2),
            "forward_s": round(float(res.timings.get("forward_s", float("nan"))), 2),
            "scores": {e: round(float(res.score(e, A_T)), 4) for e in EPS},
        }
        print(f"  synbench {label:>9s} {block:>12s} seed {seed}: {row['wall_s']:7.1f} s wall, "
              f"{row['forward_s']:7.1f} s forwards, {row['images']} images, "
              f"scores {' / '.join(f'{v:.3f}' for v in row['scores'].values())}", flush=True)  # fmt: skip
        rows.append(row)
        return row

    warm = {**budget, "s_values": (1.0,), "n_train": 64, "n_test": 32}  # kernels, allocator, compiled draws
    synbench(bb.embed, input_shape=shape, config=SynBenchConfig(**warm), device=device)
    default = inspect.signature(FeatureExtractor).parameters["precision"].default
    default = DEFAULT_PRECISION if default is None else default  # precision=None means the policy's default
    print(f"  (the default precision is {default!r})", flush=True)
    official = {default: run("defaults", 0, None, budget, "official")}
    for p in precisions:  # timing rows on the official budget
        if p != default and (p != "fp32" or full):
            official[p] = run(p, 0, {"precision": p}, budget, "official")
    # the scores block, same samples: with ``full`` the official rows themselves, else every precision on the subset
    by_precision = {p: official[p] if full else run(p, 0, {"precision": p}, subset, tag) for p in precisions}
    last = precisions[-1]
    spread = [by_precision[last]["scores"]] + [
        run(last, s, {"precision": last}, subset, tag)["scores"] for s in range(1, seeds + 1)
    ]
    sd = {e: statistics.stdev(r[e] for r in spread) if len(spread) > 1 else float("nan") for e in EPS}
    ref = by_precision.get("fp32")
    effect = {
        p: {e: (r["scores"][e] - ref["scores"][e]) / sd[e] if ref and sd[e] > 0 else float("nan") for e in EPS}
        for p, r in by_precision.items()
    }
    extrapolated = None
    if not full and ref is not None:
        factor = len(SynBenchConfig(**budget).s_values) / len(SynBenchConfig(**subset).s_values)
        extrapolated = round(ref["wall_s"] * factor, 1)
        print(f"  synbench      fp32     official: ≈ {extrapolated:.1f} s wall (extrapolated ×{factor:g} from "
              f"{ref['wall_s']:.1f} s on every {every}th s value)", flush=True)  # fmt: skip
    print(f"  seed-to-seed SD of the score ({last}, {len(spread)} seeds, {tag}): "
          + " / ".join(f"{sd[e]:.4f}" for e in EPS), flush=True)  # fmt: skip
    for p in (p for p in by_precision if p != "fp32"):
        print(f"  effect of {p} vs fp32 (same samples, {tag}), in SDs: "
              + " / ".join(f"{effect[p][e]:+.2f}" for e in EPS), flush=True)  # fmt: skip
    overlap = overlap_rows(bb, device, {**subset, "image_size": size})
    return {
        "rows": rows,
        "sd": sd,
        "effect_in_sd": effect,
        "fp32_extrapolated_wall_s": extrapolated,
        "overlap": overlap,
    }


def overlap_rows(bb: Any, device: torch.device, budget: dict[str, Any]) -> list[dict[str, Any]]:
    """Does the GPU wait for the samples? ``synbench()`` with the defaults on ``budget``, drawing the next batch on
    a side stream during the forwards (on) and right before each forward (off): wall − forward seconds of each
    (:func:`benchmarks.sampling.synbench_timing`)."""
    from benchmarks.sampling import synbench_timing

    out = []
    for on in (False, True, False, True):  # interleaved: the second pair is the one to read
        r = synbench_timing(bb, device, budget=dict(budget), overlap=on)
        print(f"  synbench overlap {'on ' if on else 'off'}: {r['wall_s']:6.1f} s wall, {r['forward_s']:6.1f} s "
              f"forwards, {r['other_s']:5.1f} s else", flush=True)  # fmt: skip
        out.append(r)
    return out


def consistency_row(device: torch.device, backbone: str = "embedded:efficientnet_lite0") -> dict[str, Any]:
    """SynBench scores of a small pretrained backbone at 64 px on a reduced budget (3 s values × (1024 + 1024)),
    fp32, printed to 6 digits: run on the GPU and on a CPU, the two differ only by float arithmetic (the samples are
    the same Philox streams on both), so they must agree far inside the Monte Carlo noise."""
    from src.backbones import create_backbone
    from src.synbench import SynBenchConfig, synbench

    bb = create_backbone(backbone).to(device).eval()
    cfg = SynBenchConfig(s_values=(0.5, 2.0, 5.0), n_train=1024, n_test=1024)
    res = synbench(bb.embed, input_shape=(3, 64, 64), config=cfg, device=device, extractor={"precision": "fp32"})
    acc = res.accuracy.double().reshape(len(cfg.s_values), -1)[:, 0]  # clean probe accuracy per s (ε = 0)
    row = {
        "backbone": backbone,
        "accuracy_eps0": [round(float(a), 6) for a in acc],
        "scores_a_T_0.6": {e: round(float(res.score(e, 0.6)), 6) for e in EPS},
    }
    print(f"  consistency {backbone} 64 px on {device.type}: {row}", flush=True)
    return row


def perturbation_rows(device: torch.device, backbone: str, size: int, n: int, m: int) -> dict[str, float]:
    from benchmarks.perturbations import perturbation_throughput

    out = perturbation_throughput(device, size=size, n=n, m=m, backbone=backbone)
    for name, rate in out.items():
        print(f"  perturbations {name:>16s}: {rate:12.1f}{'' if name.endswith('seconds') else ' images/s'}", flush=True)
    return out


def task_prior_rows(device: torch.device, sizes: tuple[int, ...], dim: int) -> list[dict[str, Any]]:
    from benchmarks.task_prior import moments_timing

    rows = []
    for n in sizes:
        r = moments_timing(n, dim, str(device))
        print(f"  task_prior n={n:>9,d} D={dim}: {r}", flush=True)
        rows.append({"n": n, "D": dim, **r})
    return rows


def train_row(device: torch.device, overrides: list[str], timeout: int) -> dict[str, Any]:
    """The main job as a user runs it (a subprocess), on the GPU trainer when the device is CUDA."""
    cmd = [sys.executable, "-m", "src.train", *(["trainer=gpu"] if device.type == "cuda" else []), *overrides]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
    wall = time.perf_counter() - t0
    metrics: dict[str, float] = {}
    for line in proc.stdout.splitlines():
        cells = [c.strip() for c in line.strip("│┃|").split("│") if c.strip()]
        if len(cells) == 2 and cells[0].startswith("test/"):
            try:
                metrics[cells[0]] = float(cells[1])
            except ValueError:
                pass
    row = {"command": " ".join(cmd[1:]), "wall_s": round(wall, 1), "returncode": proc.returncode, "test": metrics}
    print(f"  train: {row}", flush=True)
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
    return row


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parts_all = ["synbench", "consistency", "perturbations", "task_prior", "train"]
    ap.add_argument("--part", choices=["all", *parts_all], default="all", nargs="?")
    ap.add_argument("--parts", nargs="+", choices=parts_all, default=None, help="several parts, in this order")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--seeds", type=int, default=2, help="extra SynBench seeds for the Monte Carlo SD")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes: a seconds-long check of the script itself")
    ap.add_argument(
        "--full", action="store_true", help="SynBench: fp32 and the score comparison on the whole official budget"
    )
    ap.add_argument("--out", type=Path, default=None, help="write every row as JSON here")
    args = ap.parse_args(argv)
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("benchmarks.gpu: no CUDA device here; run on a GPU, or --smoke --device cpu for a dry run")
    if args.smoke:
        backbone, size, budget = "timm:resnet10t", 32, {"s_values": (0.5, 2.0), "n_train": 64, "n_test": 32}
        tp_sizes, tp_dim, pert_n, train_over = (512,), 32, 8, ["debug=fast"]
    else:
        backbone, size, budget = "timm:vit_base_patch16_224", 224, {}
        tp_sizes, tp_dim, pert_n, train_over = (100_000, 1_000_000), 1280, 256, []
    if args.smoke:
        budget = {**budget, "batch_size": 32}
    print(f"RepBench GPU benchmark on {device_name(device)} (torch {torch.__version__}); backbone {backbone}",
          flush=True)  # fmt: skip
    results: dict[str, Any] = {"device": device_name(device), "torch": torch.__version__, "backbone": backbone}
    parts = args.parts or (parts_all if args.part == "all" else [args.part])
    for part in parts:
        t0 = time.perf_counter()
        if part == "synbench":
            every = 1 if args.smoke else 7
            seeds = 1 if args.smoke else args.seeds
            results[part] = synbench_rows(device, backbone, size, budget, seeds, every=every, full=args.full)
        elif part == "consistency":
            results[part] = consistency_row(device)
        elif part == "perturbations":
            results[part] = perturbation_rows(device, backbone, size, pert_n, 5)
        elif part == "task_prior":
            results[part] = task_prior_rows(device, tp_sizes, tp_dim)
        else:
            results[part] = train_row(device, train_over, timeout=300)
        print(f"== {part}: {time.perf_counter() - t0:.1f} s", flush=True)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(results, indent=2, default=str) + "\n")
    return results


if __name__ == "__main__":
    main()
