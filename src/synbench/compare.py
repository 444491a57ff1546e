"""Comparing backbones with SynBench: run, tabulate (Markdown), plot (E(a_t) curves, score vs ε)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .config import SynBenchConfig
from .runner import SynBenchResult, synbench

__all__ = ["INPUT_SIZE_FIX", "compare_backbones", "comparison_markdown", "comparison_figures"]

INPUT_SIZE_FIX = "set input_size=null for each backbone's native size, or a size such as 64"


def compare_backbones(
    names: Sequence[str],
    fields: Mapping[str, Any] | None = None,
    *,
    input_size: int | None = None,
    device: Any = "cpu",
    progress: bool = False,
    backbone_opts: Mapping[str, Any] | None = None,
    extractor: Mapping[str, Any] | None = None,
) -> dict[str, SynBenchResult]:
    """SynBench of every backbone (``create_backbone`` names) under one protocol ``SynBenchConfig(**fields)``.

    ``input_size`` None uses each backbone's native input size (the official protocol), else an integer >= 1 (a
    ValueError names ``input_size`` otherwise, before any backbone is built); ``extractor``: options of
    :class:`src.features.FeatureExtractor`.
    """
    from ..backbones import create_backbone
    from ..utils.digits import check_image_size

    if input_size is not None:
        input_size = check_image_size(input_size, "input_size", INPUT_SIZE_FIX)
    if isinstance(names, str) or not names:
        raise ValueError(f"backbones must be a non-empty list of backbone names, got {names!r}")
    cfg = SynBenchConfig(**dict(fields or {}))
    results: dict[str, SynBenchResult] = {}
    for name in names:
        bb = create_backbone(name, **dict(backbone_opts or {})).eval().to(device)
        size = bb.input_size[-1] if input_size is None else input_size
        results[name] = synbench(
            bb.embed, input_shape=(3, size, size), config=cfg, device=device, progress=progress, extractor=extractor
        )
        del bb
    return results


def comparison_markdown(results: Mapping[str, SynBenchResult]) -> str:
    """One table per a_T: a row per backbone, a column per ε; the best ε of each row in bold."""
    first = next(iter(results.values()))
    eps, a_ts = first.eps, first.config.a_T
    parts = []
    for a_t in a_ts:
        lines = [
            f"SynBench-Score, a_T = {a_t:g} ({first.config.integral} integral, {first.config.eps_mode} eps)",
            "",
            "| backbone | " + " | ".join(f"ε={e:g}" for e in eps) + " | best ε |",
            "|---|" + "---:|" * (len(eps) + 1),
        ]
        for name, res in results.items():
            scores = [res.score(e, a_t) for e in eps]
            best = max(range(len(eps)), key=lambda j: scores[j])
            cells = [f"**{v:.3f}**" if j == best else f"{v:.3f}" for j, v in enumerate(scores)]
            lines.append(f"| {name} | " + " | ".join(cells) + f" | {eps[best]:g} |")
        parts.append("\n".join(lines))
    return "\n\n".join(parts) + "\n"


def comparison_figures(results: Mapping[str, SynBenchResult]) -> dict[str, Any]:
    """{"curves.png": E(a_t) at ε = eps[0] per backbone + reference; "score_vs_eps.png": score vs ε per a_T[0]}."""
    from matplotlib.figure import Figure

    first = next(iter(results.values()))
    fig = Figure(figsize=(5.5, 4))
    ax = fig.add_subplot()
    ref = first.curves()
    ax.plot(ref["a_t"], ref["reference"], "k-", lw=2, label="reference (input space)")
    for name, res in results.items():
        c = res.curves()
        ax.plot(c["a_t"], c["eps"][res.eps[0]], label=f"{name}, ε={res.eps[0]:g}")
    ax.set_xlabel("threshold accuracy $a_t$")
    ax.set_ylabel("expected scaled bound $E(a_t)$")
    ax.legend(fontsize=7)
    ax.set_title("SynBench: robustness-accuracy curves")
    fig2 = Figure(figsize=(5.5, 4))
    ax2 = fig2.add_subplot()
    a_t = first.config.a_T[0]
    for name, res in results.items():
        ax2.plot(res.eps, [res.score(e, a_t) for e in res.eps], marker="o", label=name)
    ax2.set_xlabel("ε (relative)")
    ax2.set_ylabel(f"SynBench-Score (a_T={a_t:g})")
    ax2.legend(fontsize=7)
    ax2.set_title("SynBench-Score vs ε")
    return {"curves.png": fig, "score_vs_eps.png": fig2}
