"""Throughput of the batched torch perturbations against imagecorruptions (ImageNet-C, per image) at equal parameters.

    python -m benchmarks.perturbations [--size 224] [--n 32] [--repeats 3] [--threads 1 2]
    python -m benchmarks.perturbations --part engines [--size 224] [--n 32]   # CPU: before/after the device draws
    python -c "from benchmarks.perturbations import perturbation_throughput as f; print(f('cuda'))"   # on a GPU

For each perturbation, the reference is ``imagecorruptions.corrupt`` on uint8 HxWx3 images, one at a time, at the
in-domain severity whose parameters equal ours (see PERTURBATIONS[name].severities); JPEG (all severities lie below
the domain) is compared with imagecorruptions' own code path, a PIL save/open round trip, at quality 50. Ours is
``perturb`` on one (N, 3, H, W) float32 batch. Timings are interleaved (reference, ours, reference, ...) in one process
and the ratio reported is median(reference time) / median(our time): throughput speed-up, > 1 = faster than the
reference. Input conversions are excluded on both sides. Like every RepBench CLI, the benchmark first keeps freed
memory in the process (``src.utils.allocator.keep_freed_memory``; both sides profit: numpy's per-image float64 arrays
are mmap-sized too); ``--malloc default`` measures with glibc's defaults instead.
"""

from __future__ import annotations

import argparse
import time
from io import BytesIO

import numpy as np
import torch

from src.perturbations import PERTURBATIONS, perturb
from src.perturbations._random import rand_bits, set_engine
from src.perturbations.blur import glass_blur_with
from src.utils.allocator import keep_freed_memory


def _images(n: int, size: int) -> np.ndarray:
    from skimage import data

    photos = [data.astronaut(), data.coffee(), data.chelsea(), data.rocket()]
    out = []
    for i in range(n):
        p = photos[i % len(photos)]
        h, w = p.shape[:2]
        top, left = (i * 37) % (h - size), (i * 53) % (w - size)
        out.append(p[top : top + size, left : left + size])
    return np.stack(out)


def _reference(name: str):
    import imagecorruptions
    from PIL import Image

    if name == "jpeg_compression":

        def ref(img: np.ndarray) -> np.ndarray:
            buf = BytesIO()
            Image.fromarray(img).save(buf, "JPEG", quality=50)
            return np.asarray(Image.open(buf))

        return ref, 50.0
    severity, k = next(iter(PERTURBATIONS[name].severities.items()))
    return (lambda img: imagecorruptions.corrupt(img, severity=severity, corruption_name=name)), k


def _time(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _glass_before(x: torch.Tensor, k: float, g: torch.Generator) -> torch.Tensor:
    """glass_blur as it was before the device draws: offsets drawn iteration-major (2, N, 2, H, W), contiguous."""
    n, _, h, w = x.shape
    offsets = rand_bits((2, n, 2, h, w), g, x).to(torch.int8).neg_()
    return glass_blur_with(x, torch.full((n,), k, dtype=x.dtype), offsets)


def engines(size: int, n: int, repeats: int) -> None:
    """CPU images/s of every random perturbation: the path before this change (baseline: chunked Mersenne Twister
    draws, glass offsets iteration-major) against today's default CPU path and the Philox engine, interleaved."""
    x = torch.from_numpy(_images(n, size)).permute(0, 3, 1, 2).float().div(255).contiguous()
    print(f"{n} images of {size}x{size}, {torch.get_num_threads()} threads; median of {repeats} interleaved repeats")
    print(f"{'perturbation':<18} {'before':>9} {'now (mt)':>9} {'philox':>9} {'now/before':>11} {'philox/before':>14}")
    for name, spec in PERTURBATIONS.items():
        if spec.deterministic:
            continue
        k = float(sum(spec.domain) / 2)
        g = torch.Generator().manual_seed(0)

        def run(engine: str, name=name, k=k, g=g) -> None:
            set_engine(engine)
            perturb(x, name, k, generator=g)

        def before(name=name, k=k, g=g) -> None:
            set_engine("mt")
            _glass_before(x, k, g) if name == "glass_blur" else perturb(x, name, k, generator=g)

        variants = {"before": before, "now": lambda: run("auto"), "philox": lambda: run("philox")}
        for fn in variants.values():
            fn()  # warm-up (Philox compiles its rounds once per process)
        times: dict[str, list[float]] = {v: [] for v in variants}
        for _ in range(repeats):
            for v, fn in variants.items():
                times[v].append(_time(fn))
        set_engine("auto")
        rate = {v: n / float(np.median(t)) for v, t in times.items()}
        print(
            f"{name:<18} {rate['before']:>9.1f} {rate['now']:>9.1f} {rate['philox']:>9.1f} "
            f"{rate['now'] / rate['before']:>10.2f}x {rate['philox'] / rate['before']:>13.2f}x",
            flush=True,
        )
    print("load average:", open("/proc/loadavg").read().split()[:3])


def perturbation_throughput(
    device: str | torch.device,
    size: int = 224,
    n: int = 256,
    m: int = 5,
    backbone: str | None = "timm:vit_base_patch16_224",
    repeats: int = 3,
) -> dict[str, float]:
    """Images/s on ``device`` of every perturbation (``perturb`` on one batch of n images at the domain's middle,
    median of ``repeats`` after a warm-up, synchronised), and, with ``backbone`` (random weights), of a full
    DivergenceRadius sweep of those n images (nine perturbations × m parameters + the clean images, the backbone's
    forwards included): key ``"sweep"`` counts every forwarded image, ``"sweep_seconds"`` the wall time."""
    dev = torch.device(device)
    x = torch.from_numpy(_images(n, size)).permute(0, 3, 1, 2).float().div(255).contiguous().to(dev)
    out: dict[str, float] = {}
    for name, spec in PERTURBATIONS.items():
        k = float(sum(spec.domain) / 2)
        g = torch.Generator().manual_seed(0)
        perturb(x, name, k, generator=g)
        times = []
        for _ in range(repeats):
            _sync(dev)
            t = time.perf_counter()
            perturb(x, name, k, generator=g)
            _sync(dev)
            times.append(time.perf_counter() - t)
        out[name] = n / float(np.median(times))
    if backbone is not None:
        from src.backbones import create_backbone
        from src.divergence_radius.protocol import robustness_sweep

        bb = create_backbone(backbone, pretrained=False).to(dev).eval()
        robustness_sweep(x[:8], bb.embed, m=m, device=dev)  # warm-up: kernels, allocator
        _sync(dev)
        t = time.perf_counter()
        robustness_sweep(x, bb.embed, m=m, chunk_size=n, device=dev)
        _sync(dev)
        out["sweep_seconds"] = time.perf_counter() - t
        out["sweep"] = n * (1 + len(PERTURBATIONS) * m) / out["sweep_seconds"]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--n", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--names", nargs="+", default=list(PERTURBATIONS), choices=list(PERTURBATIONS), metavar="NAME")
    ap.add_argument("--malloc", choices=["keep", "default"], default="keep")
    ap.add_argument("--part", choices=["reference", "engines"], default="reference")
    args = ap.parse_args()
    if args.malloc == "keep":
        keep_freed_memory()
    if args.part == "engines":
        for threads in args.threads:
            torch.set_num_threads(threads)
            engines(args.size, args.n, args.repeats)
        return
    import cv2

    u8 = _images(args.n, args.size)
    x = torch.from_numpy(u8).permute(0, 3, 1, 2).float().div(255).contiguous()
    print(f"{args.n} images of {args.size}x{args.size}; median of {args.repeats} interleaved repeats")
    print(f"{'perturbation':<18} {'threads':>7} {'reference img/s':>16} {'torch img/s':>12} {'speed-up':>9}")
    for threads in args.threads:
        torch.set_num_threads(threads)
        cv2.setNumThreads(threads)
        total_ref = total_ours = 0.0
        for name in args.names:
            ref, k = _reference(name)
            g = torch.Generator().manual_seed(0)
            ref(u8[0]), perturb(x[:2], name, k, generator=g)  # warm-up (numba compilation, caches)
            t_ref, t_ours = [], []
            for _ in range(args.repeats):
                t_ref.append(_time(lambda ref=ref: [ref(img) for img in u8]))
                t_ours.append(_time(lambda name=name, k=k, g=g: perturb(x, name, k, generator=g)))
            r, o = float(np.median(t_ref)), float(np.median(t_ours))
            print(f"{name:<18} {threads:>7} {args.n / r:>16.1f} {args.n / o:>12.1f} {r / o:>8.1f}x", flush=True)
            total_ref, total_ours = total_ref + r, total_ours + o
        # all perturbations once per image (what a DivergenceRadius sweep does): harmonic throughput of the set
        n = args.n * len(args.names)
        t_r, t_o = total_ref, total_ours
        print(
            f"{'all (sum of times)':<18} {threads:>7} {n / t_r:>16.1f} {n / t_o:>12.1f} {t_r / t_o:>8.1f}x", flush=True
        )


if __name__ == "__main__":
    main()
