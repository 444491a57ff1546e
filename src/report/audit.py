"""The backbone audit: every task-agnostic score of RepBench and the baselines, next to downstream probe accuracies,
for several backbones — one loop over backbones × parts, each part cached on disk by (weights, settings).

Parts (:data:`PARTS`), each a small function of one built backbone returning JSON-able values:

* ``synbench`` — SynBench (Ko et al., ICML 2024, arXiv:2210.02989, Algorithm 1) under ``config.synbench``;
* ``baselines`` — Val loss, MDL, SDL, ε-SC, LogME, SFDA, RankMe, α-ReQ on SynBench's synthetic proxy task (the same
  samples: :func:`src.baselines.synthetic_task`) at separation ``config.baseline_s`` (the paper does not say which s
  its Table 7 uses; the report states the one it uses);
* ``divergence_radius`` — mean R_dr and R_cs per perturbation (Liu et al., arXiv:2604.14973) on the bundled photos;
* ``task_prior`` — E, Var and z = E/√Var of the Task Prior (Patel & Balestriero, arXiv:2507.09871, Thm 2.3) on digits
  with the prior backbone of ``config.task_prior``, and the mean probe accuracy over sampled tasks;
* ``downstream`` — clean and PGD-robust accuracy of a linear probe on each labelled downstream set
  (:mod:`src.report.downstream`): what every other column is judged against.

``budgets`` repeats ``synbench`` and ``baselines`` at several numbers of synthetic training samples (the paper's
Fig. 5 / Table 8 consistency check).
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ..backbones import Backbone
from ..backbones.spec import BackboneLike, backbone_labels, backbone_list, build_backbone, check_buildable
from ..backbones.weights import state_fingerprint
from ..divergence_radius.config import DivergenceRadiusConfig
from ..synbench.config import SynBenchConfig
from ..task_prior.config import TaskPriorConfig
from ..utils.probe_images import BUNDLED_DIGITS
from .cache import ResultCache

__all__ = [
    "AuditConfig",
    "PARTS",
    "DOWNSTREAM_DEFAULTS",
    "REDUCED_SYNBENCH",
    "run_audit",
    "AuditResults",
    "check_baseline_eps",
    "check_cached_entry",
]

log = logging.getLogger("repbench")

PARTS = ("synbench", "baselines", "divergence_radius", "task_prior", "downstream")
#: the report's reduced SynBench budget (a few seconds per backbone at 32 px on 2 CPU cores); full=true in the CLI
#: uses SynBenchConfig() (the official protocol) instead
REDUCED_SYNBENCH: dict[str, Any] = {
    "s_values": (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5),
    "n_train": 2048,
    "n_test": 1024,
    "eps": (0.0, 0.2, 0.4),
}
DOWNSTREAM_DEFAULTS: dict[str, Any] = {"epsilons": (0.05,), "steps": 5, "norm": "l2", "C": 1.0}


def check_baseline_eps(eps: Any) -> tuple[float, ...]:
    """``eps`` (ε of SDL and ε-SC) as a non-empty tuple of finite numbers > 0, else a ValueError naming the setting
    (``baseline_eps``; ``baselines.eps`` in ``python -m src.report``) and the fix. Checked before any work: a bad ε
    would otherwise fail inside every backbone's baselines part, after the features were computed."""
    values = tuple(eps) if isinstance(eps, (list, tuple)) else (eps,)
    good = bool(values) and all(
        isinstance(e, (int, float)) and not isinstance(e, bool) and math.isfinite(e) and e > 0 for e in values
    )
    if not good:
        raise ValueError(
            f"baseline_eps (python -m src.report: baselines.eps) must be a non-empty list of finite numbers > 0 (the "
            f"loss thresholds of SDL and eps-SC), got {list(values)}; e.g. baselines.eps=[1.0] (the paper's Table 7)"
        )
    return tuple(float(e) for e in values)


@dataclass(frozen=True)
class AuditConfig:
    """Every setting of the audit (defaults: the CPU budget of the default report).

    parts: which of :data:`PARTS` to run. input_size: side of SynBench's synthetic images (None = each backbone's
    native size). synbench: the SynBench protocol. baseline_s: the separation s of the baselines' proxy task;
    baselines: which baselines (:data:`src.baselines.ALL_BASELINES`); baseline_eps: ε of SDL / ε-SC (the paper: 1).
    divergence_radius: the sweep; dr_images / dr_image_size: bundled photos swept. task_prior: the probe study;
    tp_images / tp_image_size: the digits it runs on. downstream: probe options (epsilons, steps, norm, C).
    budgets: numbers of synthetic training samples for the consistency check (empty = none).
    seeds: extra seeds of the synthetic parts (SynBench and the baselines are Monte Carlo estimates): each repeats
    them with ``synbench.seed`` replaced; the table shows the mean over all seeds and the rank agreement resamples
    seeds within each backbone (empty = the one seed of ``synbench``).
    """

    parts: tuple[str, ...] = PARTS
    input_size: int | None = 32
    synbench: SynBenchConfig = field(default_factory=lambda: SynBenchConfig(**REDUCED_SYNBENCH))
    baseline_s: float = 1.0
    baselines: tuple[str, ...] | None = None
    baseline_eps: tuple[float, ...] = (1.0,)
    divergence_radius: DivergenceRadiusConfig = field(default_factory=DivergenceRadiusConfig)
    dr_images: int = 32
    dr_image_size: int = 64
    task_prior: TaskPriorConfig = field(default_factory=TaskPriorConfig)
    tp_images: int = 600
    tp_image_size: int = 32
    downstream: Mapping[str, Any] = field(default_factory=lambda: dict(DOWNSTREAM_DEFAULTS))
    budgets: tuple[int, ...] = ()
    seeds: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        parts = tuple(self.parts)
        unknown = sorted(set(parts) - set(PARTS))
        if unknown or not parts:
            raise ValueError(f"parts {unknown or parts} unknown; choose from {list(PARTS)}")
        object.__setattr__(self, "parts", parts)
        if not isinstance(self.synbench, SynBenchConfig):
            object.__setattr__(self, "synbench", SynBenchConfig(**dict(self.synbench)))
        if not isinstance(self.divergence_radius, DivergenceRadiusConfig):
            object.__setattr__(self, "divergence_radius", DivergenceRadiusConfig.coerce(self.divergence_radius))
        object.__setattr__(self, "task_prior", TaskPriorConfig.coerce(self.task_prior))
        from ..baselines import ALL_BASELINES

        which = ALL_BASELINES if self.baselines is None else tuple(self.baselines)
        bad = sorted(set(which) - set(ALL_BASELINES))
        if bad or not which:
            raise ValueError(f"baselines {bad or which} unknown; choose from {list(ALL_BASELINES)}")
        object.__setattr__(self, "baselines", which)
        if not (isinstance(self.baseline_s, (int, float)) and math.isfinite(self.baseline_s) and self.baseline_s >= 0):
            raise ValueError(f"baseline_s must be a finite number >= 0, got {self.baseline_s!r}")
        object.__setattr__(self, "baseline_eps", check_baseline_eps(self.baseline_eps))
        for key, value, low in (("dr_images", self.dr_images, 2), ("dr_image_size", self.dr_image_size, 16),
                                ("tp_images", self.tp_images, 2), ("tp_image_size", self.tp_image_size, 8)):  # fmt: skip
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{key} must be an integer >= {low}, got {value!r}")
        if self.tp_images > BUNDLED_DIGITS:
            raise ValueError(
                f"tp_images must be an integer in [2, {BUNDLED_DIGITS}] (the Task-Prior part runs on the first "
                f"tp_images of the {BUNDLED_DIGITS} bundled digits), got {self.tp_images}; set tp_images<={BUNDLED_DIGITS}"
            )
        if self.input_size is not None and (not isinstance(self.input_size, int) or self.input_size < 1):
            raise ValueError(f"input_size must be null (native size) or an integer >= 1, got {self.input_size!r}")
        extra = sorted(set(self.downstream) - set(DOWNSTREAM_DEFAULTS))
        if extra:
            raise ValueError(f"downstream options {extra} unknown; the options are {list(DOWNSTREAM_DEFAULTS)}")
        object.__setattr__(self, "downstream", {**DOWNSTREAM_DEFAULTS, **dict(self.downstream)})
        budgets = tuple(self.budgets or ())
        if any(isinstance(b, bool) or not isinstance(b, int) or b < 2 for b in budgets):
            raise ValueError(f"budgets must be integers >= 2 (synthetic training samples), got {list(budgets)}")
        object.__setattr__(self, "budgets", budgets)
        seeds = tuple(self.seeds or ())
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in seeds) or self.synbench.seed in seeds:
            raise ValueError(
                f"seeds must be distinct integers >= 0 other than synbench.seed ({self.synbench.seed}), got {list(seeds)}"
            )
        object.__setattr__(self, "seeds", seeds)


def tensor_fingerprint(*tensors: Tensor) -> str:
    """sha256 of tensors' dtypes, shapes and bytes (identifies a data set in the cache key)."""
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().cpu().contiguous()
        h.update(f"{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()


def backbone_fingerprint(backbone: Backbone) -> str:
    """The weights' fingerprint (parameters and buffers) plus the backbone's name and input convention."""
    state = {**dict(backbone.named_parameters()), **dict(backbone.named_buffers())}
    meta = f"{backbone.name}|{tuple(backbone.input_size)}|{tuple(backbone.mean)}|{tuple(backbone.std)}"
    return hashlib.sha256((state_fingerprint(state) + meta).encode()).hexdigest()


# ----------------------------------------------------------------------------------------------- the parts
def part_synbench(bb: Backbone, cfg: SynBenchConfig, input_size: int | None, device: Any) -> dict[str, Any]:
    """SynBench of one backbone: the re-loadable ``SynBenchResult.to_dict()``."""
    from ..synbench import synbench

    size = bb.input_size[-1] if input_size is None else input_size
    return synbench(bb.embed, input_shape=(3, size, size), config=cfg, device=device).to_dict()


def part_baselines(
    bb: Backbone, cfg: SynBenchConfig, s: float, which: Sequence[str], eps: Sequence[float], input_size: int | None,
    device: Any,
) -> dict[str, Any]:  # fmt: skip
    """Every baseline on SynBench's proxy task at separation ``s`` (same samples), with the time of each."""
    from ..baselines import baseline_scores, synthetic_task

    eps = check_baseline_eps(eps)  # a configuration error, not a score undefined on this backbone: never an "n/a"
    size = bb.input_size[-1] if input_size is None else input_size
    t0 = time.perf_counter()
    task = synthetic_task(bb.embed, (3, size, size), cfg, s, device)
    features_s = time.perf_counter() - t0
    curve = tuple(n for n in which if n in ("val_loss", "mdl", "sdl", "esc"))
    groups = [(n,) for n in which if n not in curve] + ([curve] if curve else [])
    values: dict[str, Any] = {}
    seconds: dict[str, float] = {"features": features_s}
    lower: list[str] = []
    errors: dict[str, str] = {}
    for group in groups:  # one score that is undefined here (e.g. too few dimensions) leaves the others standing
        try:
            scores = baseline_scores(*task, which=group, eps=tuple(eps), seed=cfg.seed)
        except ValueError as err:
            for name in group:
                errors[name] = str(err)
            continue
        values.update(scores)
        seconds.update(scores.seconds)
        lower += sorted(scores.lower_bounds)
    return {"values": values, "seconds": seconds, "lower_bounds": lower, "errors": errors}


def part_divergence_radius(bb: Backbone, cfg: DivergenceRadiusConfig, images: Tensor, device: Any) -> dict[str, Any]:
    """Mean R_dr and R_cs per perturbation over ``images`` (and their means over perturbations)."""
    from ..divergence_radius import robustness_sweep

    out = robustness_sweep(images, bb.embed, cfg, device=device)
    r_dr, r_cs = out.r_dr.mean(0), out.r_cs.mean(0)
    return {
        "r_dr": dict(zip(out.names, r_dr.tolist())),
        "r_cs": dict(zip(out.names, r_cs.tolist())),
        "r_dr_mean": float(r_dr.mean()),
        "r_cs_mean": float(r_cs.mean()),
    }


def part_task_prior(
    bb: Backbone, cfg: TaskPriorConfig, images: Tensor, prior_features: Tensor, label: str, device: Any
) -> dict[str, Any]:
    """The Task-Prior row of one backbone against the prior's features (same sampled tasks for every backbone)."""
    from ..features import FeatureExtractor
    from ..task_prior import compare_features

    z = FeatureExtractor(bb.embed, device=device)(images).float().cpu()
    (row,) = compare_features({label: z}, prior_features, cfg)
    return {k: v for k, v in row.items() if k != "backbone"}


def part_downstream(
    bb: Backbone, sets: Mapping[str, tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]], options: Mapping[str, Any],
    device: Any,
) -> dict[str, Any]:  # fmt: skip
    """{set name: probe accuracies} (:func:`src.report.downstream.probe_accuracies`)."""
    from .downstream import probe_accuracies

    return {name: probe_accuracies(bb, train, test, device=device, **options) for name, (train, test) in sets.items()}


# ----------------------------------------------------------------------------------------------- cached entries
def _is_number(value: Any) -> bool:
    """A JSON number, or null (a NaN is cached as null)."""
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def _need(ok: bool, what: str) -> None:
    if not ok:
        raise ValueError(f"malformed cached value: {what}")


def _check_part_value(part: str, value: Any) -> None:
    """The shape :func:`run_audit` and the renderer read of one part's value (ValueError/KeyError/TypeError if not)."""
    _need(isinstance(value, Mapping), f"the {part} value is {type(value).__name__}, not a mapping")
    if part == "synbench":
        from ..synbench import SynBenchResult

        SynBenchResult.from_dict(dict(value))  # the renderer's reader
    elif part == "baselines":
        _need(isinstance(value.get("values"), Mapping), "baselines without a 'values' mapping")
        _need(all(_is_number(v) for v in value["values"].values()), "a baseline score that is not a number")
        _need(isinstance(value.get("lower_bounds"), list), "baselines without a 'lower_bounds' list")
    elif part == "divergence_radius":
        _need(all(isinstance(value.get(k), Mapping) for k in ("r_dr", "r_cs")), "no 'r_dr' / 'r_cs' mapping")
        _need(all(_is_number(value.get(k, "")) for k in ("r_dr_mean", "r_cs_mean")), "no 'r_dr_mean' / 'r_cs_mean'")
    elif part == "task_prior":
        _need(
            all(_is_number(value.get(k, "")) for k in ("mean", "var", "z", "acc_mean")), "no mean / var / z / acc_mean"
        )
    elif part == "downstream":
        _need(all(isinstance(v, Mapping) and all(map(_is_number, v.values())) for v in value.values()),
              "a downstream set without a mapping of accuracies")  # fmt: skip


def check_cached_entry(part: str, entry: Any) -> None:
    """A cache entry of :func:`run_audit`: ``{"value": <the part's value>, "seconds": <finite number >= 0>}``; a
    ValueError/KeyError/TypeError saying what is wrong otherwise (:meth:`ResultCache.get` then warns, naming the
    file, and the part is recomputed) — an edited entry with a valid key must not crash the report or fill it."""
    _need(isinstance(entry, Mapping), f"the entry holds {type(entry).__name__}, not {{'value': ..., 'seconds': ...}}")
    _need("value" in entry and "seconds" in entry, f"the entry has the keys {sorted(entry)}, not value and seconds")
    seconds = entry["seconds"]
    _need(_is_number(seconds) and seconds is not None and math.isfinite(seconds) and seconds >= 0,
          f"seconds is {seconds!r}, not a finite number >= 0")  # fmt: skip
    _check_part_value(part, entry["value"])


# ----------------------------------------------------------------------------------------------- the loop
@dataclass
class AuditResults:
    """Per backbone label: {part: value} and {part: seconds}; the settings of the run; cache hits/misses."""

    config: AuditConfig
    labels: list[str]
    values: dict[str, dict[str, Any]]
    seconds: dict[str, dict[str, float]]
    cached: dict[str, dict[str, bool]]
    downstream_sets: list[str]
    cache_hits: int = 0
    cache_misses: int = 0


def _config_settings(cfg: Any) -> Any:
    if dataclasses.is_dataclass(cfg):
        return {f.name: _config_settings(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    if isinstance(cfg, Mapping):
        return {str(k): _config_settings(v) for k, v in cfg.items()}
    if isinstance(cfg, (list, tuple)):
        return [_config_settings(v) for v in cfg]
    return cfg


def run_audit(
    backbones: Sequence[BackboneLike],
    config: AuditConfig | None = None,
    *,
    downstream: Mapping[str, tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]] | None = None,
    dr_images: Tensor | None = None,
    tp_images: Tensor | None = None,
    cache_dir: str | None = None,
    device: Any = "cpu",
    progress: bool | Callable[[str], None] = False,
) -> AuditResults:
    """Run every part of ``config`` on every backbone (cached parts are read back).

    ``downstream``: {set name: ((train images, labels), (test images, labels))}, images (N, 3, H, W) in [0, 1];
    None = the bundled digits at 64 px (stratified split of the training CLI's digits module). ``dr_images``: the
    images DivergenceRadius sweeps (None = the bundled photos). ``tp_images``: the Task-Prior images (None = digits).
    """
    from ..utils.progress import progress_sink

    cfg = config or AuditConfig()
    specs = backbone_list(backbones)
    labels = backbone_labels(specs)
    say = progress_sink(progress)
    parts = cfg.parts
    cache = ResultCache(cache_dir)
    cache.check(parts)  # a cache_dir (or a part folder in it) that is a regular file: refused before any work
    if "downstream" in parts and downstream is None:
        downstream = {"digits": default_digits()}
    if "downstream" in parts and not downstream:
        raise ValueError("downstream needs at least one labelled set, e.g. {'digits': ((x, y), (x, y))}")
    if "divergence_radius" in parts and dr_images is None:
        from ..utils.photos import bundled_photos

        dr_images = bundled_photos(cfg.dr_images, cfg.dr_image_size, seed=cfg.divergence_radius.seed)
    if "task_prior" in parts and tp_images is None:
        from ..task_prior.report import digits_images

        tp_images = digits_images(cfg.tp_images, cfg.tp_image_size)
    check_buildable(specs)  # missing weights fail before any part runs

    prior_features: Tensor | None = None
    prior_fp = ""
    if "task_prior" in parts:
        from ..features import FeatureExtractor

        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.task_prior.seed)
            prior = build_backbone(cfg.task_prior.prior_backbone).eval().to(device)
        prior_fp = backbone_fingerprint(prior)
        prior_features = FeatureExtractor(prior.embed, device=device)(tp_images).float().cpu()
        del prior

    data_fp = {
        "downstream": {k: tensor_fingerprint(*tr, *te) for k, (tr, te) in (downstream or {}).items()},
        "dr_images": tensor_fingerprint(dr_images) if dr_images is not None else None,
        "tp_images": tensor_fingerprint(tp_images) if tp_images is not None else None,
    }
    jobs: list[tuple[str, Callable[[Backbone, str], dict[str, Any]], dict[str, Any]]] = []

    def synthetic_jobs(suffix: str, sb: SynBenchConfig) -> None:
        """The synbench and baselines parts at SynBench settings ``sb`` (main run, a seed or a budget)."""
        settings = {"synbench": _config_settings(sb), "input_size": cfg.input_size}
        if "synbench" in parts:
            jobs.append((f"synbench{suffix}", lambda bb, lab: part_synbench(bb, sb, cfg.input_size, device), settings))
        if "baselines" in parts:
            extra = {"s": cfg.baseline_s, "which": list(cfg.baselines), "eps": list(cfg.baseline_eps)}
            jobs.append((f"baselines{suffix}", lambda bb, lab: part_baselines(bb, sb, cfg.baseline_s, cfg.baselines,
                         cfg.baseline_eps, cfg.input_size, device), {**settings, **extra}))  # fmt: skip

    synthetic_jobs("", cfg.synbench)
    for k in cfg.seeds:
        synthetic_jobs(f"#{k}", dataclasses.replace(cfg.synbench, seed=k))
    for n in cfg.budgets:
        synthetic_jobs(f"@{n}", dataclasses.replace(cfg.synbench, n_train=n))
    if "divergence_radius" in parts:
        jobs.append(("divergence_radius", lambda bb, lab: part_divergence_radius(bb, cfg.divergence_radius,
                     dr_images, device), {"config": cfg.divergence_radius.to_dict(), "images": data_fp["dr_images"]}))  # fmt: skip
    if "task_prior" in parts:
        jobs.append(("task_prior", lambda bb, lab: part_task_prior(bb, cfg.task_prior, tp_images, prior_features, lab,
                     device), {"config": _config_settings(cfg.task_prior), "images": data_fp["tp_images"],
                     "prior": prior_fp}))  # fmt: skip
    if "downstream" in parts:
        jobs.append(("downstream", lambda bb, lab: part_downstream(bb, downstream, cfg.downstream, device),
                     {"options": _config_settings(cfg.downstream), "sets": data_fp["downstream"]}))  # fmt: skip

    values: dict[str, dict[str, Any]] = {}
    seconds: dict[str, dict[str, float]] = {}
    cached: dict[str, dict[str, bool]] = {}
    total, done = len(labels) * len(jobs), 0
    t_all = time.perf_counter()
    for label, spec in zip(labels, specs):
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.task_prior.seed)  # random-weight backbones: the same weights in every report
            bb = build_backbone(spec).eval().to(device)
        fp = backbone_fingerprint(bb)
        values[label], seconds[label], cached[label] = {}, {}, {}
        for part, fn, settings in jobs:
            t0 = time.perf_counter()
            # "synbench@2048" / "baselines#1" are the synbench / baselines parts at other settings (n_train, seed):
            # one cache entry per (weights, part, settings), so a budget equal to the main n_train reuses the main run
            store = part.split("@")[0].split("#")[0]
            hit = cache.get(store, fp, settings, check=lambda entry, store=store: check_cached_entry(store, entry))
            if hit is None:
                hit = {"value": fn(bb, label), "seconds": time.perf_counter() - t0}
                cache.put(store, fp, settings, hit)
                cached[label][part] = False
            else:
                cached[label][part] = True
            values[label][part] = hit["value"]
            seconds[label][part] = float(hit["seconds"])
            done += 1
            if say:
                state = "cached" if cached[label][part] else f"{seconds[label][part]:.1f} s"
                say(f"[{done}/{total}] {label}: {part} ({state}; {time.perf_counter() - t_all:.0f} s so far)")
        del bb
    return AuditResults(cfg, labels, values, seconds, cached, list(downstream or {}), cache.hits, cache.misses)


def default_digits(image_size: int = 64, seed: int = 0) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """The training CLI's digits: ((train x, y), (test x, y)) of the stratified 60/20/20 split at ``image_size``."""
    from ..data.digits import DigitsDataModule
    from ..utils.data_tensors import split_tensors

    sets = split_tensors(DigitsDataModule(image_size=image_size, seed=seed), ("train", "test"), key="digits")
    return sets["train"], sets["test"]
