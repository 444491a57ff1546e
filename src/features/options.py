"""The feature-extraction options of a run: an ``extractor:`` config block (``configs/run_options/default.yaml``, the
group every comparison CLI composes: ``python -m src.synbench | src.divergence_radius | src.task_prior | src.report``)
as checked :class:`~src.features.FeatureExtractor` keyword options, the one door from a config to the extractor."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..utils.checks import check_int
from .formats import MEMORY_FORMATS
from .precision import DEFAULT_PRECISION, check_precision

__all__ = ["EXTRACTOR_OPTIONS", "extractor_options"]

#: the keys of an ``extractor:`` block (FeatureExtractor keyword options; ``autocast``: deprecated alias of precision)
EXTRACTOR_OPTIONS = ("max_batch", "memory_format", "compile", "precision", "autocast")


def extractor_options(block: Mapping[str, Any] | None = None, *, key: str = "extractor") -> dict[str, Any]:
    """The :class:`~src.features.FeatureExtractor` keyword options of an ``extractor:`` block, checked before any
    backbone is built; each error names ``<key>.<option>``, the value and what is allowed.

    Only what differs from the extractor's defaults comes back (``{}`` for the defaults, so a run with them builds
    exactly the extractor it built before): null entries are dropped, and so are ``memory_format: auto``,
    ``compile: false`` and ``precision: tf32``; ``max_batch`` is kept whenever it is given (null = the caller's
    forward batch: FORWARD_BATCH = 256, SynBench's ``batch_size``); the deprecated ``autocast`` comes back as
    ``precision`` (a DeprecationWarning)."""
    given = dict(block or {})
    unknown = sorted(str(k) for k in given if k not in EXTRACTOR_OPTIONS)
    if unknown:
        raise ValueError(
            f"{key}: unknown option(s) {unknown}; the options are {list(EXTRACTOR_OPTIONS)} (src.features.FeatureExtractor, "
            "configs/run_options/default.yaml)"
        )
    out: dict[str, Any] = {}
    if given.get("max_batch") is not None:
        out["max_batch"] = check_int(given["max_batch"], f"{key}.max_batch", 1, fix=f"e.g. {key}.max_batch=256")
    fmt = given.get("memory_format")
    if fmt is not None and fmt not in MEMORY_FORMATS:
        raise ValueError(f"{key}.memory_format must be one of {list(MEMORY_FORMATS)}, got {fmt!r}")
    if fmt not in (None, "auto"):
        out["memory_format"] = fmt
    comp = given.get("compile")
    if comp is not None and not isinstance(comp, bool):
        raise ValueError(f"{key}.compile must be true or false, got {comp!r}")
    if comp:
        out["compile"] = True
    try:
        precision = check_precision(given.get("precision"), given.get("autocast"))
    except ValueError as err:
        raise ValueError(f"{key}.precision / {key}.autocast: {err}") from None
    if precision != DEFAULT_PRECISION:
        out["precision"] = precision
    return out
