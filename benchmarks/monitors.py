"""What the per-epoch monitors cost on a TRAINING backbone: one computation of each against the bare forwards of the
same images (every figure a ratio against a baseline measured in the same process; machines are noisy).

    python -m benchmarks.monitors [--repeats 3] [--parts synbench divergence_radius task_prior spectrum cosine epoch]
                                  [--via core|callbacks] [--keep]

Backbone: timm ``resnet10t`` with random weights (pretrained=False) and a linear head, trained with AdamW; an
optimizer step on a 32 px batch of 64 comes before every timed call, so the weights differ at every call and no
monitor can skip its work (or reuse features). Per monitor and repeat, in alternating order: one call of the
monitor's computation, and the bare forwards of the same number of images of the same size, at the same batch size
(256), in eval and inference mode, through the feature engine (``FeatureExtractor(bb.embed)``; random images). The
ratio is monitor / forwards per repeat (median over repeats; the goal is <= 1.3 on the CPU).

The computations (``--via core``, the default, calls the library functions the callbacks call, with the callbacks'
defaults; ``--via callbacks`` calls each callback's ``compute(trainer, module)`` with a stand-in trainer instead):
  synbench          ``synbench_distributed`` with ``callback_budget()`` (6 s values x (2048 + 512) samples), 32 px
  divergence_radius ``robustness_metrics`` on 32 images of 64 px, 9 perturbations, m = 5 (1472 forwards): the first
                    call with ``cache_perturbations`` (perturbs once), later calls with ``perturbed=`` (forwards + MEB
                    only), and the uncached sweep for reference
  task_prior        512 images of 64 px embedded, ``TaskPriorMoments`` against fixed prior features (D = 1280)
  spectrum          360 images of 64 px (the digits validation split), RankMe and alpha-ReQ
  cosine            CollapseAlarm's probe cosine: 64 images of 32 px, ``mean_cross_cosine``
  epoch             the per-epoch overhead of the default monitor set (SynBench + DivergenceRadius) in seconds and
                    against one training epoch of ``experiment=monitor_pretraining`` (resnet10t, 1078 digits-sized
                    32 px training images in batches of 64, AdamW, plus the 360 validation forwards), for the
                    default callbacks' settings and for monitor_pretraining's own (its smaller SynBench budget, DR
                    at 32 px)
The process calls no allocator setting unless ``--keep`` (``keep_freed_memory()``, what the CLIs do): a user's
training script, where the library's entry points keep freed memory for their own duration
(``src.utils.allocator.freed_memory_kept``). /proc/loadavg is printed with every part.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `python benchmarks/monitors.py` from anywhere
    sys.path.insert(0, str(ROOT))

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from torch import nn  # noqa: E402

PARTS = ("synbench", "divergence_radius", "task_prior", "spectrum", "cosine", "epoch")
BATCH = 256  # the feature engine's default forward batch, every monitor's


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:  # pragma: no cover - not Linux
        return "n/a"


class Trainee(nn.Module):
    """The training backbone and its head, with one optimizer step on a random 32 px batch (``step``)."""

    def __init__(self, classes: int = 10, seed: int = 0) -> None:
        super().__init__()
        from src.backbones import create_backbone

        torch.manual_seed(seed)
        self.backbone = create_backbone("timm:resnet10t", pretrained=False)
        self.head = nn.Linear(self.backbone.embed_dim, classes)
        self.opt = torch.optim.AdamW(self.parameters(), lr=2e-3)
        self.gen = torch.Generator().manual_seed(seed)

    @property
    def device(self) -> torch.device:
        return next(self.parameters()).device

    def step(self, batch: int = 64, size: int = 32) -> None:
        self.train()
        x = torch.rand(batch, 3, size, size, generator=self.gen)
        y = torch.randint(0, self.head.out_features, (batch,), generator=self.gen)
        loss = nn.functional.cross_entropy(self.head(self.backbone.embed(x)), y)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        self.eval()


def _timed(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def bare_forwards(model: Trainee, n: int, size: int) -> Callable[[], object]:
    """The yardstick: the engine's forwards of ``n`` random images of ``size`` px, batch 256, eval + inference."""
    from src.features import FeatureExtractor

    x = torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(1))
    ext = FeatureExtractor(model.backbone.embed, max_batch=BATCH)
    return lambda: ext(x)


def _stub_trainer() -> SimpleNamespace:
    return SimpleNamespace(global_rank=0, world_size=1, datamodule=None, current_epoch=0, callback_metrics={})


# ------------------------------------------------------------------------------------------------ the computations
def synbench_call(model: Trainee, via: str, config: dict | None = None, size: int = 32) -> Callable[[], object]:
    from src.callbacks.synbench_callback import callback_budget

    budget = {**callback_budget(), **(config or {})}
    if via == "callbacks":
        from src.callbacks import SynBenchCallback

        cb = SynBenchCallback(input_size=size, config=budget, progress=False)
        return lambda: cb.compute(_stub_trainer(), model)
    from src.metrics.synbench_score import synbench_distributed
    from src.synbench import SynBenchConfig

    cfg = SynBenchConfig(**budget)
    return lambda: synbench_distributed(model.backbone.embed, (3, size, size), cfg, device=model.device)


def synbench_count(config: dict | None = None) -> int:
    from src.callbacks.synbench_callback import callback_budget

    b = {**callback_budget(), **(config or {})}
    return len(b["s_values"]) * (b["n_train"] + b["n_test"])


def dr_images(n: int = 32, size: int = 64) -> torch.Tensor:
    return torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(2))


def dr_calls(model: Trainee, via: str, images: torch.Tensor) -> dict[str, Callable[[], object]]:
    """{"first": builds the cache and sweeps, "cached": sweeps with it, "uncached": perturbs and sweeps}."""
    if via == "callbacks":
        from src.callbacks import DivergenceRadiusCallback

        cb = DivergenceRadiusCallback(images=images, progress=False, log_figure=False)
        call = lambda: cb.compute(_stub_trainer(), model)  # noqa: E731
        return {"first": call, "cached": call, "uncached": call}
    from src.divergence_radius.protocol import cache_perturbations
    from src.metrics.divergence_radius import robustness_metrics

    fn = model.backbone.embed
    held: dict[str, object] = {}

    def first():
        held["cache"] = cache_perturbations(images)
        return robustness_metrics(images, fn, perturbed=held["cache"])

    def cached():
        if "cache" not in held:
            held["cache"] = cache_perturbations(images)
        return robustness_metrics(images, fn, perturbed=held["cache"])

    return {"first": first, "cached": cached, "uncached": lambda: robustness_metrics(images, fn)}


def task_prior_call(model: Trainee, via: str, n: int = 512, size: int = 64) -> Callable[[], object]:
    images = torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(3))
    prior = torch.randn(n, 1280, generator=torch.Generator().manual_seed(4), dtype=torch.float64)
    if via == "callbacks":
        from src.callbacks import TaskPriorCallback

        cb = TaskPriorCallback(images=images, prior_features=prior, progress=False)
        return lambda: cb.compute(_stub_trainer(), model)
    from src.features import FeatureExtractor
    from src.metrics.task_prior import TaskPriorMoments

    def call():
        z = FeatureExtractor(model.backbone.embed, max_batch=BATCH)(images).to(torch.float64)
        metric = TaskPriorMoments(n, z.shape[1], prior.shape[1])
        metric.update(z, prior, torch.arange(n))
        return metric.compute()

    return call


def spectrum_call(model: Trainee, via: str, n: int = 360, size: int = 64) -> Callable[[], object]:
    images = torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(5))
    if via == "callbacks":
        from src.callbacks import RepresentationSpectrumCallback

        cb = RepresentationSpectrumCallback(images=images, num_images=n, progress=False)
        return lambda: cb.compute(_stub_trainer(), model)
    from src.baselines.spectral import DEFAULT_FIT_RANGE
    from src.features import FeatureExtractor
    from src.metrics.baselines import AlphaReQ, RankMe

    def call():
        z = FeatureExtractor(model.backbone.embed, max_batch=BATCH)(images).to(torch.float64)
        rankme, alpha = RankMe(z.shape[1]), AlphaReQ(z.shape[1], DEFAULT_FIT_RANGE)
        rankme.update(z)
        alpha.update(z)
        return float(rankme.compute()), float(alpha.compute())

    return call


def cosine_call(model: Trainee, via: str, n: int = 64, size: int = 32) -> Callable[[], object]:
    images = torch.rand(n, 3, size, size, generator=torch.Generator().manual_seed(6))
    if via == "callbacks":
        from src.callbacks import CollapseAlarm

        cb = CollapseAlarm(images=images)
        return lambda: cb.cross_cosine(_stub_trainer(), model)
    from src.callbacks.collapse_alarm import mean_cross_cosine
    from src.features import FeatureExtractor

    return lambda: mean_cross_cosine(FeatureExtractor(model.backbone.embed)(images))


# ------------------------------------------------------------------------------------------------ measuring
def paired(model: Trainee, monitor: Callable[[], object], forwards: Callable[[], object], repeats: int):
    """(monitor times, forward times, per-repeat ratios); an optimizer step before every timed call, the order of
    the two alternating from repeat to repeat."""
    mon, fw = [], []
    for r in range(repeats):
        for which in ("m", "f") if r % 2 == 0 else ("f", "m"):
            model.step()
            (mon if which == "m" else fw).append(_timed(monitor if which == "m" else forwards))
    return mon, fw, [a / b for a, b in zip(mon, fw)]


def _row(name: str, images: str, mon: list[float], fw: list[float], ratios: list[float]) -> None:
    print(
        f"| {name} | {images} | {min(mon):.2f} / {statistics.median(mon):.2f} | {min(fw):.2f} / "
        f"{statistics.median(fw):.2f} | **{statistics.median(ratios):.2f}x** ({min(ratios):.2f}-{max(ratios):.2f}) |"
    )


def part_monitors(model: Trainee, args) -> dict[str, float]:
    """The monitor rows; returns median seconds per monitor (for the epoch part)."""
    medians: dict[str, float] = {}
    print(f"\nmonitors (via {args.via}), resnet10t random weights, load before {loadavg()}")
    print("| monitor | forwards (images x px) | monitor s min / median | bare forwards s min / median | ratio |")
    print("| --- | --- | --- | --- | --- |")
    if "synbench" in args.parts:
        n = synbench_count()
        mon, fw, ratios = paired(model, synbench_call(model, args.via), bare_forwards(model, n, 32), args.repeats)
        _row("SynBench (callback budget)", f"{n} x 32", mon, fw, ratios)
        medians["synbench"] = statistics.median(mon)
    if "divergence_radius" in args.parts:
        images = dr_images()
        calls = dr_calls(model, args.via, images)
        fwd = bare_forwards(model, 32 * 46, 64)
        model.step()
        first, f0 = _timed(calls["first"]), _timed(fwd)
        _row("DivergenceRadius, first call (perturbs, caches)", "1472 x 64", [first], [f0], [first / f0])
        mon, fw, ratios = paired(model, calls["cached"], fwd, args.repeats)
        _row("DivergenceRadius, later calls (cache)", "1472 x 64", mon, fw, ratios)
        medians["divergence_radius"] = statistics.median(mon)
        if args.via == "core":
            mon, fw, ratios = paired(model, calls["uncached"], fwd, max(1, args.repeats - 1))
            _row("DivergenceRadius, no cache (reference)", "1472 x 64", mon, fw, ratios)
    if "task_prior" in args.parts:
        mon, fw, ratios = paired(model, task_prior_call(model, args.via), bare_forwards(model, 512, 64), args.repeats)
        _row("Task Prior (E, Var; prior D = 1280)", "512 x 64", mon, fw, ratios)
    if "spectrum" in args.parts:
        mon, fw, ratios = paired(model, spectrum_call(model, args.via), bare_forwards(model, 360, 64), args.repeats)
        _row("spectrum (RankMe, alpha-ReQ)", "360 x 64", mon, fw, ratios)
    if "cosine" in args.parts:
        mon, fw, ratios = paired(model, cosine_call(model, args.via), bare_forwards(model, 64, 32), args.repeats)
        _row("collapse alarm cosine", "64 x 32", mon, fw, ratios)
    print(f"load after {loadavg()}")
    return medians


def training_epoch(model: Trainee, n_train: int = 1078, n_val: int = 360, batch: int = 64) -> Callable[[], object]:
    """One epoch of monitor_pretraining's loop: the training steps over ``n_train`` 32 px images in batches of
    ``batch`` (forward, backward, AdamW) and the validation forwards of ``n_val`` images."""
    val = torch.rand(n_val, 3, 32, 32, generator=torch.Generator().manual_seed(7))

    def epoch():
        for _ in range(-(-n_train // batch)):
            model.step(batch, 32)
        with torch.inference_mode():
            for chunk in val.split(batch):
                model.head(model.backbone.embed(chunk))

    return epoch


def part_epoch(model: Trainee, args) -> None:
    """Per-epoch overhead of SynBench + DivergenceRadius (later calls: cached) against a training epoch."""
    epoch = training_epoch(model)
    pretraining_sb = {"s_values": [1.0, 2.0, 3.0, 4.0], "n_train": 512, "n_test": 256, "eps": [0.0], "a_T": [0.6]}
    sets = {
        "default callbacks (SynBench callback budget, DR 32 x 64 px)": (None, dr_images(32, 64)),
        "monitor_pretraining's settings (SynBench 4 x (512 + 256), DR 32 x 32 px)": (pretraining_sb, dr_images(32, 32)),
    }
    print(f"\nepoch: default monitor set against one monitor_pretraining training epoch, load before {loadavg()}")
    print(
        "| monitor set | SynBench s | DivergenceRadius s (cached) | overhead s | training epoch s | overhead / epoch |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    for name, (sb_cfg, images) in sets.items():
        sb = synbench_call(model, args.via, sb_cfg)
        dr = dr_calls(model, args.via, images)["cached"]
        dr()  # the first call builds the cache: an epoch's cost is the later calls'
        rows = []
        for _ in range(args.repeats):
            model.step()
            t_ep = _timed(epoch)
            t_sb = _timed(sb)
            model.step()
            t_dr = _timed(dr)
            rows.append((t_sb, t_dr, t_ep))
        t_sb, t_dr, t_ep = (statistics.median(v) for v in zip(*rows))
        ratio = statistics.median((a + b) / c for a, b, c in rows)
        print(f"| {name} | {t_sb:.2f} | {t_dr:.2f} | {t_sb + t_dr:.2f} | {t_ep:.2f} | **{ratio:.2f}x** |")
    print(f"load after {loadavg()}")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    ap.add_argument("--via", choices=("core", "callbacks"), default="core")
    ap.add_argument("--keep", action="store_true", help="call keep_freed_memory() first, as the CLIs do")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    args = ap.parse_args(argv)
    if args.keep:
        from src.utils.allocator import keep_freed_memory

        keep_freed_memory()
    if args.threads:
        torch.set_num_threads(args.threads)
    from src.rng.philox import sampler_ready, warm_up_sampler

    model = Trainee()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, allocator "
          f"{'keep_freed_memory()' if args.keep else 'untouched (library scopes only)'}; load {loadavg()}")  # fmt: skip
    if "synbench" in args.parts or "epoch" in args.parts:
        ready = sampler_ready("cpu")
        seconds = warm_up_sampler("cpu")
        print(f"SynBench sampler: {'built already' if ready else f'compiled in {seconds:.1f} s (once per process)'}")
    # warm-up: oneDNN primitives, the engine, one small sweep
    bare_forwards(model, 256, 32)()
    bare_forwards(model, 256, 64)()
    part_monitors(model, args)
    if "epoch" in args.parts:
        part_epoch(model, args)


if __name__ == "__main__":
    main()
