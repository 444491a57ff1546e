"""``METHODS``: the three methods of RepBench, one :class:`~src.methods.spec.MethodSpec` row each — the table the
report (``python -m src.report``), model selection (:func:`src.callbacks.metric_direction`), the sweep-objective check
and the torchmetrics' direction flags loop over. A fourth method is one row: :func:`register_method` (its own
package holds its options, compare function, metric, callback and audit functions; no file here changes).

Directions (the paper's reading of each score): SynBench-Score, higher is better (Ko et al., ICML 2024,
arXiv:2210.02989; Table 7: "for LogME, SFDA, SynBench the bigger the better"); R_dr and R_cs, lower is more robust
(Liu et al., arXiv:2604.14973), and so are its depth task's clean RMSE and RMSE_p (App. E, eq. 16: a depth error);
the Task Prior's E and z = E/√Var, higher means the prior's tasks align with the representation, Var has no direction
(Patel & Balestriero, arXiv:2507.09871, Thm 2.3); mean probe accuracy over sampled tasks, higher is better. The
baselines' directions are the rows of :data:`src.baselines.BASELINES`.
"""

from __future__ import annotations

from collections.abc import Iterator

from ..divergence_radius.config import DivergenceRadiusConfig
from ..synbench.config import SynBenchConfig
from ..task_prior.config import TaskPriorConfig
from .spec import AuditPart, MethodSpec, Score

__all__ = ["METHODS", "column_direction", "descriptive_columns", "logged_score", "method", "register_method"]

_P = ".methods.audit_parts:"


def _part(name: str, *, figure_name: str = "", **fields: object) -> AuditPart:
    """A built-in audit part: its functions are ``<name>_run`` / ``_settings`` / ``_columns`` / ``_check`` (and
    ``_figure`` with a ``figure_name``) of :mod:`src.methods.audit_parts`."""
    ref = f"{_P}{name}_"
    figure = {"figure": ref + "figure", "figure_name": figure_name} if figure_name else {}
    return AuditPart(name, ref + "run", ref + "settings", ref + "columns", check=ref + "check", **figure, **fields)


SYNBENCH = MethodSpec(
    name="synbench",
    options=SynBenchConfig,
    compare_backbones=".synbench.compare:compare_backbones",
    metric=".metrics.synbench_score:SynBenchScore",
    callback=".callbacks.synbench_callback:SynBenchCallback",
    scores=(
        Score("score", True, column="synbench", doc="SynBench-Score at the first ε (eq. 3)"),
        Score("score_eps_*", True, doc="SynBench-Score at another ε"),
        Score("best_eps", None, column="synbench_best_eps", descriptive=True, doc="the ε of the best score"),
        Score("proxy_sa", True, column="synbench_sa", doc="SA of a linear probe on the proxy task (Table 1; proxy)"),
        Score("proxy_ra", True, column="synbench_ra", doc="RA of that probe under ℓ2 PGD (Table 1; proxy)"),
    ),
    audit_parts=(
        _part(
            "synbench",
            synthetic=True,
            figure_name="curves.png",
            caption="SynBench: expected scaled bound E(a_t) at ε = 0 per backbone, with the input-space reference",
        ),
        _part(
            "baselines",
            direction=".baselines.registry:baseline_direction",
            synthetic=True,
            note=_P + "cost_note",
        ),
    ),
    doc="SynBench (Ko et al., ICML 2024, arXiv:2210.02989): robustness-accuracy trade-off on class-conditional "
    "Gaussian data against the closed-form reference",
)

DIVERGENCE_RADIUS = MethodSpec(
    name="divergence_radius",
    options=DivergenceRadiusConfig,
    compare_backbones=".divergence_radius.compare:compare_backbones",
    metric=".metrics.divergence_radius:DivergenceRadius",
    callback=".callbacks.divergence_radius_callback:DivergenceRadiusCallback",
    scores=(
        Score("*", False, doc="mean R_dr (per perturbation and over all)"),
        Score(
            "*",
            False,
            family="cosine_robustness",
            metric=".metrics.divergence_radius:CosineRobustness",
            doc="mean R_cs",
        ),
        Score("r_dr_mean", False, column="r_dr_mean", doc="mean R_dr over perturbations"),
        Score("r_cs_mean", False, family="cosine_robustness", column="r_cs_mean", doc="mean R_cs over perturbations"),
        Score(
            "clean_rmse",
            False,
            family="depth",
            column="depth_rmse",
            metric=".metrics.depth:DepthRMSE",
            doc="clean RMSE of a depth head on the frozen feature map (App. D-E; the depth part)",
        ),
        Score(
            "mean_rmse_p",
            False,
            family="depth",
            column="depth_rmse_p",
            metric=".metrics.depth:DepthRMSE",
            doc="RMSE_p (App. E, eq. 16) of that head, mean over images and perturbations",
        ),
    ),
    audit_parts=(
        _part(
            "divergence_radius",
            figure_name="r_dr_by_perturbation.png",
            caption="DivergenceRadius: mean R_dr per perturbation (lower = more robust embeddings)",
        ),
        _part(  # opt-in: it fits a depth head per backbone (parts=[..., depth])
            "depth",
            figure_name="depth_rmse_p_by_perturbation.png",
            caption="DivergenceRadius depth task (App. D-F): mean RMSE_p (eq. 16, metres) of a depth head fitted on "
            "each backbone's frozen feature map, per perturbation, after the clean RMSE (lower = better)",
            default=False,
            prepare=_P + "depth_prepare",
            backbones=_P + "depth_backbones",
        ),
    ),
    audit_prepare=_P + "divergence_radius_prepare",
    doc="DivergenceRadius (Liu et al., arXiv:2604.14973): how far embeddings move under common perturbations",
)

TASK_PRIOR = MethodSpec(
    name="task_prior",
    options=TaskPriorConfig,
    compare_backbones=".task_prior.compare:compare_backbones",
    metric=".metrics.task_prior:TaskPriorMoments",
    callback=".callbacks.task_prior_callback:TaskPriorCallback",
    scores=(
        Score("mean", True, column="tp_mean", doc="E of the kernel alignment under the prior (Thm 2.3)"),
        Score("var", None, column="tp_var", doc="Var of the kernel alignment under the prior (Thm 2.3)"),
        Score("z", True, column="tp_z", doc="z = E / √Var"),
        Score(
            "acc_mean",
            True,
            column="tp_acc_mean",
            metric=".metrics.task_prior:TaskAccuracies",
            doc="mean held-out probe accuracy over sampled tasks",
        ),
        Score("acc_*", None, metric=".metrics.task_prior:TaskAccuracies", doc="spread and quantiles of it"),
        Score("*", None, doc="any other value of the family"),
    ),
    audit_parts=(
        _part(
            "task_prior",
            figure_name="task_prior_z.png",
            caption="Task Priors: z = E / √Var of the kernel alignment under the prior",
        ),
    ),
    audit_prepare=_P + "task_prior_prepare",
    module_logs=True,  # TaskPriorProbe logs val/task_prior/* itself
    doc="Task Priors (Patel & Balestriero, arXiv:2507.09871): expected kernel alignment over tasks sampled from a "
    "prior",
)

#: every method, by name, in the order the report runs and shows them
METHODS: dict[str, MethodSpec] = {m.name: m for m in (SYNBENCH, DIVERGENCE_RADIUS, TASK_PRIOR)}


def register_method(spec: MethodSpec, overwrite: bool = False) -> MethodSpec:
    """Add ``spec`` to :data:`METHODS` (a name already there is refused unless ``overwrite``)."""
    if not isinstance(spec, MethodSpec):
        raise TypeError(f"register_method takes a MethodSpec, got {type(spec).__name__}")
    if spec.name in METHODS and not overwrite:
        raise ValueError(f"a method named {spec.name!r} is already registered; pass overwrite=True to replace it")
    METHODS[spec.name] = spec
    return spec


def method(name: str) -> MethodSpec:
    """The row of ``name``; a KeyError naming the methods otherwise."""
    try:
        return METHODS[name]
    except KeyError:
        raise KeyError(f"no method {name!r}; the methods are {list(METHODS)}") from None


def _scores() -> Iterator[tuple[MethodSpec, Score]]:
    for spec in METHODS.values():
        for s in spec.scores:
            yield spec, s


def logged_score(name: str) -> tuple[MethodSpec, Score] | None:
    """The (method, score) whose value is logged under ``name`` (matched on its last two segments, any prefix:
    ``val/synbench/score`` and ``probe/synbench/score`` are both SynBench-Scores), or None."""
    parts = str(name).split("/")
    family, key = (parts[-2] if len(parts) > 1 else ""), parts[-1]
    for spec in METHODS.values():
        found = spec.score(family, key)
        if found is not None:
            return spec, found
    return None


def column_direction(column: str) -> bool | None:
    """The direction of a report column (``sdl@1`` reads ``sdl``): a method's score column, else what an audit
    part's ``direction`` says; None when no row gives one."""
    base = column.split("@")[0]
    for _, s in _scores():
        if s.column == base:
            return s.higher_is_better
    from .spec import resolve

    for spec in METHODS.values():
        for part in spec.audit_parts:
            if part.direction is not None:
                d = resolve(part.direction)(column)
                if d is not None:
                    return d
    return None


def descriptive_columns() -> tuple[str, ...]:
    """Report columns that describe a backbone but do not score it (left out of the rank agreement)."""
    return tuple(s.column for _, s in _scores() if s.descriptive and s.column)
