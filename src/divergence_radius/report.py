"""Downstream report: per-image R_dr / R_cs, ACC_p and the robustness → ACC_p regression (Liu et al.,
arXiv:2604.14973, §5; Figs. 5 and 10), for one backbone on labelled images (digits by default, offline).

``robustness_report(...)`` returns a :class:`RobustnessReport` (its table, JSON payload and figures);
:func:`divergence_radius_report` gathers such reports into one :class:`~src.utils.report_writer.Report`
(``divergence_radius.{md,csv,json}``, ``per_image.csv``, figures): what
:func:`src.divergence_radius.compare.compare_backbones` returns for several backbones and
:meth:`RobustnessReport.write` writes for one.
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
from .downstream import fit_line, fit_linear_probe, open_clip_zero_shot, regression_mse
from .protocol import SweepOutput, robustness_sweep

__all__ = [
    "RobustnessReport",
    "check_split_sizes",
    "comparison_figures",
    "comparison_markdown",
    "digits_split",
    "divergence_radius_report",
    "drop_correlations",
    "figure_prefixes",
    "robustness_report",
]

F64 = torch.float64
FAMILIES = (("divergence_radius", "r_dr", "R_dr"), ("cosine_robustness", "r_cs", "R_cs"))


def _pearson(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson's r (:func:`src.stats.rank_agreement.pearson`), None (JSON null) where undefined."""
    r = pearson(x, y)
    return None if math.isnan(r) else r


def drop_correlations(rows: Sequence[dict[str, Any]], clean_accuracy: float) -> dict[str, float | None]:
    """The paper's Table 7 statistic: across perturbations, Pearson's r between each perturbation's mean R_dr (and
    mean R_cs) and its accuracy drop ACC − mean ACC_p. None where undefined (fewer than 3 perturbations, or a
    constant column)."""
    drops = [clean_accuracy - r["mean_acc_p"] for r in rows]
    return {
        "pearson_r_dr_vs_drop": _pearson([r["mean_r_dr"] for r in rows], drops),
        "pearson_r_cs_vs_drop": _pearson([r["mean_r_cs"] for r in rows], drops),
    }


@dataclass
class RobustnessReport:
    """Per-image values (``sweep``) and per-perturbation summary rows of one backbone, and the sweep's ``config``."""

    backbone: str
    classifier: str
    clean_accuracy: float
    sweep: SweepOutput
    rows: list[dict[str, Any]] = field(default_factory=list)
    order: Tensor | None = None  # the (seeded) image order of the regression halves
    config: DivergenceRadiusConfig | None = None

    def markdown(self) -> str:
        head = (
            f"Backbone `{self.backbone}`, {self.classifier} classifier, {self.sweep.r_dr.shape[0]} test images, "
            f"m = {len(next(iter(self.sweep.parameters.values())))}; clean accuracy ACC = {self.clean_accuracy:.3f}.\n\n"
            "| perturbation | mean R_dr | mean R_cs | mean ACC_p | MSE (R_dr → ACC_p) | MSE (R_cs → ACC_p) "
            "| MSE (constant) |\n|---|---|---|---|---|---|---|\n"
        )
        lines = [
            f"| {r['perturbation']} | {r['mean_r_dr']:.4f} | {r['mean_r_cs']:.4f} | {r['mean_acc_p']:.3f} | "
            f"{r['mse_r_dr']:.4f} | {r['mse_r_cs']:.4f} | {r['mse_constant']:.4f} |"
            for r in self.rows
        ]
        corr = drop_correlations(self.rows, self.clean_accuracy)
        fmt = {k: "n/a" if v is None else f"{v:.2f}" for k, v in corr.items()}
        tail = (
            f"\nAcross the perturbations, mean R_dr / mean R_cs vs the accuracy drop ACC − mean ACC_p (Table 7): "
            f"Pearson {fmt['pearson_r_dr_vs_drop']} / {fmt['pearson_r_cs_vs_drop']}.\n"
        )
        return head + "\n".join(lines) + "\n" + tail

    def figures(self) -> dict[str, Any]:
        import matplotlib.pyplot as plt

        names = self.sweep.names
        out = {}
        for fam, attr, label in FAMILIES:
            cols = min(3, len(names))
            rows = (len(names) + cols - 1) // cols
            fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.7 * rows), squeeze=False)
            x_all, y_all = getattr(self.sweep, attr), self.sweep.acc_p
            for j, name in enumerate(names):
                ax = axes[j // cols][j % cols]
                x, y = x_all[:, j], y_all[:, j]
                ax.scatter(x.numpy(), y.numpy(), s=6, alpha=0.4)
                a, b = fit_line(x, y)
                xs = torch.linspace(float(x.min()), float(x.max()), 2, dtype=F64)
                ax.plot(xs.numpy(), (a * xs + b).numpy(), color="C3", lw=1.5, label=f"{a:+.2f}·x {b:+.2f}")
                ax.set_title(name, fontsize=8)
                ax.set_xlabel(label, fontsize=7)
                ax.set_ylabel("ACC_p", fontsize=7)
                ax.legend(fontsize=6)
            for j in range(len(names), rows * cols):
                axes[j // cols][j % cols].axis("off")
            fig.suptitle(f"ACC_p vs {label} per image ({self.backbone})", fontsize=9)
            fig.tight_layout()
            out[f"acc_p_vs_{fam}.png"] = fig
        fig, ax = plt.subplots(figsize=(8, 3))
        xs = torch.arange(len(names)).numpy()
        ax.bar(xs - 0.2, [r["mse_r_cs"] for r in self.rows], 0.4, label="R_cs")
        ax.bar(xs + 0.2, [r["mse_r_dr"] for r in self.rows], 0.4, label="R_dr")
        ax.set_xticks(xs, [n.replace("_", "\n") for n in names], fontsize=7)
        ax.set_ylabel("test MSE predicting ACC_p")
        ax.legend(fontsize=7)
        fig.tight_layout()
        out["regression_mse.png"] = fig
        return out

    def to_dict(self) -> dict[str, Any]:
        out = {
            "backbone": self.backbone,
            "classifier": self.classifier,
            "clean_accuracy": self.clean_accuracy,
            "parameters": {k: v.tolist() for k, v in self.sweep.parameters.items()},
            "rows": self.rows,
            "drop_correlations": drop_correlations(self.rows, self.clean_accuracy),
        }
        if self.config is not None:
            out["config"] = self.config.to_dict()
        return out

    def per_image(self) -> list[dict[str, Any]]:
        """One row per (image, perturbation): image (its index in the test images), perturbation, r_dr, r_cs,
        acc_p (float64 values as Python floats)."""
        s = self.sweep
        return [
            {
                "image": int(s.index[i]),
                "perturbation": name,
                "r_dr": float(s.r_dr[i, j]),
                "r_cs": float(s.r_cs[i, j]),
                "acc_p": float(s.acc_p[i, j]),
            }
            for i in range(s.r_dr.shape[0])
            for j, name in enumerate(s.names)
        ]

    def write(self, out_dir: str | Path) -> dict[str, Path]:
        """The one-backbone Report written into ``out_dir`` (``divergence_radius.{md,csv,json}``, ``per_image.csv``,
        the figures; see :func:`divergence_radius_report`)."""
        return divergence_radius_report({self.backbone or "backbone": self}).write(out_dir)


def check_split_sizes(n_train: object, n_test: object, available: int | None = None) -> tuple[int, int]:
    """``(n_train, n_test)`` as ints: n_train >= 0, n_test >= 2 (the regression of ACC_p on robustness fits on one
    half of the test images and is tested on the other), n_train + n_test <= ``available``; else a ValueError naming
    the config key."""
    for key, value in (("n_train", n_train), ("n_test", n_test)):
        if isinstance(value, bool) or not isinstance(value, numbers.Integral):
            raise ValueError(f"{key} must be an integer, got {value!r}")
        if value < 0:
            raise ValueError(f"{key} must be >= 0 (a number of digits images), got {value}; set {key} to e.g. 200")
    if n_test < 2:
        raise ValueError(
            f"n_test must be >= 2, got {n_test}: the robustness -> ACC_p regression fits on one half of the test "
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
    n = sweep.r_dr.shape[0]
    order = torch.randperm(n, generator=torch.Generator().manual_seed(cfg.seed + 1))
    rows = []
    for j, name in enumerate(sweep.names):
        acc = sweep.acc_p[order, j]
        mse_dr, a_dr, b_dr = regression_mse(sweep.r_dr[order, j], acc)
        mse_cs, a_cs, b_cs = regression_mse(sweep.r_cs[order, j], acc)
        h = n // 2
        mse_const = float(((acc[h:] - acc[:h].mean()) ** 2).mean())
        rows.append(
            {
                "perturbation": name,
                "mean_r_dr": float(sweep.r_dr[:, j].mean()),
                "mean_r_cs": float(sweep.r_cs[:, j].mean()),
                "mean_acc_p": float(sweep.acc_p[:, j].mean()),
                "mse_r_dr": mse_dr,
                "slope_r_dr": a_dr,
                "intercept_r_dr": b_dr,
                "mse_r_cs": mse_cs,
                "slope_r_cs": a_cs,
                "intercept_r_cs": b_cs,
                "mse_constant": mse_const,
            }
        )
    return RobustnessReport(backbone_name, kind, float(sweep.clean_correct.mean()), sweep, rows, order, cfg)


def zero_shot_for(backbone_name: str, class_names: Sequence[str], pretrained: str | None = None, **kw: Any):
    """Zero-shot head for an ``open_clip:<arch>`` backbone name (see :func:`open_clip_zero_shot`)."""
    if not backbone_name.startswith("open_clip:"):
        raise ValueError(f"zero-shot classification needs an open_clip backbone, got {backbone_name!r}")
    return open_clip_zero_shot(backbone_name.split(":", 1)[1], class_names, pretrained=pretrained, **kw)


def _summary(rep: RobustnessReport) -> dict[str, Any]:
    """One backbone's cross-perturbation summary: clean ACC, means over perturbations, Table 7 correlations."""
    rows = rep.rows
    mean = lambda key: sum(r[key] for r in rows) / len(rows)  # noqa: E731
    return {
        "classifier": rep.classifier,
        "clean_accuracy": rep.clean_accuracy,
        "mean_r_dr": mean("mean_r_dr"),
        "mean_r_cs": mean("mean_r_cs"),
        "mean_acc_p": mean("mean_acc_p"),
        **drop_correlations(rows, rep.clean_accuracy),
    }


def divergence_radius_report(results: Mapping[str, RobustnessReport]) -> Report:
    """The Report of per-backbone reports {label: RobustnessReport}: rows (backbone + each perturbation's summary
    row), the Markdown (:func:`comparison_markdown`), the JSON payload {label: ``RobustnessReport.to_dict()``},
    ``per_image.csv`` and the figures (:func:`comparison_figures`)."""
    if not results:
        raise ValueError("no DivergenceRadius results to report")
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


def comparison_markdown(results: Mapping[str, RobustnessReport]) -> str:
    """A summary table (a row per backbone: classifier, clean ACC, mean R_dr / R_cs / ACC_p over the perturbations,
    the Table 7 correlations with the accuracy drop), then each backbone's per-perturbation table."""
    fmt = lambda v, spec: "n/a" if v is None else format(v, spec)  # noqa: E731  (None = undefined correlation)
    lines = [
        "| backbone | classifier | clean ACC | mean R_dr | mean R_cs | mean ACC_p | Pearson R_dr vs drop "
        "| Pearson R_cs vs drop |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for label, rep in results.items():
        s = _summary(rep)
        r_dr, r_cs = fmt(s["pearson_r_dr_vs_drop"], ".2f"), fmt(s["pearson_r_cs_vs_drop"], ".2f")
        lines.append(
            f"| {label} | {s['classifier']} | {s['clean_accuracy']:.3f} | {s['mean_r_dr']:.4f} | {s['mean_r_cs']:.4f} "
            f"| {s['mean_acc_p']:.3f} | {r_dr} | {r_cs} |"
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


def comparison_figures(results: Mapping[str, RobustnessReport]) -> dict[str, Any]:
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
