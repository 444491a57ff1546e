"""Downstream report: per-image R_dr / R_cs, the downstream score under perturbation and the robustness → score
regression (Liu et al., arXiv:2604.14973, §5 and App. D–F), for one backbone. Two tasks, one shape:

* classification (§5; Figs. 5, 10, 17, Table 7): ACC_p of a linear probe or a zero-shot head on labelled images
  (digits by default, offline) — ``robustness_report(...)`` returns a :class:`RobustnessReport`;
* depth estimation (App. D–F; Table 6, Figs. 8, 9): RMSE_p of a depth head on the frozen backbone's feature map
  (synthetic scenes by default, offline; NYU-Depth V2 with ``data=``) — ``depth_report(...)`` returns a
  :class:`DepthReport`.

Both read their score through a :class:`DownstreamMetric` (``ACC_P`` / ``RMSE_P``): the same per-perturbation rows
(:func:`regression_rows`), table, JSON payload, figures (score vs R_dr / R_cs per image with the fitted line and
the quartile-group means of App. F; the regressions' test MSE) and per-image rows.
:func:`divergence_radius_report` gathers such reports into one :class:`~src.utils.report_writer.Report`
(``divergence_radius.{md,csv,json}``, ``per_image.csv``, figures): what
:func:`src.divergence_radius.compare.compare_backbones` returns for several backbones and ``report.write`` writes
for one.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor

from ..features import FORWARD_BATCH, FeatureExtractor, extractor_options
from ..stats.rank_agreement import pearson
from ..utils.report_writer import Report
from .config import DivergenceRadiusConfig
from .depth import DepthHead, DepthHeadConfig, DepthModel, fit_depth_head, frozen_features
from .downstream import fit_line, fit_linear_probe, regression_mse
from .protocol import DepthTargets, SweepOutput, robustness_sweep

__all__ = [
    "ACC_P",
    "RMSE_P",
    "TASK_METRICS",
    "DepthReport",
    "DownstreamMetric",
    "RobustnessReport",
    "check_split_sizes",
    "comparison_figures",
    "comparison_markdown",
    "depth_report",
    "digits_split",
    "divergence_radius_report",
    "drop_correlations",
    "figure_prefixes",
    "regression_order",
    "regression_rows",
    "report_summary",
    "robustness_report",
    "scenes_split",
]

F64 = torch.float64
FAMILIES = (("divergence_radius", "r_dr", "R_dr"), ("cosine_robustness", "r_cs", "R_cs"))


def _pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson's r (:func:`src.stats.rank_agreement.pearson`), None (JSON null) where undefined."""
    r = pearson(x, y)
    return None if math.isnan(r) else r


@dataclass(frozen=True)
class DownstreamMetric:
    """How one downstream task's per-image score reads in the report: ACC_p of a classifier (§5.1) or RMSE_p of a
    depth head (App. E, eq. 16). ``key``: the SweepOutput attribute, the per_image.csv column and the rows'
    ``mean_<key>``; ``clean_key``: the clean score's key (JSON, summary); ``head_key``: the downstream head's key;
    ``change``: "drop" (ACC − mean ACC_p) or "increase" (mean RMSE_p − RMSE), the degradation a perturbation causes,
    = ``sign`` · (clean − mean)."""

    task: str
    key: str
    label: str
    clean_label: str
    clean_key: str
    head_key: str
    change: str
    sign: float
    fmt: str

    def degradation(self, clean: float, mean: float) -> float:
        """What a perturbation costs: ACC − mean ACC_p (a drop) or mean RMSE_p − RMSE (an increase)."""
        return self.sign * (clean - mean)


ACC_P = DownstreamMetric("classification", "acc_p", "ACC_p", "ACC", "clean_accuracy", "classifier", "drop", 1.0, ".3f")
RMSE_P = DownstreamMetric("depth", "rmse_p", "RMSE_p", "RMSE", "clean_rmse", "head", "increase", -1.0, ".4f")
#: the downstream tasks of §5 and App. D–F
TASK_METRICS = {m.task: m for m in (ACC_P, RMSE_P)}


def drop_correlations(
    rows: Sequence[dict[str, Any]], clean_accuracy: float, metric: DownstreamMetric = ACC_P
) -> dict[str, float | None]:
    """The paper's Table 7 statistic: across perturbations, Pearson's r between each perturbation's mean R_dr (and
    mean R_cs) and the degradation it causes (``metric.degradation``: the accuracy drop ACC − mean ACC_p; for depth,
    App. F's reading of Table 6 / Fig. 15, the RMSE increase mean RMSE_p − RMSE). Keys
    ``pearson_r_dr_vs_<change>``, ``pearson_r_cs_vs_<change>``; None where undefined (fewer than 3 perturbations, or
    a constant column)."""
    changes = [metric.degradation(clean_accuracy, r[f"mean_{metric.key}"]) for r in rows]
    return {
        f"pearson_r_dr_vs_{metric.change}": _pearson([r["mean_r_dr"] for r in rows], changes),
        f"pearson_r_cs_vs_{metric.change}": _pearson([r["mean_r_cs"] for r in rows], changes),
    }


def regression_rows(sweep: SweepOutput, values: Tensor, order: Tensor, key: str) -> list[dict[str, Any]]:
    """§5.2 / App. F per perturbation: the mean R_dr, R_cs and downstream score ``values`` (n, P) (ACC_p or RMSE_p,
    named ``mean_<key>``), and the regression of the score on R_dr and on R_cs fitted on the first half of the images
    in ``order`` and scored (MSE) on the second half, next to the MSE of the best constant fitted on the first half
    (``mse_constant``; :func:`~src.divergence_radius.downstream.regression_mse`)."""
    n, rows = values.shape[0], []
    for j, name in enumerate(sweep.names):
        y = values[order, j]
        mse_dr, a_dr, b_dr = regression_mse(sweep.r_dr[order, j], y)
        mse_cs, a_cs, b_cs = regression_mse(sweep.r_cs[order, j], y)
        h = n // 2
        rows.append(
            {
                "perturbation": name,
                "mean_r_dr": float(sweep.r_dr[:, j].mean()),
                "mean_r_cs": float(sweep.r_cs[:, j].mean()),
                f"mean_{key}": float(values[:, j].mean()),
                "mse_r_dr": mse_dr,
                "slope_r_dr": a_dr,
                "intercept_r_dr": b_dr,
                "mse_r_cs": mse_cs,
                "slope_r_cs": a_cs,
                "intercept_r_cs": b_cs,
                "mse_constant": float(((y[h:] - y[:h].mean()) ** 2).mean()),
            }
        )
    return rows


class _DownstreamReport:
    """What the classification and the depth report share: the table, figures, JSON payload and per-image rows of
    one backbone, read through ``metric`` (:class:`DownstreamMetric`), ``clean_value`` and ``head``."""

    metric: DownstreamMetric
    backbone: str
    sweep: SweepOutput
    rows: list[dict[str, Any]]
    config: DivergenceRadiusConfig | None

    @property
    def clean_value(self) -> float:  # pragma: no cover - both subclasses define it
        raise NotImplementedError

    @property
    def head(self) -> str:  # pragma: no cover - both subclasses define it
        raise NotImplementedError

    def correlations(self) -> dict[str, float | None]:
        """:func:`drop_correlations` of this report's rows and clean score."""
        return drop_correlations(self.rows, self.clean_value, self.metric)

    def markdown(self) -> str:
        mt, f = self.metric, self.metric.fmt
        what = "classifier" if mt.task == "classification" else "head"
        clean = "clean accuracy ACC" if mt.task == "classification" else "clean RMSE"
        head = (
            f"Backbone `{self.backbone}`, {self.head} {what}, {self.sweep.r_dr.shape[0]} test images, "
            f"m = {len(next(iter(self.sweep.parameters.values())))}; {clean} = {self.clean_value:{f}}.\n\n"
            f"| perturbation | mean R_dr | mean R_cs | mean {mt.label} | MSE (R_dr → {mt.label}) | MSE (R_cs → "
            f"{mt.label}) | MSE (constant) |\n|---|---|---|---|---|---|---|\n"
        )
        lines = [
            f"| {r['perturbation']} | {r['mean_r_dr']:.4f} | {r['mean_r_cs']:.4f} | {r[f'mean_{mt.key}']:{f}} | "
            f"{r['mse_r_dr']:.4f} | {r['mse_r_cs']:.4f} | {r['mse_constant']:.4f} |"
            for r in self.rows
        ]
        fmt = {k: "n/a" if v is None else f"{v:.2f}" for k, v in self.correlations().items()}
        if mt.task == "classification":
            change = "the accuracy drop ACC − mean ACC_p (Table 7)"
        else:
            change = "the RMSE increase mean RMSE_p − RMSE (App. F, Table 6 against Fig. 15)"
        tail = (
            f"\nAcross the perturbations, mean R_dr / mean R_cs vs {change}: Pearson "
            f"{fmt[f'pearson_r_dr_vs_{mt.change}']} / {fmt[f'pearson_r_cs_vs_{mt.change}']}.\n"
        )
        return head + "\n".join(lines) + "\n" + tail

    def figures(self) -> dict[str, Any]:
        """``<key>_vs_divergence_radius.png`` and ``<key>_vs_cosine_robustness.png`` (one panel per perturbation:
        every image, the fitted line, and the means of the four quartile groups of images by robustness, the
        paper's Figs. 5 / 8 / 17), and ``regression_mse.png`` (the test MSE of the two regressions, Figs. 9 / 10)."""
        import matplotlib.pyplot as plt

        from .downstream import quartile_means

        mt, names, out = self.metric, self.sweep.names, {}
        for fam, attr, label in FAMILIES:
            cols = min(3, len(names))
            rows = (len(names) + cols - 1) // cols
            fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.7 * rows), squeeze=False)
            x_all, y_all = getattr(self.sweep, attr), getattr(self.sweep, mt.key)
            for j, name in enumerate(names):
                ax = axes[j // cols][j % cols]
                x, y = x_all[:, j], y_all[:, j]
                ax.scatter(x.numpy(), y.numpy(), s=6, alpha=0.3, color="C0")
                a, b = fit_line(x, y)
                xs = torch.linspace(float(x.min()), float(x.max()), 2, dtype=F64)
                ax.plot(xs.numpy(), (a * xs + b).numpy(), color="C3", lw=1.2, label=f"{a:+.2f}·x {b:+.2f}")
                if x.numel() >= 4:
                    qx, qy = quartile_means(x, y)
                    ax.plot(qx.numpy(), qy.numpy(), "o-", color="k", ms=4, lw=1, label="quartile means")
                ax.set_title(name, fontsize=8)
                ax.set_xlabel(label, fontsize=7)
                ax.set_ylabel(mt.label, fontsize=7)
                ax.legend(fontsize=6)
            for j in range(len(names), rows * cols):
                axes[j // cols][j % cols].axis("off")
            fig.suptitle(f"{mt.label} vs {label} per image ({self.backbone})", fontsize=9)
            fig.tight_layout()
            out[f"{mt.key}_vs_{fam}.png"] = fig
        fig, ax = plt.subplots(figsize=(8, 3))
        xs = torch.arange(len(names)).numpy()
        ax.bar(xs - 0.2, [r["mse_r_cs"] for r in self.rows], 0.4, label="R_cs")
        ax.bar(xs + 0.2, [r["mse_r_dr"] for r in self.rows], 0.4, label="R_dr")
        ax.set_xticks(xs, [n.replace("_", "\n") for n in names], fontsize=7)
        ax.set_ylabel(f"test MSE predicting {mt.label}")
        ax.legend(fontsize=7)
        fig.tight_layout()
        out["regression_mse.png"] = fig
        return out

    def to_dict(self) -> dict[str, Any]:
        mt = self.metric
        out = {
            "backbone": self.backbone,
            mt.head_key: self.head,
            mt.clean_key: self.clean_value,
            "parameters": {k: v.tolist() for k, v in self.sweep.parameters.items()},
            "rows": self.rows,
            f"{mt.change}_correlations": self.correlations(),
        }
        if self.config is not None:
            out["config"] = self.config.to_dict()
        return out

    def per_image(self) -> list[dict[str, Any]]:
        """One row per (image, perturbation): image (its index in the test images), perturbation, r_dr, r_cs, and
        the score (acc_p or rmse_p) (float64 values as Python floats)."""
        s, key = self.sweep, self.metric.key
        values = getattr(s, key)
        return [
            {
                "image": int(s.index[i]),
                "perturbation": name,
                "r_dr": float(s.r_dr[i, j]),
                "r_cs": float(s.r_cs[i, j]),
                key: float(values[i, j]),
            }
            for i in range(s.r_dr.shape[0])
            for j, name in enumerate(s.names)
        ]

    def write(self, out_dir: str | Path) -> dict[str, Path]:
        """The one-backbone Report written into ``out_dir`` (``divergence_radius.{md,csv,json}``, ``per_image.csv``,
        the figures; see :func:`divergence_radius_report`)."""
        return divergence_radius_report({self.backbone or "backbone": self}).write(out_dir)


@dataclass
class RobustnessReport(_DownstreamReport):
    """Classification (§5): per-image values (``sweep``, with ACC_p) and per-perturbation summary rows of one
    backbone, its clean accuracy, and the sweep's ``config``."""

    backbone: str
    classifier: str
    clean_accuracy: float
    sweep: SweepOutput
    rows: list[dict[str, Any]] = field(default_factory=list)
    order: Tensor | None = None  # the (seeded) image order of the regression halves
    config: DivergenceRadiusConfig | None = None

    metric = ACC_P

    @property
    def clean_value(self) -> float:
        return self.clean_accuracy

    @property
    def head(self) -> str:
        return self.classifier


@dataclass
class DepthReport(_DownstreamReport):
    """Depth estimation (App. D–F): per-image values (``sweep``, with RMSE_p and the clean RMSE), per-perturbation
    summary rows of one backbone, the mean clean RMSE over the test images, the head (``head_kind``: its readout)
    and the sweep's ``config``."""

    backbone: str
    head_kind: str
    clean_rmse: float
    sweep: SweepOutput
    rows: list[dict[str, Any]] = field(default_factory=list)
    order: Tensor | None = None
    config: DivergenceRadiusConfig | None = None

    metric = RMSE_P

    @property
    def clean_value(self) -> float:
        return self.clean_rmse

    @property
    def head(self) -> str:
        return self.head_kind


def check_split_sizes(n_train: object, n_test: object, available: int | None = None) -> tuple[int, int]:
    """``(n_train, n_test)`` as ints: n_train >= 0, n_test >= 2 (the regression of ACC_p on robustness fits on one
    half of the test images and is tested on the other), n_train + n_test <= ``available``; else a ValueError naming
    the config key."""
    for key, value in (("n_train", n_train), ("n_test", n_test)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ValueError(f"{key} must be an integer, got {value!r}")
        if value < 0:
            raise ValueError(f"{key} must be >= 0 (a number of images), got {value}; set {key} to e.g. 200")
    if n_test < 2:
        raise ValueError(
            f"n_test must be >= 2, got {n_test}: the robustness -> ACC_p regression (RMSE_p: depth) fits on one half of the test "
            "images and scores the other; set n_test to e.g. 200"
        )
    if available is not None and n_train + n_test > available:
        raise ValueError(
            f"digits has {available} images; n_train + n_test = {n_train} + {n_test} is too many: lower n_train or n_test"
        )
    return int(n_train), int(n_test)


def digits_split(image_size: int, n_train: int, n_test: int, seed: int = 0) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """scikit-learn digits upsampled to RGB ``image_size``: a seeded random (train, test) split of the given sizes
    (disjoint; sizes checked by :func:`check_split_sizes`)."""
    from ..images.digits import load_digits_tensors, upsample_digits

    images, labels = load_digits_tensors()
    n_train, n_test = check_split_sizes(n_train, n_test, images.shape[0])
    perm = torch.randperm(images.shape[0], generator=torch.Generator().manual_seed(seed))
    tr, te = perm[:n_train], perm[n_train : n_train + n_test]
    x = upsample_digits(images, image_size)
    return x[tr], labels[tr], x[te], labels[te]


def scenes_split(image_size: int, n_train: int, n_test: int, seed: int = 0) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The depth task's offline data, the twin of :func:`digits_split`: ``n_train`` + ``n_test`` synthetic scenes
    with exact depth (:func:`src.images.depth_scenes.depth_scenes` of ``seed``, at ``image_size``), the first
    ``n_train`` to fit the head, the others swept: (train images, train depth (N, 1, S, S) metres, test images, test
    depth)."""
    from ..images.depth_scenes import depth_scenes

    n_train, n_test = check_split_sizes(n_train, n_test)
    x, y = depth_scenes(n_train + n_test, image_size, seed)
    return x[:n_train], y[:n_train], x[n_train:], y[n_train:]


def robustness_report(
    feature_fn: Callable[[Tensor], Tensor],
    train_images: Tensor | None,
    train_labels: Tensor | None,
    test_images: Tensor,
    test_labels: Tensor,
    config: DivergenceRadiusConfig | Mapping[str, Any] | None = None,
    *,
    backbone_name: str = "",
    classifier: Callable[[Tensor], Tensor] | None = None,
    perturbations: Sequence[str] | None = None,
    m: int | None = None,
    mode: str | None = None,
    seed: int | None = None,
    probe_C: float = 1.0,
    chunk_size: int | None = None,
    device: str | None = None,
    max_batch: int = FORWARD_BATCH,
    extractor: Mapping[str, Any] | None = None,
) -> RobustnessReport:
    """The §5 protocol: a linear probe on clean training features (unless a ``classifier`` such as a zero-shot
    head is given), the sweep of ``config`` (a DivergenceRadiusConfig, a mapping of its fields or None for its
    defaults; ``perturbations``, ``m``, ``mode``, ``seed``, ``chunk_size`` override its fields when not None) with
    ACC_p on the test images, and per perturbation the regression test MSE of ACC_p on R_dr and on R_cs (first half
    of an order seeded by seed + 1 to fit, second half to test; the MSE of the best constant fitted on the first half
    is the baseline). ``extractor``: further :class:`~src.features.FeatureExtractor` options of the forwards
    (:func:`src.features.extractor_options`; its ``max_batch`` wins over ``max_batch``)."""
    cfg = DivergenceRadiusConfig.coerce(
        config, perturbations=perturbations, m=m, mode=mode, seed=seed, chunk_size=chunk_size
    )
    if test_images.shape[0] < 2:
        raise ValueError(
            f"robustness_report needs at least 2 test images (the regression fits on one half and scores the "
            f"other), got {test_images.shape[0]}"
        )
    extract = FeatureExtractor(feature_fn, device=device, **{"max_batch": max_batch, **extractor_options(extractor)})
    kind = "zero-shot" if classifier is not None else "linear-probe"
    if classifier is None:
        if train_images is None or train_labels is None:
            raise ValueError("a linear probe needs train_images and train_labels (or pass a classifier)")
        classifier = fit_linear_probe(extract(train_images).cpu(), train_labels, C=probe_C)
        if device is not None:
            classifier = classifier.to(device)
    sweep = robustness_sweep(test_images, extract, cfg, labels=test_labels, classifier=classifier)
    order = regression_order(sweep.r_dr.shape[0], cfg.seed)
    rows = regression_rows(sweep, sweep.acc_p, order, ACC_P.key)
    return RobustnessReport(backbone_name, kind, float(sweep.clean_correct.mean()), sweep, rows, order, cfg)


def regression_order(n: int, seed: int) -> Tensor:
    """The image order whose first half fits the regressions and whose second half scores them: a permutation
    seeded by ``seed + 1`` (the sweep's own draws use ``seed``)."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed + 1))


def depth_report(
    backbone: Any,
    train_images: Tensor | None,
    train_depth: Tensor | None,
    test_images: Tensor,
    test_depth: Tensor,
    config: DivergenceRadiusConfig | Mapping[str, Any] | None = None,
    *,
    head: DepthHead | None = None,
    depth_head: DepthHeadConfig | Mapping[str, Any] | None = None,
    backbone_name: str = "",
    perturbations: Sequence[str] | None = None,
    m: int | None = None,
    mode: str | None = None,
    seed: int | None = None,
    chunk_size: int | None = None,
    device: str | None = None,
    max_batch: int = FORWARD_BATCH,
    extractor: Mapping[str, Any] | None = None,
) -> DepthReport:
    """App. D–F, the twin of :func:`robustness_report` for depth estimation: a :class:`~src.divergence_radius.depth.
    DepthHead` fitted on the frozen ``backbone``'s features of the clean training images and their ground truth
    (:func:`~src.divergence_radius.depth.fit_depth_head`, options ``depth_head``: a DepthHeadConfig, a mapping of
    its fields or None; seeded by the sweep's seed), unless a trained ``head`` is given (e.g. a
    :class:`~src.models.DepthProbe` checkpoint's); then the sweep of ``config`` on the test images with RMSE_p per
    image and perturbation (eq. 16) and the clean RMSE, and per perturbation the regressions of RMSE_p on R_dr and on
    R_cs (halves of :func:`regression_order`). ``backbone``: a Backbone with ``embed_with_map``; maps ``(N, 1, H, W)``
    in metres. ``extractor``: further :class:`~src.features.FeatureExtractor` options of the forwards."""
    cfg = DivergenceRadiusConfig.coerce(
        config, perturbations=perturbations, m=m, mode=mode, seed=seed, chunk_size=chunk_size
    )
    hcfg = DepthHeadConfig.coerce(depth_head)
    if test_images.shape[0] < 2:
        raise ValueError(
            f"depth_report needs at least 2 test images (the regression fits on one half and scores the other), got "
            f"{test_images.shape[0]}"
        )
    options = {"max_batch": max_batch, **extractor_options(extractor)}
    if head is None:
        if train_images is None or train_depth is None:
            raise ValueError("a depth head is fitted on train_images and train_depth (or pass a trained head=)")
        z, fmaps = frozen_features(backbone, train_images, device=device, **options)
        head = fit_depth_head(
            fmaps, z if hcfg.with_embedding else None, train_depth, hcfg, seed=cfg.seed, device=device
        )
    model = DepthModel(backbone, head.to(device) if device is not None else head).eval()
    extract = FeatureExtractor(model.sweep_features, device=device, **options)
    sweep = robustness_sweep(test_images, extract, cfg, depth=DepthTargets(test_depth, model.embed_dim))
    order = regression_order(sweep.r_dr.shape[0], cfg.seed)
    rows = regression_rows(sweep, sweep.rmse_p, order, RMSE_P.key)
    kind = f"{head.readout} readout"
    return DepthReport(backbone_name, kind, float(sweep.clean_rmse.mean()), sweep, rows, order, cfg)


def report_summary(rep: _DownstreamReport) -> dict[str, Any]:
    """One backbone's cross-perturbation summary: the head, the clean score, means over perturbations (of R_dr, R_cs
    and ACC_p or RMSE_p, eq. 16), the correlations of the robustness values with the degradation (Table 7). The
    summary row of :func:`comparison_markdown` and the value of the report's ``depth`` part."""
    rows, mt = rep.rows, rep.metric
    mean = lambda key: sum(r[key] for r in rows) / len(rows)  # noqa: E731
    return {
        mt.head_key: rep.head,
        mt.clean_key: rep.clean_value,
        "mean_r_dr": mean("mean_r_dr"),
        "mean_r_cs": mean("mean_r_cs"),
        f"mean_{mt.key}": mean(f"mean_{mt.key}"),
        **rep.correlations(),
    }


def divergence_radius_report(results: Mapping[str, _DownstreamReport]) -> Report:
    """The Report of per-backbone reports {label: RobustnessReport or DepthReport} (one task): rows (backbone +
    each perturbation's summary row), the Markdown (:func:`comparison_markdown`), the JSON payload {label:
    ``report.to_dict()``}, ``per_image.csv`` and the figures (:func:`comparison_figures`)."""
    if not results:
        raise ValueError("no DivergenceRadius results to report")
    if len({rep.metric.task for rep in results.values()}) > 1:
        raise ValueError("one report holds one downstream task: classification and depth results were mixed")
    return Report(
        method="divergence_radius",
        rows=[{"backbone": label, **row} for label, rep in results.items() for row in rep.rows],
        markdown=comparison_markdown(results),
        data={label: rep.to_dict() for label, rep in results.items()},
        results=dict(results),
        tables={
            "per_image.csv": [{"backbone": label, **row} for label, rep in results.items() for row in rep.per_image()]
        },
        figures=lambda: comparison_figures(results),
    )


def comparison_markdown(results: Mapping[str, _DownstreamReport]) -> str:
    """A summary table (a row per backbone: the head, the clean score (ACC or RMSE), mean R_dr / R_cs / ACC_p or
    RMSE_p over the perturbations, the correlations of R_dr / R_cs with the degradation, Table 7), then each
    backbone's per-perturbation table."""
    fmt = lambda v, spec: "n/a" if v is None else format(v, spec)  # noqa: E731  (None = undefined correlation)
    mt = next(iter(results.values())).metric
    f = mt.fmt
    lines = [
        f"| backbone | {mt.head_key} | clean {mt.clean_label} | mean R_dr | mean R_cs | mean {mt.label} | Pearson R_dr "
        f"vs {mt.change} | Pearson R_cs vs {mt.change} |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, rep in results.items():
        s = report_summary(rep)
        r_dr, r_cs = fmt(s[f"pearson_r_dr_vs_{mt.change}"], ".2f"), fmt(s[f"pearson_r_cs_vs_{mt.change}"], ".2f")
        lines.append(
            f"| {label} | {s[mt.head_key]} | {s[mt.clean_key]:{f}} | {s['mean_r_dr']:.4f} | {s['mean_r_cs']:.4f} "
            f"| {s[f'mean_{mt.key}']:{f}} | {r_dr} | {r_cs} |"
        )
    parts = ["\n".join(lines) + "\n"]
    parts += [f"## {label}\n\n{rep.markdown()}" for label, rep in results.items()]
    return "\n".join(parts)


def _slug(label: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", label).strip("_") or "backbone"


def figure_prefixes(labels: Sequence[str]) -> dict[str, str]:
    """File-name prefix of each backbone's figures: "" for a single backbone, else a distinct slug of its label
    followed by "__" (a numeric suffix where two labels slug alike)."""
    if len(labels) == 1:
        return {labels[0]: ""}
    out: dict[str, str] = {}
    for label in labels:
        slug, i = _slug(label), 1
        while slug + "__" in out.values():
            i += 1
            slug = f"{_slug(label)}_{i}"
        out[label] = slug + "__"
    return out


def comparison_figures(results: Mapping[str, _DownstreamReport]) -> dict[str, Any]:
    """Each backbone's figures (:meth:`RobustnessReport.figures`, prefixed per :func:`figure_prefixes`) and
    ``r_dr_by_perturbation.png``: mean R_dr per perturbation, one bar per backbone (the paper's Fig. 4), on R_dr's
    fixed [0, 1] range (:mod:`src.divergence_radius.figures`)."""
    from matplotlib.figure import Figure

    from .figures import bar_axis

    out: dict[str, Any] = {}
    for label, prefix in figure_prefixes(list(results)).items():
        out.update({prefix + name: fig for name, fig in results[label].figures().items()})
    perturbations = list(dict.fromkeys(r["perturbation"] for rep in results.values() for r in rep.rows))
    fig = Figure(figsize=(max(6.0, 0.9 * len(perturbations) * max(1, len(results)) ** 0.5 + 2), 3.4))
    ax = fig.add_subplot()
    width = 0.8 / len(results)
    for b, (label, rep) in enumerate(results.items()):
        by_name = {r["perturbation"]: r["mean_r_dr"] for r in rep.rows}
        xs = [j + (b - (len(results) - 1) / 2) * width for j, p in enumerate(perturbations) if p in by_name]
        ax.bar(xs, [by_name[p] for p in perturbations if p in by_name], width, label=label)
    ax.set_xticks(range(len(perturbations)), [p.replace("_", "\n") for p in perturbations], fontsize=7)
    bar_axis(ax, "mean R_dr over test images\n(lower = more robust)")  # fixed [0, 1]: R_dr's range
    ax.set_title("DivergenceRadius per perturbation", fontsize=9)
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    out["r_dr_by_perturbation.png"] = fig
    return out
