"""The audit parts of the three methods (:class:`~src.methods.spec.AuditPart` functions): what ``python -m src.report``
runs on one backbone, the cache settings, the table columns, the cached-value check and the figure of each.

* ``synbench`` — SynBench (Ko et al., ICML 2024, arXiv:2210.02989, Algorithm 1) under the audit's SynBench options;
* ``baselines`` — Val loss, MDL, SDL, ε-SC, LogME, SFDA, RankMe, α-ReQ on SynBench's synthetic proxy task (the same
  samples: :func:`src.baselines.synthetic_task`) at separation ``baseline_s`` (the paper does not say which s its
  Table 7 uses; the report states the one it uses);
* ``divergence_radius`` — mean R_dr and R_cs per perturbation (Liu et al., arXiv:2604.14973) on the bundled photos;
* ``depth`` (opt-in) — the same paper's depth task (App. D–F): a depth head fitted on each backbone's frozen feature
  map of synthetic scenes with exact depth (or ``depth_data``), its clean RMSE and RMSE_p (eq. 16) per perturbation
  (:func:`src.divergence_radius.report.depth_report`, the core of ``python -m src.divergence_radius task=depth``);
* ``task_prior`` — E, Var and z = E/√Var of the Task Prior (Patel & Balestriero, arXiv:2507.09871, Thm 2.3) on digits
  with the prior backbone of the Task-Prior options, and the mean probe accuracy over sampled tasks.

Every heavy import is local: the table (:mod:`src.methods.table`) reads these names lazily.
"""

from __future__ import annotations

import dataclasses
import hashlib
import math
import time
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from .spec import PartContext

__all__ = [
    "check_baseline_eps",
    "check_baseline_probe",
    "config_settings",
    "is_number",
    "need",
    "tensor_fingerprint",
]


# ----------------------------------------------------------------------------------------------- shared helpers
def config_settings(cfg: Any) -> Any:
    """A dataclass / mapping / sequence as plain JSON values (the cache key's settings, report.json's config)."""
    if dataclasses.is_dataclass(cfg):
        return {f.name: config_settings(getattr(cfg, f.name)) for f in dataclasses.fields(cfg)}
    if isinstance(cfg, Mapping):
        return {str(k): config_settings(v) for k, v in cfg.items()}
    if isinstance(cfg, (list, tuple)):
        return [config_settings(v) for v in cfg]
    return cfg


def tensor_fingerprint(*tensors: Tensor) -> str:
    """sha256 of tensors' dtypes, shapes and bytes (identifies a data set in the cache key)."""
    h = hashlib.sha256()
    for t in tensors:
        t = t.detach().cpu().contiguous()
        h.update(f"{t.dtype}|{tuple(t.shape)}|".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy())
    return h.hexdigest()


def is_number(value: Any) -> bool:
    """A JSON number, or null (a NaN is cached as null)."""
    return value is None or (isinstance(value, (int, float)) and not isinstance(value, bool))


def need(ok: bool, what: str) -> None:
    """Raise ``ValueError("malformed cached value: <what>")`` unless ``ok``."""
    if not ok:
        raise ValueError(f"malformed cached value: {what}")


def _size(bb: Any, input_size: int | None) -> int:
    return bb.input_size[-1] if input_size is None else input_size


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


def check_baseline_probe(convention: Any, probe: Any) -> Any:
    """The :class:`~src.baselines.ReprieveProbe` of the ``paper`` convention from ``probe`` (a ReprieveProbe, or a
    mapping of its fields; {} / None = reprieve's settings); None for ``repbench``, where a non-empty ``probe`` is
    refused (it would change nothing). Errors name the settings (``baselines.convention``, ``baselines.probe``)."""
    import dataclasses as dc

    from ..baselines import ReprieveProbe
    from ..baselines.conventions import check_convention

    conv = check_convention(convention, "baseline_convention (python -m src.report: baselines.convention)")
    if conv.curve != "reprieve":
        if probe:
            raise ValueError(
                f"baselines.probe={probe!r} sets reprieve's MLP probe, which only the paper convention trains; "
                "set baselines.convention=paper, or baselines.probe={}"
            )
        return None
    if isinstance(probe, ReprieveProbe):
        return probe
    fields = {f.name for f in dc.fields(ReprieveProbe)}
    unknown = sorted(set(probe or {}) - fields)
    if unknown:
        raise ValueError(f"baselines.probe: unknown fields {unknown}; the fields are {sorted(fields)} (ReprieveProbe)")
    try:
        return ReprieveProbe(**dict(probe or {}))
    except (TypeError, ValueError) as err:
        raise type(err)(f"baselines.probe: {err}") from err


# ----------------------------------------------------------------------------------------------- synbench
def synbench_run(bb: Any, ctx: PartContext) -> dict[str, Any]:
    """SynBench of one backbone: the re-loadable ``SynBenchResult.to_dict()``."""
    from ..synbench import synbench

    size = _size(bb, ctx.audit.input_size)
    return synbench(
        bb.embed, input_shape=(3, size, size), config=ctx.options, device=ctx.device, extractor=ctx.extractor
    ).to_dict()


def sampling_settings(ctx: PartContext) -> dict[str, Any]:
    """What decides SynBench's synthetic samples and scores: its options without ``proxy`` (the proxy task's SA / RA,
    which the baselines do not read) and the input size."""
    options = config_settings(ctx.options)
    options.pop("proxy", None)
    return {"synbench": options, "input_size": ctx.audit.input_size}


def synbench_settings(ctx: PartContext) -> dict[str, Any]:
    """The cache key: :func:`sampling_settings`, with the ``proxy`` options only when set (so a run without them keeps
    the keys of before they existed)."""
    out = sampling_settings(ctx)
    if ctx.options.proxy is not None:
        out["synbench"]["proxy"] = config_settings(ctx.options.proxy)
    return out


def synbench_columns(value: Mapping[str, Any]) -> dict[str, Any]:
    """``synbench`` (the score at the first ε and a_T), ``synbench_best_eps`` and, with ``synbench.proxy`` set,
    ``synbench_sa`` / ``synbench_ra`` (the paper's Table 1: a linear probe on the proxy task, clean and under ℓ2 PGD)."""
    from ..synbench import SynBenchResult

    res = SynBenchResult.from_dict(dict(value))
    out = {"synbench": res.score(res.eps[0]), "synbench_best_eps": res.best_eps()}
    if res.proxy is not None:
        out.update(synbench_sa=res.proxy["sa"], synbench_ra=res.proxy["ra"])
    return out


def synbench_check(value: Mapping[str, Any]) -> None:
    from ..synbench import SynBenchResult

    SynBenchResult.from_dict(dict(value))  # the renderer's reader


def synbench_figure(values: Mapping[str, Mapping[str, Any]]) -> Any:
    """E(a_t) at ε = eps[0] per backbone with the input-space reference (the paper's Fig. 3)."""
    from ..synbench import SynBenchResult
    from ..synbench.compare import comparison_figures

    res = {lab: SynBenchResult.from_dict(dict(v)) for lab, v in values.items()}
    return comparison_figures(res)["curves.png"]


# ----------------------------------------------------------------------------------------------- baselines
def baselines_run(bb: Any, ctx: PartContext) -> dict[str, Any]:
    """Every baseline on SynBench's proxy task at separation ``baseline_s`` (same samples), with the time of each."""
    from ..baselines import BASELINES, baseline_scores, synthetic_task

    cfg = ctx.audit
    eps = check_baseline_eps(cfg.baseline_eps)  # a configuration error, not a score undefined here: never an "n/a"
    size = _size(bb, cfg.input_size)
    t0 = time.perf_counter()
    task = synthetic_task(bb.embed, (3, size, size), ctx.options, cfg.baseline_s, ctx.device, ctx.extractor)
    features_s = time.perf_counter() - t0
    which: Sequence[str] = cfg.baselines
    curve = tuple(n for n in which if BASELINES[n].needs == "curve")  # one loss-data curve for all of them
    groups = [(n,) for n in which if n not in curve] + ([curve] if curve else [])
    values: dict[str, Any] = {}
    seconds: dict[str, float] = {"features": features_s}
    lower: list[str] = []
    errors: dict[str, str] = {}
    for group in groups:  # one score that is undefined here (e.g. too few dimensions) leaves the others standing
        try:
            scores = baseline_scores(*task, which=group, eps=tuple(eps), seed=ctx.options.seed,
                                     convention=cfg.baseline_convention, probe=cfg.baseline_probe, device=ctx.device)  # fmt: skip
        except ValueError as err:
            for name in group:
                errors[name] = str(err)
            continue
        values.update(scores)
        seconds.update(scores.seconds)
        lower += sorted(scores.lower_bounds)
    return {"values": values, "seconds": seconds, "lower_bounds": lower, "errors": errors}


def baselines_settings(ctx: PartContext) -> dict[str, Any]:
    cfg = ctx.audit
    extra = {"s": cfg.baseline_s, "which": list(cfg.baselines), "eps": list(cfg.baseline_eps)}
    if cfg.baseline_probe is not None:  # the paper convention (the default's cache keys are unchanged)
        extra.update(convention=cfg.baseline_convention, probe=config_settings(cfg.baseline_probe))
    return {**sampling_settings(ctx), **extra}


def baselines_columns(value: Mapping[str, Any]) -> dict[str, Any]:
    return dict(value["values"])


def baselines_check(value: Mapping[str, Any]) -> None:
    need(isinstance(value.get("values"), Mapping), "baselines without a 'values' mapping")
    need(all(is_number(v) for v in value["values"].values()), "a baseline score that is not a number")
    need(isinstance(value.get("lower_bounds"), list), "baselines without a 'lower_bounds' list")


def cost_note(results: Any) -> str:
    """One sentence comparing the cost of SynBench with the baselines' on the same proxy task, per synthetic sample
    (SynBench draws len(s_values)·(n_train + n_test) samples, the baselines n_train + n_test at one s) — the quantity
    behind the paper's "50× cheaper" (Appendix A.9); empty when either part is missing."""
    cfg = results.config.synbench
    ratios = []
    for label in results.labels:
        sec = results.seconds[label]
        if "synbench" in sec and "baselines" in sec and sec["synbench"] > 0:
            per_sb = sec["synbench"] / (len(cfg.s_values) * (cfg.n_train + cfg.n_test))
            per_bl = sec["baselines"] / (cfg.n_train + cfg.n_test)
            ratios.append(per_bl / per_sb)
    if not ratios:
        return ""
    ratios.sort()
    return (
        f"Per synthetic sample, the baselines cost {ratios[0]:.1f}–{ratios[-1]:.1f}× what SynBench costs "
        f"(median {ratios[len(ratios) // 2]:.1f}×; both include the backbone forwards)."
    )


# ----------------------------------------------------------------------------------------------- divergence radius
def divergence_radius_prepare(cfg: Any, device: Any, given: Tensor | None, extractor: Any = None) -> dict[str, Any]:
    """The images swept (``given``, else ``dr_images`` bundled photos at ``dr_image_size``) and their fingerprint."""
    images = given
    if images is None:
        from ..images.photos import bundled_photos

        images = bundled_photos(cfg.dr_images, cfg.dr_image_size, seed=cfg.divergence_radius.seed)
    return {"images": images, "images_fp": tensor_fingerprint(images)}


def divergence_radius_run(bb: Any, ctx: PartContext) -> dict[str, Any]:
    """Mean R_dr and R_cs per perturbation over the images (and their means over perturbations)."""
    from ..divergence_radius import robustness_sweep
    from ..features import FeatureExtractor

    extract = FeatureExtractor(bb.embed, device=ctx.device, **ctx.extractor)  # the run's forward options
    out = robustness_sweep(ctx.data["images"], extract, ctx.options, device=ctx.device)
    r_dr, r_cs = out.r_dr.mean(0), out.r_cs.mean(0)
    return {
        "r_dr": dict(zip(out.names, r_dr.tolist())),
        "r_cs": dict(zip(out.names, r_cs.tolist())),
        "r_dr_mean": float(r_dr.mean()),
        "r_cs_mean": float(r_cs.mean()),
    }


def divergence_radius_settings(ctx: PartContext) -> dict[str, Any]:
    return {"config": ctx.options.to_dict(), "images": ctx.data["images_fp"]}


def divergence_radius_columns(value: Mapping[str, Any]) -> dict[str, Any]:
    return {"r_dr_mean": value["r_dr_mean"], "r_cs_mean": value["r_cs_mean"]}


def divergence_radius_check(value: Mapping[str, Any]) -> None:
    need(all(isinstance(value.get(k), Mapping) for k in ("r_dr", "r_cs")), "no 'r_dr' / 'r_cs' mapping")
    need(all(is_number(value.get(k, "")) for k in ("r_dr_mean", "r_cs_mean")), "no 'r_dr_mean' / 'r_cs_mean'")


def grouped_bars(series: Mapping[str, Mapping[str, Any]], groups: Sequence[str]) -> tuple[Any, Any]:
    """(Figure, Axes): one bar per backbone (``series``: {label: {group: value}}; None drawn as no bar) in each of
    ``groups`` (perturbations), the groups' names on the x axis."""
    import numpy as np
    from matplotlib.figure import Figure

    labels = list(series)
    fig = Figure(figsize=(9, 3.2))
    ax = fig.add_subplot()
    w = 0.8 / len(labels)
    x = np.arange(len(groups))
    for i, lab in enumerate(labels):
        r = series[lab]
        ax.bar(x + i * w - 0.4 + w / 2, [math.nan if r[n] is None else r[n] for n in groups], w, label=lab)
    ax.set_xticks(x, [n.replace("_", "\n") for n in groups], fontsize=7)
    return fig, ax


def divergence_radius_figure(values: Mapping[str, Mapping[str, Any]]) -> Any:
    """Mean R_dr per perturbation, one bar per backbone, on R_dr's fixed [0, 1] axis."""
    from ..divergence_radius.figures import bar_axis

    labels = list(values)
    fig, ax = grouped_bars({lab: values[lab]["r_dr"] for lab in labels}, list(values[labels[0]]["r_dr"]))
    bar_axis(ax, "mean R_dr\n(lower = more robust)")  # R_dr's fixed [0, 1] range, as every R_dr figure
    ax.legend(fontsize=6, loc="upper right")
    ax.set_title("DivergenceRadius per perturbation")
    fig.tight_layout()  # the y label inside the canvas
    return fig


# ----------------------------------------------------------------------------------------------- depth (App. D-F)
def depth_sets(cfg: Any, paths: Mapping[str, Any] | None = None) -> tuple[tuple[Tensor, Tensor], tuple[Tensor, Tensor]]:
    """((train images, depth maps), (test images, depth maps)) of the depth part, drawn by the DivergenceRadius seed
    (``cfg.divergence_radius.seed``, as ``compare_backbones(task="depth")`` draws them): without ``depth_data``
    :func:`~src.divergence_radius.report.scenes_split` (synthetic scenes with exact depth) of ``depth_images``
    train / test scenes at ``depth_image_size``; else that many seeded images of the configs/data option's train and
    test splits (null = the whole split), built at ``depth_image_size`` (``paths``: the CLI's, for
    ``${paths.data_dir}``). Reads the files: a missing one fails here, naming it (``python -m src.report`` calls this
    before any work); a data option whose targets are not depth maps is refused, naming it."""
    seed, counts = cfg.divergence_radius.seed, dict(cfg.depth_images)
    if cfg.depth_data is None:
        from ..divergence_radius.report import scenes_split

        tx, ty, sx, sy = scenes_split(cfg.depth_image_size, counts["train"], counts["test"], seed)
        return (tx, ty), (sx, sy)
    from ..utils.data_tensors import load_data_config, split_tensors

    dm = load_data_config(cfg.depth_data, seed, cfg.depth_image_size, paths=paths, key="depth_data")
    sets = split_tensors(dm, ("train", "test"), counts, seed=seed, key="depth_data")
    for split, (_, y) in sets.items():
        if y.dim() != 4 or y.shape[1] != 1 or len(y) < 2:
            raise ValueError(
                f"depth_data={cfg.depth_data!r}: its {split} split holds {len(y)} image(s) with targets of shape "
                f"{tuple(y.shape[1:])}, not depth maps (1, H, W) of at least 2 images; choose a depth data option "
                "(nyu_depth_v2, synthetic_depth), or depth_data=null for the synthetic scenes"
            )
    return sets["train"], sets["test"]


def depth_prepare(cfg: Any, device: Any, given: Any = None, extractor: Any = None) -> dict[str, Any]:
    """The depth part's data: ``given`` ((train images, maps), (test images, maps), e.g. what ``python -m src.report``
    read first from ``depth_data``), else :func:`depth_sets`; and their fingerprint (the cache key's data)."""
    (tx, ty), (sx, sy) = given if given is not None else depth_sets(cfg)
    return {"train": (tx, ty), "test": (sx, sy), "data_fp": tensor_fingerprint(tx, ty, sx, sy)}


def depth_backbones(specs: Sequence[Any], cfg: Any) -> None:
    """Refuse, before any work, backbones without a spatial feature map (the head reads it, App. D): the check of
    ``compare_backbones(task="depth")`` (:func:`~src.divergence_radius.compare.check_comparison`), its error with
    the report's fix."""
    from ..divergence_radius.compare import check_comparison

    try:
        check_comparison(list(specs), cfg.divergence_radius, task="depth")
    except ValueError as err:
        raise ValueError(
            f"the depth part (parts={list(cfg.parts)}) fits a depth head on each backbone's feature map: {err}. Fix: "
            "drop depth from parts, or drop those backbones from backbones"
        ) from None


def depth_value(rep: Any) -> dict[str, Any]:
    """The depth part's value of one :class:`~src.divergence_radius.report.DepthReport`: its summary
    (:func:`~src.divergence_radius.report.report_summary`: head, ``clean_rmse``, ``mean_rmse_p`` (eq. 16, mean over
    images and perturbations), ``mean_r_dr`` / ``mean_r_cs`` of the swept embeddings, the Pearson r of each with the
    RMSE increase across perturbations) and per perturbation ``rmse_p``, ``r_dr`` and ``r_cs`` (means over images)."""
    from ..divergence_radius.report import report_summary

    def per(key: str) -> dict[str, float]:
        return {r["perturbation"]: r[key] for r in rep.rows}

    return {**report_summary(rep), "rmse_p": per("mean_rmse_p"), "r_dr": per("mean_r_dr"), "r_cs": per("mean_r_cs")}


def depth_run(bb: Any, ctx: PartContext) -> dict[str, Any]:
    """App. D–F on one backbone: :func:`~src.divergence_radius.report.depth_report` (a depth head with the
    ``depth`` options fitted on the clean training maps, seeded by the sweep's seed; the sweep of the
    DivergenceRadius options on the test images) → :func:`depth_value`."""
    from ..divergence_radius.report import depth_report

    (tx, ty), (sx, sy) = ctx.data["train"], ctx.data["test"]
    rep = depth_report(bb, tx, ty, sx, sy, ctx.options, depth_head=ctx.audit.depth, backbone_name=ctx.label,
                       device=str(ctx.device), extractor=ctx.extractor)  # fmt: skip
    return depth_value(rep)


def depth_settings(ctx: PartContext) -> dict[str, Any]:
    """The cache key: the sweep (its seed seeds the head's fit too), the head's options and the data's bytes (which
    hold ``depth_images``, ``depth_image_size``, ``depth_data`` and the seed of their draw)."""
    return {"config": ctx.options.to_dict(), "depth": config_settings(ctx.audit.depth), "data": ctx.data["data_fp"]}


def depth_columns(value: Mapping[str, Any]) -> dict[str, Any]:
    """``depth_rmse`` (clean RMSE, App. E) and ``depth_rmse_p`` (mean RMSE_p over perturbations, eq. 16)."""
    return {"depth_rmse": value["clean_rmse"], "depth_rmse_p": value["mean_rmse_p"]}


def depth_check(value: Mapping[str, Any]) -> None:
    need(all(isinstance(value.get(k), Mapping) for k in ("rmse_p", "r_dr", "r_cs")), "no 'rmse_p' / 'r_dr' / 'r_cs'")
    need(
        all(is_number(v) for k in ("rmse_p", "r_dr", "r_cs") for v in value[k].values()),
        "a non-number per perturbation",
    )
    keys = ("clean_rmse", "mean_rmse_p", "mean_r_dr", "mean_r_cs")
    need(all(is_number(value.get(k, "")) for k in keys), f"no {' / '.join(keys)}")


def depth_figure(values: Mapping[str, Mapping[str, Any]]) -> Any:
    """Mean RMSE_p (eq. 16) per perturbation, one bar per backbone, after a first group of clean RMSEs (App. E)."""
    labels = list(values)
    names = list(values[labels[0]]["rmse_p"])
    series = {lab: {"clean": values[lab]["clean_rmse"], **values[lab]["rmse_p"]} for lab in labels}
    fig, ax = grouped_bars(series, ["clean", *names])
    top = max((v for r in series.values() for v in r.values() if v is not None and math.isfinite(v)), default=1.0)
    ax.set_ylim(0.0, 1.35 * top)  # from 0 (an error in metres), with room above the bars for the legend
    ax.set_ylabel("mean RMSE_p (m); clean: RMSE\n(lower = better)", fontsize=8)
    ax.tick_params(axis="y", labelsize=7)
    ax.legend(fontsize=6, loc="upper left", ncol=min(len(labels), 3))
    ax.set_title("Depth head under perturbation (RMSE_p, eq. 16)")
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------------------------- task prior
class Once:
    """A value computed by ``fn()`` on the first call only, then kept (``fn`` and what it holds are dropped)."""

    def __init__(self, fn: Any) -> None:
        self._fn, self._value = fn, None

    def __call__(self) -> Any:
        if self._fn is not None:
            self._value, self._fn = self._fn(), None
        return self._value


def task_prior_prepare(cfg: Any, device: Any, given: Tensor | None, extractor: Any = None) -> dict[str, Any]:
    """The study's images (``given``; else ``tp_images`` images of ``tp_data``'s train split drawn by the Task-Prior
    seed, or without ``tp_data`` the first ``tp_images`` digits; at ``tp_image_size``), the prior's
    fingerprint (the prior built once on the CPU, its random weights seeded by the Task-Prior seed) and
    ``prior_features``: a :class:`Once` that runs the prior's forward on the images when a task_prior part first
    runs — the cache keys need no forward, so a report built from the cache (``stage=page``) computes nothing."""
    from ..backbones.spec import build_backbone
    from ..features import FeatureExtractor

    images = given
    if images is None and cfg.tp_data is not None:  # python -m src.report reads them first (with its paths)
        from ..utils.data_tensors import data_images

        images = data_images(cfg.tp_data, cfg.tp_images, image_size=cfg.tp_image_size, seed=cfg.task_prior.seed,
                             key="tp_data", count_key="tp_images")  # fmt: skip
    if images is None:
        from ..task_prior.report import digits_images

        images = digits_images(cfg.tp_images, cfg.tp_image_size)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.task_prior.seed)
        prior = build_backbone(cfg.task_prior.prior_backbone).eval()

    def features() -> Tensor:
        net = prior.to(device)
        return FeatureExtractor(net.embed, device=device, **dict(extractor or {}))(images).float().cpu()

    return {"images": images, "images_fp": tensor_fingerprint(images), "prior_features": Once(features),
            "prior": backbone_fingerprint(prior)}  # fmt: skip


def task_prior_run(bb: Any, ctx: PartContext) -> dict[str, Any]:
    """The Task-Prior row of one backbone against the prior's features (same sampled tasks for every backbone)."""
    from ..features import FeatureExtractor
    from ..task_prior import compare_features

    z = FeatureExtractor(bb.embed, device=ctx.device, **ctx.extractor)(ctx.data["images"]).float().cpu()
    (row,) = compare_features({ctx.label: z}, ctx.data["prior_features"](), ctx.options)
    return {k: v for k, v in row.items() if k != "backbone"}


def task_prior_settings(ctx: PartContext) -> dict[str, Any]:
    return {"config": config_settings(ctx.options), "images": ctx.data["images_fp"], "prior": ctx.data["prior"]}


def task_prior_columns(value: Mapping[str, Any]) -> dict[str, Any]:
    return {"tp_mean": value["mean"], "tp_var": value["var"], "tp_z": value["z"], "tp_acc_mean": value["acc_mean"]}


def task_prior_check(value: Mapping[str, Any]) -> None:
    need(all(is_number(value.get(k, "")) for k in ("mean", "var", "z", "acc_mean")), "no mean / var / z / acc_mean")


def task_prior_figure(values: Mapping[str, Mapping[str, Any]]) -> Any:
    """The z-score of every backbone (a missing or infinite z drawn at 0)."""
    from matplotlib.figure import Figure

    labels = list(values)
    fig = Figure(figsize=(6, 3))
    ax = fig.add_subplot()
    z = [values[lab]["z"] for lab in labels]
    ax.bar(range(len(labels)), [v if v is not None and math.isfinite(v) else 0.0 for v in z])
    ax.set_xticks(range(len(labels)), labels, fontsize=6, rotation=20, ha="right")
    ax.set_ylabel("Task-Prior z = E / √Var")
    ax.set_title("Task-Prior z-scores")
    return fig


def backbone_fingerprint(backbone: Any) -> str:
    """The weights' fingerprint (parameters and buffers) plus the backbone's name and input convention."""
    from ..backbones.weights import state_fingerprint

    state = {**dict(backbone.named_parameters()), **dict(backbone.named_buffers())}
    meta = f"{backbone.name}|{tuple(backbone.input_size)}|{tuple(backbone.mean)}|{tuple(backbone.std)}"
    return hashlib.sha256((state_fingerprint(state) + meta).encode()).hexdigest()
