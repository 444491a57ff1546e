"""Comparing backbones with SynBench: run, tabulate (Markdown), plot (E(a_t) curves, score vs ε) — one
:class:`~src.utils.report_writer.Report` (``synbench.{md,csv,json}``, ``curves.png``, ``score_vs_eps.png``), the shape
every method's ``compare_backbones`` returns."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch

from ..backbones.spec import BackboneLike, backbone_labels, backbone_list, build_backbone, check_buildable
from ..utils.progress import progress_sink
from ..utils.report_writer import Report
from .config import SynBenchConfig
from .runner import SynBenchResult, synbench

__all__ = ["INPUT_SIZE_FIX", "compare_backbones", "comparison_markdown", "comparison_figures", "comparison_report"]

INPUT_SIZE_FIX = "set input_size=null for each backbone's native size, or a size such as 64"


def compare_backbones(
    backbones: Sequence[BackboneLike],
    config: SynBenchConfig | Mapping[str, Any] | None = None,
    *,
    input_size: int | None = None,
    extractor: Mapping[str, Any] | None = None,
    device: Any = "cpu",
    progress: bool | Callable[[str], None] = False,
) -> Report:
    """SynBench (Algorithm 1) of every backbone under one protocol ``config`` → a Report (``method="synbench"``,
    ``results``: {label: SynBenchResult}).

    ``backbones``: names or ``{name: ..., **create_backbone options}`` (:func:`~src.backbones.spec.backbone_list`);
    ``input_size`` None uses each backbone's native input size (the official protocol), else an integer >= 1;
    ``extractor``: options of :class:`src.features.FeatureExtractor`; ``progress``: True shows a progress bar and logs
    one line per backbone, a callable receives those lines. Every argument is checked before any backbone is built.
    """
    from ..utils.checks import check_image_size

    if input_size is not None:
        input_size = check_image_size(input_size, "input_size", INPUT_SIZE_FIX)
    specs = backbone_list(backbones)
    labels = backbone_labels(specs)
    cfg = SynBenchConfig.coerce(config)  # the one door: a SynBenchConfig, a mapping of its fields, None = official
    say = progress_sink(progress)
    check_buildable(specs)  # a missing weight file fails now, not after the first backbones ran
    results: dict[str, SynBenchResult] = {}
    for label, spec in zip(labels, specs):
        with torch.random.fork_rng(devices=[]):  # random-weight backbones: the same weights in every run of a config
            torch.manual_seed(cfg.seed)  # (the seed rule of DivergenceRadius's and the Task Prior's comparisons)
            bb = build_backbone(spec).eval().to(device)
        size = bb.input_size[-1] if input_size is None else input_size
        results[label] = synbench(
            bb.embed, input_shape=(3, size, size), config=cfg, device=device, progress=progress is True,
            extractor=extractor,
        )  # fmt: skip
        if say:
            t = results[label].timings.get("total_s", float("nan"))
            proxy = results[label].proxy
            extra = (
                ""
                if proxy is None
                else f"; proxy SA {proxy['sa']:.3f}, RA {proxy['ra']:.3f} ({proxy['seconds']:.0f} s)"
            )
            say(
                f"SynBench {label} at {size} px: score {results[label].score(cfg.eps[0]):.3f} at ε={cfg.eps[0]:g} ({t:.0f} s){extra}"
            )
        del bb
    return comparison_report(results)


def comparison_report(results: Mapping[str, SynBenchResult]) -> Report:
    """The Report of SynBench results {label: result}: rows (backbone, eps, a_T, score), the Markdown tables, the
    JSON payload {label: ``SynBenchResult.to_dict()``} (re-loadable with ``SynBenchResult.from_dict``), figures."""
    if not results:
        raise ValueError("no SynBench results to report")
    rows = [{"backbone": name, **row} for name, res in results.items() for row in res.table()]
    return Report(
        method="synbench",
        rows=rows,
        markdown=comparison_markdown(results),
        data={name: res.to_dict() for name, res in results.items()},
        results=dict(results),
        figures=lambda: comparison_figures(results),
        columns=("backbone", "eps", "a_T", "score"),
    )


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
    with_proxy = {name: res.proxy for name, res in results.items() if res.proxy is not None}
    if with_proxy:  # the paper's Table 1 columns
        p = next(iter(with_proxy.values()))
        lines = [
            f"Proxy task (the paper's Table 1): linear probe at s = {p['s']:g}, {p['n_train']} + {p['n_test']} samples; "
            f"RA under l2 PGD-{p['steps']}, eps = {p['eps']:g} ({p['space']} space)",
            "",
            "| backbone | SA | RA |",
            "|---|---:|---:|",
        ]
        lines += [f"| {name} | {v['sa']:.3f} | {v['ra']:.3f} |" for name, v in with_proxy.items()]
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
