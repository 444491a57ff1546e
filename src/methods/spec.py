"""The method contract: :class:`MethodSpec` (one row of :data:`src.methods.METHODS`), its :class:`Score` rows and its
:class:`AuditPart` rows.

A method is a name (the one string for its package, CLI, YAML block, log family and report file), an options class
(:class:`~src.utils.options.Options`: ``coerce(config=None, **overrides)``), ``compare_backbones``, its scores with
their directions — the one place directions live: the torchmetrics' ``higher_is_better``, model selection
(:func:`src.callbacks.metric_direction`) and the report read them here — its torchmetric and callback, and the parts
it contributes to the backbone audit (``python -m src.report``).

Everything above the method cores (the compare function, metric, callback, audit functions) is referenced lazily:
``"module:attribute"`` (a module of this package when it starts with ``.``, e.g. ``".synbench.compare:compare_backbones"``,
else an absolute module such as ``"my_project.method:compare"``) or the object itself. So the table imports no
Lightning or torchmetrics, and a method of the user's own registers without editing this package.
"""

from __future__ import annotations

import fnmatch
import importlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

__all__ = ["AuditPart", "MethodSpec", "PartContext", "Score", "resolve"]

#: the package these modules live in (``src`` in the repository, ``repbench`` installed)
_ROOT = __name__.rsplit(".", 2)[0]


def resolve(ref: Any) -> Any:
    """The object behind a lazy reference: ``"module:attribute"`` (``.``-relative to the package, or absolute), or
    ``ref`` itself when it is not a string."""
    if not isinstance(ref, str):
        return ref
    module, sep, attr = ref.partition(":")
    if not sep or not module or not attr:
        raise ValueError(f"a lazy reference looks like 'module:attribute', got {ref!r}")
    mod = importlib.import_module(_ROOT + module if module.startswith(".") else module)
    obj: Any = mod
    for part in attr.split("."):
        obj = getattr(obj, part)
    return obj


@dataclass(frozen=True)
class Score:
    """One value a method logs and reports.

    key: the last segment of the logged name (``{prefix}/{family}/{key}``); ``*`` at the end matches any suffix
      (``score_eps_*``), ``*`` alone any key of the family.
    higher_is_better: True / False; None = no monotone direction (model selection then asks for ``directions=``).
    family: the log group (the segment before the key); "" = the method's name.
    column: the report's column of this value (None = not a report column).
    descriptive: the value describes a backbone but does not score it (left out of the rank agreement).
    metric: the torchmetric that computes it, if not the method's (a lazy reference).
    """

    key: str
    higher_is_better: bool | None
    family: str = ""
    column: str | None = None
    descriptive: bool = False
    metric: Any = None
    doc: str = ""

    def __post_init__(self) -> None:
        if self.higher_is_better not in (True, False, None):
            raise ValueError(f"score {self.key!r}: higher_is_better must be True, False or None")

    def matches(self, key: str) -> bool:
        """Whether the logged key ``key`` is this score's."""
        return fnmatch.fnmatchcase(key, self.key)


@dataclass(frozen=True)
class PartContext:
    """What an audit part's functions receive besides the backbone.

    options: the method's options (for a ``synthetic`` part: at this run's seed or budget); audit: the whole
    :class:`~src.report.audit.AuditConfig`; device; data: what the method's ``audit_prepare`` returned (shared by
    every backbone: images, a prior's features, their fingerprints); label: the backbone's label (when running);
    extractor: the run's :class:`~src.features.FeatureExtractor` options of every backbone forward
    (:func:`src.features.extractor_options`; empty = its defaults)."""

    options: Any
    audit: Any
    device: Any = "cpu"
    data: Mapping[str, Any] = field(default_factory=dict)
    label: str = ""
    extractor: Mapping[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AuditPart:
    """One part of the backbone audit, run on every backbone and cached on disk by (weights, name, settings).

    name: the part's key in the results and its cache folder.
    run: ``run(backbone, ctx) -> JSON-able mapping``.
    settings: ``settings(ctx) -> JSON-able mapping``: what, besides the weights, decides the value (the cache key).
    columns: ``columns(value) -> {column: number}``: the report-table columns of one backbone's value.
    check: ``check(value)`` raises ValueError / KeyError / TypeError on a value the columns cannot read (an edited
      cache entry is then recomputed); None = any mapping.
    direction: ``direction(column) -> True | False | None`` for columns not named by the method's :class:`Score` rows
      (e.g. the baselines' ``sdl@1``); None = only those rows.
    synthetic: repeated at the audit's extra ``seeds`` and sample ``budgets`` (options with ``seed`` / ``n_train``).
    figure: ``figure({label: value}) -> matplotlib Figure`` over every backbone (None = no figure); ``figure_name``
      and ``caption`` name and describe it.
    note: ``note(results) -> str``: a sentence under the report's time table (empty = none).
    default: run by the default report (``AuditConfig.parts``); False = opt-in, named in ``parts`` (e.g. a part that
      fits a head per backbone), still one of every part the report knows (:func:`src.report.audit.all_parts`).
    prepare: ``prepare(audit_config, device, given, extractor=...) -> data``: the part's own data, run once before the
      backbones instead of the method's ``audit_prepare`` (``given``: what the caller passed for this part, by its
      name); None = the method's data.
    backbones: ``backbones(specs, audit_config)`` raises a ValueError naming the backbones the part cannot run on and
      the fix, before any work; None = every backbone.
    """

    name: str
    run: Any
    settings: Any
    columns: Any
    check: Any = None
    direction: Any = None
    synthetic: bool = False
    figure: Any = None
    figure_name: str = ""
    caption: str = ""
    note: Any = None
    default: bool = True
    prepare: Any = None
    backbones: Any = None

    def call(self, what: str, *args: Any) -> Any:
        """Resolve the function ``what`` (a field name) and call it."""
        return resolve(getattr(self, what))(*args)


@dataclass(frozen=True)
class MethodSpec:
    """One method of RepBench (a row of :data:`src.methods.METHODS`); see the module docstring.

    name: package, CLI, YAML block, log family and report-file name.
    options: the options class (an :class:`~src.utils.options.Options` dataclass).
    compare_backbones, metric, callback: lazy references (:func:`resolve`).
    scores: its :class:`Score` rows (the directions).
    audit_parts: its parts of the backbone audit, in order.
    audit_prepare: ``prepare(audit_config, device, given, extractor=...) -> data`` run once before the backbones
      (``given``: what the caller passed for this method, e.g. its images, or None; ``extractor``: the run's
      FeatureExtractor options, as :class:`PartContext`'s), or None.
    module_logs: a RepBench LightningModule logs this family itself (so a sweep objective under it needs no
      callback).
    """

    name: str
    options: type
    compare_backbones: Any
    metric: Any
    callback: Any
    scores: tuple[Score, ...]
    audit_parts: tuple[AuditPart, ...] = ()
    audit_prepare: Any = None
    module_logs: bool = False
    doc: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(
                f"a method's name must be an identifier (package, YAML block, log family), got {self.name!r}"
            )
        if not callable(getattr(self.options, "coerce", None)):
            raise TypeError(f"method {self.name!r}: options must be an Options class with coerce(config, **overrides)")

    def load(self, what: str) -> Any:
        """The object behind ``compare_backbones`` / ``metric`` / ``callback`` (imported now)."""
        return resolve(getattr(self, what))

    @property
    def families(self) -> tuple[str, ...]:
        """The log groups its scores are logged under (its name first)."""
        out = [self.name]
        out += [s.family for s in self.scores if s.family and s.family not in out]
        return tuple(out)

    def score(self, family: str, key: str) -> Score | None:
        """The :class:`Score` logged as ``.../{family}/{key}``, or None."""
        for s in self.scores:
            if (s.family or self.name) == family and s.matches(key):
                return s
        return None

    def metric_direction(self, family: str | None = None) -> bool | None:
        """The torchmetric flag ``higher_is_better`` of the metric logging ``family`` (default: the method's name): the
        common direction of the family's scores (descriptive values aside), None when they disagree or have none."""
        dirs = {
            s.higher_is_better
            for s in self.scores
            if (s.family or self.name) == (family or self.name) and not s.descriptive
        }
        return dirs.pop() if len(dirs) == 1 else None
