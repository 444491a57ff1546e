"""Benchmark the RobustLinearProbe training loop (ratios measured in one process; machines are noisy).

1. Feature cache: time of a later ε = 0 epoch with the cache vs without it (same model, same data).
2. PGD-k training step vs one clean forward+backward through the frozen backbone (the cost of robustness).
3. The PGD-k training step before/after channels_last: the attack's forwards and backwards through the backbone
   with NCHW inputs vs inputs converted to channels_last (interleaved repeats, median of paired ratios), with the
   process's allocator setting (``src.utils.allocator.keep_freed_memory``, opt out with REPBENCH_MALLOC=default).

    python -m benchmarks.probe [--image-size 64] [--epochs 3] [--pgd-steps 3 10] [--part all|cache|pgd|channels_last]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import lightning as L
import torch


class _EpochTimer(L.Callback):
    def __init__(self) -> None:
        self.times: list[float] = []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self._t = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        self.times.append(time.perf_counter() - self._t)


def _fit(backbone, dm, *, epochs: int, cache: bool) -> list[float]:
    from src.models import RobustLinearProbe

    model = RobustLinearProbe(backbone=backbone, num_classes=10, epsilon=0.0, feature_cache=cache, scheduler=None)
    timer = _EpochTimer()
    L.Trainer(
        max_epochs=epochs,
        accelerator="cpu",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        limit_val_batches=0,
        callbacks=[timer],
    ).fit(model, datamodule=dm)
    return timer.times


def _time(fn, repeats: int) -> float:
    fn()  # warm-up
    t = time.perf_counter()
    for _ in range(repeats):
        fn()
    return (time.perf_counter() - t) / repeats


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backbone", default="embedded:efficientnet_lite0")
    ap.add_argument("--image-size", type=int, default=64)
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--pgd-steps", type=int, nargs="+", default=[3, 10])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--part", choices=["all", "cache", "pgd", "channels_last"], default="all")
    args = ap.parse_args()
    from src.utils.allocator import keep_freed_memory

    alloc = keep_freed_memory()
    torch.set_num_threads(min(2, os.cpu_count() or 1))

    from src.backbones import create_backbone
    from src.data import DigitsDataModule

    bb = create_backbone(args.backbone).eval()
    dm = DigitsDataModule(image_size=args.image_size, batch_size=args.batch_size, seed=0)
    print(
        f"backbone {args.backbone}, digits at {args.image_size}px, batch {args.batch_size}, torch threads "
        f"{torch.get_num_threads()}, allocator: {alloc.reason}, load {_loadavg()}"
    )
    if args.part in ("all", "cache"):
        _cache_part(bb, dm, args)
    if args.part in ("all", "pgd", "channels_last"):
        _pgd_parts(bb, dm, args)
    print(f"load after {_loadavg()}")


def _loadavg() -> str:
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:  # pragma: no cover - not Linux
        return "n/a"


def _cache_part(bb, dm, args) -> None:
    no_cache = _fit(bb, dm, epochs=args.epochs, cache=False)
    cache = _fit(bb, dm, epochs=args.epochs, cache=True)
    later_nc, later_c = sum(no_cache[1:]) / len(no_cache[1:]), sum(cache[1:]) / len(cache[1:])
    print("\n1. feature cache (epsilon = 0), seconds per epoch")
    print(f"   without cache: {', '.join(f'{t:.2f}' for t in no_cache)}")
    print(f"   with cache:    {', '.join(f'{t:.2f}' for t in cache)}  (epoch 0 fills the cache)")
    print(f"   later-epoch speed-up: {later_nc / later_c:.1f}x")


def _pgd_parts(bb, dm, args) -> None:
    from src.attacks import pgd_attack
    from src.models import RobustLinearProbe

    model = RobustLinearProbe(backbone=bb, num_classes=10, epsilon=0.5, scheduler=None)
    dm.setup("fit")
    x, y, _ = next(iter(dm.train_dataloader()))
    opt = torch.optim.SGD(model.head.parameters(), lr=1e-3)

    def clean_step() -> None:
        loss = torch.nn.functional.cross_entropy(model.logits(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    def pgd_step(k: int, channels_last: bool = False) -> None:
        forward = model.logits
        if channels_last:  # the backbone's convolutions run NHWC; gradients flow back to the NCHW perturbation
            forward = lambda t: model.logits(t.contiguous(memory_format=torch.channels_last))  # noqa: E731
        x_adv = pgd_attack(forward, x, y, eps=0.5, norm="l2", steps=k, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            feats = model.backbone.embed(x_adv)
        loss = torch.nn.functional.cross_entropy(model.head(feats), y)
        opt.zero_grad()
        loss.backward()
        opt.step()

    if args.part in ("all", "pgd"):
        base = _time(clean_step, args.repeats)
        print(
            f"\n2. training step, batch {len(y)}: clean forward+backward through the backbone = {base * 1e3:.0f} ms "
            "(1.0x)"
        )
        for k in args.pgd_steps:
            t = _time(lambda k=k: pgd_step(k), args.repeats)
            print(f"   PGD-{k} step: {t * 1e3:.0f} ms = {t / base:.2f}x the clean step")
    if args.part in ("all", "channels_last"):
        k = args.pgd_steps[0]
        pgd_step(k)
        pgd_step(k, channels_last=True)  # warm-up both layouts
        before, after = [], []
        for _ in range(args.repeats):
            for flag, acc in ((False, before), (True, after)):
                t0 = time.perf_counter()
                pgd_step(k, channels_last=flag)
                acc.append(time.perf_counter() - t0)
        ratio = statistics.median(b / a for b, a in zip(before, after))
        print(
            f"\n3. PGD-{k} training step, batch {len(y)}: NCHW {min(before) * 1e3:.0f} ms, channels_last "
            f"{min(after) * 1e3:.0f} ms: speed-up {ratio:.2f}x (median of {args.repeats} paired ratios)"
        )


if __name__ == "__main__":
    main()
