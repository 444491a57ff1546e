"""The backbone audit: every task-agnostic score of RepBench and the baselines, next to downstream probe accuracies,
for several backbones — one loop over backbones × parts, each part cached on disk by (weights, settings).

The parts are the audit parts of the methods of :data:`src.methods.METHODS` (each :class:`~src.methods.AuditPart`
says how to run, cache, tabulate, check and draw itself: ``synbench``, ``baselines``, ``divergence_radius``,
``task_prior``, and the opt-in ``depth`` — :mod:`src.methods.audit_parts`), and ``downstream``, the report's own:
clean and PGD-robust accuracy of a linear probe on each labelled downstream set (:mod:`src.report.downstream`), what
every other column is judged against. A method registered in METHODS is a part here without any change to this file.

``budgets`` and ``seeds`` repeat the synthetic parts (``synbench`` and ``baselines``) at other numbers of synthetic
training samples (the paper's Fig. 5 / Table 8 consistency check) and sampling seeds.
"""

from __future__ import annotations

import dataclasses
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
from ..divergence_radius.config import DivergenceRadiusConfig
from ..divergence_radius.depth import DepthHeadConfig
from ..images.probe_images import BUNDLED_DIGITS
from ..methods import METHODS, AuditPart, MethodSpec, PartContext, resolve
from ..methods.audit_parts import (
    backbone_fingerprint,
    check_baseline_eps,
    check_baseline_probe,
    config_settings,
    is_number,
    need,
    tensor_fingerprint,
)
from ..synbench.config import SynBenchConfig, synbench_budget
from ..task_prior.config import TaskPriorConfig
from .cache import ResultCache

__all__ = [
    "AuditConfig",
    "DEPTH_IMAGES",
    "DEPTH_SETTINGS",
    "PARTS",
    "DOWNSTREAM_DEFAULTS",
    "REDUCED_SYNBENCH",
    "run_audit",
    "AuditResults",
    "check_baseline_eps",
    "check_cached_entry",
]

log = logging.getLogger("repbench")

#: the report's own part: what every score is judged against
DOWNSTREAM = "downstream"


def all_parts() -> tuple[str, ...]:
    """Every part the audit can run: the audit parts of :data:`~src.methods.METHODS` in table order, then
    ``downstream``."""
    return (*(p.name for m in METHODS.values() for p in m.audit_parts), DOWNSTREAM)


def default_parts() -> tuple[str, ...]:
    """The parts the default report runs: the audit parts of :data:`~src.methods.METHODS` whose ``default`` is True
    (not the opt-in ones, e.g. ``depth``: a head fitted per backbone), then ``downstream``."""
    return (*(p.name for m in METHODS.values() for p in m.audit_parts if p.default), DOWNSTREAM)


#: the default parts of the three built-in methods and downstream (the default of :class:`AuditConfig`); every part
#: the audit can run, the opt-in ones included: :func:`all_parts`
PARTS = default_parts()
#: the depth part's default scenes: a head is fitted on ``train`` and ``test`` are swept (a 5-backbone report's depth
#: part in tens of seconds on 2 CPU cores, docs/report.md)
DEPTH_IMAGES: dict[str, int] = {"train": 64, "test": 32}
#: the AuditConfig fields of the depth part (report.json holds them only when it runs)
DEPTH_SETTINGS = ("depth", "depth_images", "depth_image_size", "depth_data")
#: the report's reduced SynBench budget (a few seconds per backbone at 32 px on 2 CPU cores); full=true in the CLI
#: uses SynBenchConfig() (the official protocol) instead — the "report" row of src.synbench.config.SYNBENCH_BUDGETS
REDUCED_SYNBENCH: dict[str, Any] = synbench_budget("report")
DOWNSTREAM_DEFAULTS: dict[str, Any] = {"epsilons": (0.05,), "steps": 5, "norm": "l2", "C": 1.0}


@dataclass(frozen=True)
class AuditConfig:
    """Every setting of the audit (defaults: the CPU budget of the default report).

    parts: which of :data:`PARTS` to run. input_size: side of SynBench's synthetic images (None = each backbone's
    native size). synbench: the SynBench protocol. baseline_s: the separation s of the baselines' proxy task;
    baselines: which baselines (rows of :data:`src.baselines.BASELINES`; None = all); baseline_eps: ε of SDL / ε-SC (the paper: 1).
    baseline_convention: ``repbench`` or ``paper`` (:data:`src.baselines.CONVENTIONS`: the SynBench paper's code —
    reprieve's MLP curve, the authors' LogME and SFDA); baseline_probe: :class:`~src.baselines.ReprieveProbe` fields
    of the paper convention's curve other than reprieve's (a mapping or a ReprieveProbe; {} = reprieve's).
    divergence_radius: the sweep; dr_images / dr_image_size: bundled photos swept. task_prior: the probe study;
    tp_images / tp_image_size: the digits it runs on; tp_data: None, or a configs/data option (a name or
    ``{option: ..., **overrides}``, :func:`src.utils.data_tensors.data_images`) whose train split the tp_images images
    are drawn from (by the Task-Prior seed, at tp_image_size). depth: the depth part's head and its fit
    (:class:`~src.divergence_radius.depth.DepthHeadConfig`, a mapping of its fields, or None = its defaults);
    depth_images: {train: scenes the head is fitted on, test: scenes swept}; depth_image_size: their side; depth_data:
    None (synthetic scenes with exact depth) or a configs/data option with depth maps (e.g. ``nyu_depth_v2``) whose
    train / test splits the depth_images are drawn from (null counts = the whole split), all by the DivergenceRadius
    seed. downstream: probe options (epsilons, steps, norm, C).
    methods: {name: options} of methods registered in :data:`~src.methods.METHODS` beyond the three with a field
    here (an options object, a mapping of its fields, or None = its defaults).
    budgets: numbers of synthetic training samples for the consistency check (empty = none); budget_pair: the two
    backbone labels it compares (None = the two best by the first ground-truth column).
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
    baseline_convention: str = "repbench"
    baseline_probe: Any = field(default_factory=dict)
    divergence_radius: DivergenceRadiusConfig = field(default_factory=DivergenceRadiusConfig)
    dr_images: int = 32
    dr_image_size: int = 64
    task_prior: TaskPriorConfig = field(default_factory=TaskPriorConfig)
    tp_images: int = 600
    tp_image_size: int = 32
    tp_data: Any = None
    depth: DepthHeadConfig = field(default_factory=DepthHeadConfig)
    depth_images: Mapping[str, int | None] = field(default_factory=lambda: dict(DEPTH_IMAGES))
    depth_image_size: int = 64
    depth_data: Any = None
    downstream: Mapping[str, Any] = field(default_factory=lambda: dict(DOWNSTREAM_DEFAULTS))
    budgets: tuple[int, ...] = ()
    budget_pair: tuple[str, str] | None = None
    seeds: tuple[int, ...] = ()
    methods: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        parts = tuple(self.parts)
        unknown = sorted(set(parts) - set(all_parts()))
        if unknown or not parts:
            raise ValueError(f"parts {unknown or parts} unknown; choose from {list(all_parts())}")
        object.__setattr__(self, "parts", parts)
        names = {f.name for f in dataclasses.fields(self)}
        stray = sorted(set(self.methods or {}) - (set(METHODS) - names))
        if stray:
            raise ValueError(
                f"methods {stray}: not a registered method without its own field here; the methods are "
                f"{[m for m in METHODS if m not in names]} (set {[m for m in stray if m in names]} by their field)"
            )
        for spec in METHODS.values():  # each method's options through its one door (Options.coerce)
            if spec.name in names:
                object.__setattr__(self, spec.name, spec.options.coerce(getattr(self, spec.name)))
        methods = {m: METHODS[m].options.coerce((self.methods or {}).get(m)) for m in METHODS if m not in names}
        object.__setattr__(self, "methods", methods)
        from ..baselines import baseline_names

        every = tuple(baseline_names())  # the rows of src.baselines.BASELINES, read now
        which = every if self.baselines is None else tuple(self.baselines)
        bad = sorted(set(which) - set(every))
        if bad or not which:
            raise ValueError(f"baselines {bad or which} unknown; choose from {list(every)}")
        object.__setattr__(self, "baselines", which)
        if not (isinstance(self.baseline_s, (int, float)) and math.isfinite(self.baseline_s) and self.baseline_s >= 0):
            raise ValueError(f"baseline_s must be a finite number >= 0, got {self.baseline_s!r}")
        object.__setattr__(self, "baseline_eps", check_baseline_eps(self.baseline_eps))
        object.__setattr__(self, "baseline_probe", check_baseline_probe(self.baseline_convention, self.baseline_probe))
        try:
            object.__setattr__(self, "depth", DepthHeadConfig.coerce(self.depth))
        except (TypeError, ValueError) as err:
            raise type(err)(f"depth (the depth part's head, DepthHeadConfig): {err}") from None
        depth_images = dict(self.depth_images) if isinstance(self.depth_images, Mapping) else {}
        if set(depth_images) != {"train", "test"}:
            raise ValueError(f"depth_images must be {{train: <scenes the head is fitted on>, test: <scenes swept>}}, "
                             f"got {self.depth_images!r}")  # fmt: skip
        object.__setattr__(self, "depth_images", depth_images)
        sizes = [("dr_images", self.dr_images, 2), ("dr_image_size", self.dr_image_size, 16),
                 ("tp_images", self.tp_images, 2), ("tp_image_size", self.tp_image_size, 8),
                 ("depth_image_size", self.depth_image_size, 16)]  # fmt: skip
        # depth_images: null = the whole split, of depth_data only (the scenes are made, not drawn)
        sizes += [
            (f"depth_images.{k}", v, 2) for k, v in depth_images.items() if v is not None or self.depth_data is None
        ]
        for key, value, low in sizes:
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise ValueError(f"{key} must be an integer >= {low}, got {value!r}")
        for key, data in (("tp_data", self.tp_data), ("depth_data", self.depth_data)):
            if not (data is None or isinstance(data, (str, Mapping))):
                raise ValueError(
                    f"{key} must be null or a configs/data option (a name, or {{option: imagefolder, root: ..., "
                    f"num_classes: ...}}), got {data!r}"
                )
        if self.tp_data is None and self.tp_images > BUNDLED_DIGITS:
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
        if self.budget_pair is not None:
            pair = tuple(self.budget_pair) if isinstance(self.budget_pair, (list, tuple)) else (self.budget_pair,)
            if len(pair) != 2 or not all(isinstance(p, str) and p for p in pair) or pair[0] == pair[1]:
                raise ValueError(
                    f"budgets.pair must be two different backbone labels [a, b], got {self.budget_pair!r}; "
                    "e.g. budgets.pair=[embedded:efficientnet_lite0,embedded:efficientnet_lite2]"
                )
            if not budgets:
                raise ValueError(
                    f"budgets.pair={list(pair)} compares two backbones across synthetic budgets, but budgets.sizes is "
                    "empty; set budgets.sizes=[2048,8192] (for example), or budgets.pair=null"
                )
            object.__setattr__(self, "budget_pair", pair)
        seeds = tuple(self.seeds or ())
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 0 for v in seeds) or self.synbench.seed in seeds:
            raise ValueError(
                f"seeds must be distinct integers >= 0 other than synbench.seed ({self.synbench.seed}), got {list(seeds)}"
            )
        object.__setattr__(self, "seeds", seeds)

    def options(self, method: str) -> Any:
        """The options of ``method`` (its field here, else its entry of ``methods``)."""
        return getattr(self, method) if method in {f.name for f in dataclasses.fields(self)} else self.methods[method]


def part_downstream(
    bb: Backbone, sets: Mapping[str, tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]], options: Mapping[str, Any],
    device: Any, extractor: Mapping[str, Any] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """{set name: probe accuracies} (:func:`src.report.downstream.probe_accuracies`)."""
    from .downstream import probe_accuracies

    return {name: probe_accuracies(bb, train, test, device=device, extractor=extractor, **options)
            for name, (train, test) in sets.items()}  # fmt: skip


# ----------------------------------------------------------------------------------------------- cached entries
def audit_part(name: str) -> tuple[MethodSpec, AuditPart] | None:
    """(method, part) of the audit part ``name`` in :data:`~src.methods.METHODS`; None for ``downstream``."""
    for spec in METHODS.values():
        for part in spec.audit_parts:
            if part.name == name:
                return spec, part
    return None


def _check_part_value(part: str, value: Any) -> None:
    """The shape :func:`run_audit` and the renderer read of one part's value (ValueError/KeyError/TypeError if not)."""
    need(isinstance(value, Mapping), f"the {part} value is {type(value).__name__}, not a mapping")
    found = audit_part(part)
    if found is not None:
        if found[1].check is not None:
            found[1].call("check", value)
    elif part == DOWNSTREAM:
        need(all(isinstance(v, Mapping) and all(map(is_number, v.values())) for v in value.values()),
             "a downstream set without a mapping of accuracies")  # fmt: skip


def check_cached_entry(part: str, entry: Any) -> None:
    """A cache entry of :func:`run_audit`: ``{"value": <the part's value>, "seconds": <finite number >= 0>}``; a
    ValueError/KeyError/TypeError saying what is wrong otherwise (:meth:`ResultCache.get` then warns, naming the
    file, and the part is recomputed) — an edited entry with a valid key must not crash the report or fill it."""
    need(isinstance(entry, Mapping), f"the entry holds {type(entry).__name__}, not {{'value': ..., 'seconds': ...}}")
    need("value" in entry and "seconds" in entry, f"the entry has the keys {sorted(entry)}, not value and seconds")
    seconds = entry["seconds"]
    need(is_number(seconds) and seconds is not None and math.isfinite(seconds) and seconds >= 0,
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
    #: labels of the negative controls: backbones listed with ``pretrained: false`` (random weights)
    controls: list[str] = field(default_factory=list)
    #: ground truth measured elsewhere (``downstream.external``: :func:`src.report.external.load_external`)
    external: Any = None


def run_audit(
    backbones: Sequence[BackboneLike],
    config: AuditConfig | None = None,
    *,
    downstream: Mapping[str, tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]] | None = None,
    dr_images: Tensor | None = None,
    tp_images: Tensor | None = None,
    inputs: Mapping[str, Any] | None = None,
    cache_dir: str | None = None,
    device: Any = "cpu",
    progress: bool | Callable[[str], None] = False,
    extractor: Mapping[str, Any] | None = None,
    only: Sequence[int] | None = None,
    compute: bool = True,
) -> AuditResults:
    """Run every part of ``config`` on every backbone (cached parts are read back).

    ``downstream``: {set name: ((train images, labels), (test images, labels))}, images (N, 3, H, W) in [0, 1];
    None = the bundled digits at 64 px (stratified split of the training CLI's digits module). ``inputs``: {method
    name: what its ``audit_prepare`` takes instead of its default data, or part name: what that part's own
    ``prepare`` takes, e.g. ``{"depth": ((train x, maps), (test x, maps))}``}; ``dr_images`` (the images
    DivergenceRadius sweeps; None = the bundled photos) and ``tp_images`` (the Task-Prior images; None = digits) are
    its entries for those two methods. ``extractor``: FeatureExtractor options of every backbone forward
    (:func:`src.features.extractor_options`; None = its defaults); options other than the defaults enter every part's
    cache key.

    ``only``: the indices of ``backbones`` to run (a job's ``shard``, :mod:`src.report.jobs`; labels stay those of the
    whole list); None = all. ``compute=False``: read every entry from the cache and run nothing (no part, no backbone
    forward: each backbone is built on the CPU for its weights' fingerprint only); if any is missing,
    :class:`~src.report.jobs.MissingEntries` names each (backbone, part) once all are looked up.
    """
    from ..features import extractor_options
    from ..utils.progress import progress_sink
    from .jobs import MissingEntries

    cfg = config or AuditConfig()
    forward = extractor_options(extractor)  # {} for the defaults: the cache keys of a default run are unchanged
    specs = backbone_list(backbones)
    labels = backbone_labels(specs)
    say = progress_sink(progress)
    parts = cfg.parts
    check_part_backbones(cfg, specs)  # e.g. depth: backbones without a feature map, refused before any work
    given = {"divergence_radius": dr_images, "task_prior": tp_images, **dict(inputs or {})}
    cache = ResultCache(cache_dir)
    cache.check(parts)  # a cache_dir (or a part folder in it) that is a regular file: refused before any work
    if not compute and cache_dir is None:
        raise ValueError("compute=False reads every result from the cache, but cache_dir is None")
    picked = list(range(len(specs))) if only is None else list(only)
    if not picked or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < len(specs) for i in picked):
        raise ValueError(f"only={only!r}: indices into the {len(specs)} backbones expected")
    if compute:
        cache.remove_stale_temps(parts)  # what writers killed mid-write left (an hour old: no live write)
    if DOWNSTREAM in parts and downstream is None:
        downstream = {"digits": default_digits()}
    if DOWNSTREAM in parts and not downstream:
        raise ValueError("downstream needs at least one labelled set, e.g. {'digits': ((x, y), (x, y))}")
    check_pair(cfg.budget_pair, labels)
    fixed = check_buildable([specs[i] for i in picked])  # missing weights fail before any part runs
    check_fixed_sizes([labels[i] for i in picked], fixed, part_image_sizes(cfg, given, downstream))

    jobs: list[tuple[str, Callable[[Backbone, str], dict[str, Any]], dict[str, Any]]] = []

    def add(part: AuditPart, name: str, ctx: PartContext) -> None:
        run = resolve(part.run)
        settings = {**part.call("settings", ctx), **({"extractor": forward} if forward else {})}
        jobs.append((name, lambda bb, lab: run(bb, dataclasses.replace(ctx, label=lab)), settings))

    for spec in METHODS.values():  # one loop over the methods' audit parts, in table order
        wanted = [p for p in spec.audit_parts if p.name in parts]
        if not wanted:
            continue
        # the method's data for its parts without a prepare of their own (those prepare theirs: given by part name)
        shared = any(p.prepare is None for p in wanted)
        prepare = resolve(spec.audit_prepare) if spec.audit_prepare and shared else None
        data = prepare(cfg, device, given.get(spec.name), extractor=forward) if prepare else {}
        own = {p.name: resolve(p.prepare)(cfg, device, given.get(p.name), extractor=forward)
               for p in wanted if p.prepare is not None}  # fmt: skip
        options = cfg.options(spec.name)
        # synthetic parts: the main run, then each extra seed, then each budget ("synbench#1", "baselines@8192")
        variants = [("", options)]
        if any(p.synthetic for p in wanted):
            variants += [(f"#{k}", dataclasses.replace(options, seed=k)) for k in cfg.seeds]
            variants += [(f"@{n}", dataclasses.replace(options, n_train=n)) for n in cfg.budgets]
        for suffix, opts in variants:
            for part in wanted:
                if part.synthetic or not suffix:
                    ctx = PartContext(opts, cfg, device, own.get(part.name, data), extractor=forward)
                    add(part, part.name + suffix, ctx)
    if DOWNSTREAM in parts:
        sets_fp = {k: tensor_fingerprint(*tr, *te) for k, (tr, te) in (downstream or {}).items()}
        jobs.append((DOWNSTREAM, lambda bb, lab: part_downstream(bb, downstream, cfg.downstream, device, forward),
                     {"options": config_settings(cfg.downstream), "sets": sets_fp,
                      **({"extractor": forward} if forward else {})}))  # fmt: skip

    values: dict[str, dict[str, Any]] = {}
    seconds: dict[str, dict[str, float]] = {}
    cached: dict[str, dict[str, bool]] = {}
    missing: list[tuple[int, str, str]] = []
    total, done = len(picked) * len(jobs), 0
    t_all = time.perf_counter()
    for index in picked:
        label, spec = labels[index], specs[index]
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(cfg.task_prior.seed)  # random-weight backbones: the same weights in every report
            bb = build_backbone(spec).eval().to(device if compute else "cpu")
        fp = backbone_fingerprint(bb)
        values[label], seconds[label], cached[label] = {}, {}, {}
        for part, fn, settings in jobs:
            t0 = time.perf_counter()
            # "synbench@2048" / "baselines#1" are the synbench / baselines parts at other settings (n_train, seed):
            # one cache entry per (weights, part, settings), so a budget equal to the main n_train reuses the main run
            store = part.split("@")[0].split("#")[0]
            hit = cache.get(store, fp, settings, check=lambda entry, store=store: check_cached_entry(store, entry))
            if hit is None and not compute:
                missing.append((index, label, part))
                continue
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
    if missing:
        raise MissingEntries(missing, cache_dir)
    ran = [labels[i] for i in picked]
    controls = [labels[i] for i in picked if isinstance(specs[i], Mapping) and specs[i].get("pretrained") is False]
    return AuditResults(cfg, ran, values, seconds, cached, list(downstream or {}), cache.hits, cache.misses, controls)


def check_part_backbones(cfg: AuditConfig, backbones: Sequence[BackboneLike]) -> None:
    """Refuse, before any work, backbones a part of ``cfg`` cannot run on: each part's ``backbones`` check
    (:class:`~src.methods.AuditPart`; e.g. ``depth``: backbones without a spatial feature map), naming them and the
    fix. Every backbone of the report is checked (a shard's job refuses what the other jobs would)."""
    specs = backbone_list(backbones)
    for name in cfg.parts:
        found = audit_part(name)
        if found is not None and found[1].backbones is not None:
            found[1].call("backbones", specs, cfg)


#: the report setting that sets each part's image size (the fix an error names)
SIZE_SETTINGS = {"synbench": "input_size", "baselines": "input_size", "divergence_radius": "dr_image_size",
                 "task_prior": "tp_image_size", "depth": "depth_image_size",
                 DOWNSTREAM: "downstream.image_size"}  # fmt: skip


def part_image_sizes(
    cfg: AuditConfig, given: Mapping[str, Any], downstream: Mapping[str, Any] | None
) -> dict[str, int]:
    """{part: the side of the images it feeds every backbone} for the parts of ``cfg`` with a fixed size (SynBench
    at ``input_size=None`` feeds each backbone its native size and is left out)."""
    sizes: dict[str, int] = {}
    for part in cfg.parts:
        if part in ("synbench", "baselines") and cfg.input_size is not None:
            sizes[part] = cfg.input_size
        elif part in ("divergence_radius", "task_prior"):
            images = given.get(part)
            if isinstance(images, Tensor):
                sizes[part] = int(images.shape[-1])
            else:
                sizes[part] = cfg.dr_image_size if part == "divergence_radius" else cfg.tp_image_size
        elif part == "depth":  # given: ((train images, maps), (test images, maps))
            sets = given.get(part)
            sizes[part] = int(sets[1][0].shape[-1]) if sets is not None else cfg.depth_image_size
        elif part == DOWNSTREAM and downstream:
            sizes[part] = int(next(iter(downstream.values()))[0][0].shape[-1])
    return sizes


def check_fixed_sizes(labels: Sequence[str], fixed: Sequence[tuple[int, int] | None], sizes: Mapping[str, int]) -> None:
    """Refuse, before any work, a report that would feed a backbone with a fixed input size (a ViT's positional
    embedding: :meth:`src.backbones.Backbone.check_size`) images of another size, naming each part, its setting and
    the fix — rather than failing in the middle of the run, after the parts before it were computed."""
    problems = []
    for label, native in zip(labels, fixed):
        if native is None:
            continue
        wrong = {p: s for p, s in sizes.items() if s != native[0]}
        if wrong:
            uses = ", ".join(f"{SIZE_SETTINGS[p]}={s} ({p})" for p, s in wrong.items())
            fix = " ".join(sorted({f"{SIZE_SETTINGS[p]}={native[0]}" for p in wrong}))
            problems.append(f"{label} accepts only {native[0]}x{native[1]} images but the report feeds it {uses}; "
                            f"set {fix} (or leave it out)")  # fmt: skip
    if problems:
        raise ValueError("backbones with a fixed input size (positional embedding): " + "; ".join(problems))


def check_pair(pair: Sequence[str] | None, labels: Sequence[str]) -> None:
    """Refuse a ``budgets.pair`` naming a backbone that is not in the report, listing the labels (before any work)."""
    unknown = [p for p in pair or () if p not in labels]
    if unknown:
        raise ValueError(f"budgets.pair names {unknown}, not backbones of this report; its labels are {list(labels)}")


def default_digits(image_size: int = 64, seed: int = 0) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """The training CLI's digits: ((train x, y), (test x, y)) of the stratified 60/20/20 split at ``image_size``."""
    from ..data.digits import DigitsDataModule
    from ..utils.data_tensors import split_tensors

    sets = split_tensors(DigitsDataModule(image_size=image_size, seed=seed), ("train", "test"), key="digits")
    return sets["train"], sets["test"]
