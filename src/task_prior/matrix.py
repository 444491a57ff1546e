"""The prior × evaluated-backbone matrix of the closed-form moments (Patel & Balestriero, "Task Priors",
arXiv:2507.09871, App. D.2, Fig. 6: how the choice of the Task Prior's kernel K affects E[Tr(MG)] and Var[Tr(MG)]).

Every backbone serves once as the prior (K from its features) and once as the evaluated representation (M from its
features), all on the same images: ``mean[p, e]`` = E_{G~μ_K(p)}[Tr(M(e) G)], ``var[p, e]`` likewise, each from
:func:`~src.task_prior.moments.task_prior_moments` with the config's convention (temperature, kernel scales). The
paper's reading: the mean is generally highest on the diagonal (M = K); the variance shows no such pattern.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch
from torch import Tensor

from ..utils.checks import check_tensor
from .config import TaskPriorConfig
from .moments import task_prior_moments

__all__ = ["PRIOR_MATRIX_FIGURE", "prior_matrix", "prior_matrix_data", "prior_matrix_figure", "prior_matrix_markdown"]

PRIOR_MATRIX_FIGURE = "prior_matrix.png"


def _check_feature_map(features: Mapping[str, Tensor]) -> list[str]:
    """The labels of ``features`` ({label: (n, D)}, at least one, every n equal); else a ValueError naming the
    entry and the fix."""
    if not isinstance(features, Mapping) or not features:
        raise ValueError(
            f"features must be a non-empty mapping {{backbone label: (n, D) features}}, got {type(features).__name__}"
        )
    names = [str(k) for k in features]
    n = None
    for name, feats in features.items():
        check_tensor(feats, f"features[{name!r}]", "(n, D)")
        if n is None:
            n = feats.shape[0]
        elif feats.shape[0] != n:
            raise ValueError(
                f"features[{name!r}] has {feats.shape[0]} rows but features[{names[0]!r}] has {n}; compute every "
                "backbone's features on the same images in the same order"
            )
    return names


def prior_matrix(
    features: Mapping[str, Tensor], config: TaskPriorConfig | Mapping[str, Any] | None = None, **options: Any
) -> dict[str, Any]:
    """{"mean": (B, B), "var": (B, B), "names": [B labels]} (float64 tensors): row p = the backbone whose features
    give the prior's kernel K, column e = the evaluated backbone (kernel M), both on the same n images.

    ``config``: a :class:`TaskPriorConfig` or a mapping of its fields (None = the defaults), ``options`` fields
    replacing its values; its convention sets the temperature and kernel scales, ``block_size`` the tiles (memory
    only). B² calls of :func:`task_prior_moments` (each O(n² D) time, never n × n memory)."""
    names = _check_feature_map(features)
    cfg = TaskPriorConfig.coerce(config, **options)
    feats = list(features.values())
    b = len(feats)
    mean = torch.empty(b, b, dtype=torch.float64)
    var = torch.empty(b, b, dtype=torch.float64)
    for p in range(b):
        for e in range(b):
            mean[p, e], var[p, e] = task_prior_moments(
                feats[e],
                feats[p],
                block_size=cfg.block_size,
                convention=cfg.settings,
                precision=cfg.moment_precision,
                rtol=cfg.moment_rtol,
            )
    return {"mean": mean, "var": var, "names": names}


def prior_matrix_data(matrix: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON form of :func:`prior_matrix`: nested lists, rows = prior, columns = evaluated backbone."""
    return {
        "names": list(matrix["names"]),
        "rows": "prior backbone (kernel K)",
        "columns": "evaluated backbone (kernel M)",
        "mean": torch.as_tensor(matrix["mean"]).tolist(),
        "var": torch.as_tensor(matrix["var"]).tolist(),
    }


def _fmt(v: float) -> str:
    return "n/a" if not math.isfinite(v) else f"{v:.4g}"


def prior_matrix_markdown(matrix: Mapping[str, Any]) -> str:
    """Two Markdown tables (E, then Var): one row per prior backbone, one column per evaluated backbone."""
    names = list(matrix["names"])
    lines = []
    for key, title in (("mean", "E[Tr(MG)]"), ("var", "Var[Tr(MG)]")):
        values = torch.as_tensor(matrix[key]).tolist()
        lines += [f"{title}, prior (row) × evaluated backbone (column):", ""]
        lines.append("| prior \\ evaluated | " + " | ".join(names) + " |")
        lines.append("|---|" + "---:|" * len(names))
        lines += [f"| {p} | " + " | ".join(_fmt(v) for v in row) + " |" for p, row in zip(names, values)]
        lines.append("")
    return "\n".join(lines)


def prior_matrix_figure(matrix: Mapping[str, Any]) -> Any:
    """Heatmaps of E and Var (rows = prior backbone, columns = evaluated backbone), each cell annotated."""
    from matplotlib.figure import Figure

    names = list(matrix["names"])
    b = len(names)
    side = max(4.0, 0.9 * b + 2.5)
    fig = Figure(figsize=(2 * side, side), layout="constrained")
    for ax, key, title in zip(fig.subplots(1, 2), ("mean", "var"), ("E[Tr(MG)]", "Var[Tr(MG)]")):
        values = torch.as_tensor(matrix[key], dtype=torch.float64).numpy()
        im = ax.imshow(values, cmap="viridis")
        fig.colorbar(im, ax=ax, shrink=0.8)
        ax.set_xticks(range(b), names, rotation=45, ha="right", fontsize=7)
        ax.set_yticks(range(b), names, fontsize=7)
        ax.set_xlabel("evaluated backbone (M)")
        ax.set_ylabel("prior backbone (K)")
        ax.set_title(title)
        for i in range(b):
            for j in range(b):
                ax.text(j, i, _fmt(float(values[i, j])), ha="center", va="center", fontsize=6, color="w")
    fig.suptitle("Task Priors: prior × evaluated backbone (Fig. 6 of the paper)")
    return fig
