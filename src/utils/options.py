"""``Options``: the one way every method's options class turns user input into options.

Each method owns its numbers in one frozen dataclass (:class:`~src.synbench.SynBenchConfig`,
:class:`~src.divergence_radius.DivergenceRadiusConfig`, :class:`~src.task_prior.TaskPriorConfig`, and a new method's
own). Every entry point of a method takes ``config=`` (the class, a mapping of its fields, or None for the defaults)
plus keyword overrides whose default None means "the config's value", and merges them once, at its outer door, with
:meth:`Options.coerce`. Inner functions then receive the finished options object only.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any, TypeVar

__all__ = ["Options", "UnknownOptionError"]

T = TypeVar("T", bound="Options")


class UnknownOptionError(TypeError, ValueError):
    """An option that is not a field of the options class (a TypeError as for a bad keyword argument, and a
    ValueError as for a bad value: either ``except`` catches it)."""


class Options:
    """Mixin of a frozen dataclass of a method's options: :meth:`coerce` and :meth:`field_names`.

    ``OPTIONS_BLOCK`` (class attribute) names where a user sets these options (e.g. "the task_prior: block of
    configs/task_prior.yaml"); it appears in the error for an unknown option.
    """

    OPTIONS_BLOCK: str = ""

    @classmethod
    def field_names(cls) -> list[str]:
        """The option names, in declaration order."""
        return [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]

    @classmethod
    def coerce(cls: type[T], config: T | Mapping[str, Any] | None = None, **overrides: Any) -> T:
        """``config`` (an instance, a mapping of its fields, or None = the defaults) with the ``overrides`` that are
        not None replacing its values. An unknown field raises :class:`UnknownOptionError` listing the fields; a bad
        value raises the class's own error. An instance without overrides is returned as is."""
        if config is not None and not isinstance(config, (cls, Mapping)):
            raise TypeError(
                f"config must be a {cls.__name__}, a mapping of its fields ({', '.join(cls.field_names())}) or None, "
                f"got {type(config).__name__}"
            )
        given = {} if config is None or isinstance(config, cls) else dict(config)
        extra = {k: v for k, v in overrides.items() if v is not None}
        unknown = sorted(str(k) for k in {**given, **extra} if k not in cls.field_names())
        if unknown:
            where = f" ({cls.OPTIONS_BLOCK})" if cls.OPTIONS_BLOCK else ""
            raise UnknownOptionError(
                f"unknown {cls.__name__} option(s) {unknown}; the options{where} are {', '.join(cls.field_names())}"
            )
        if isinstance(config, cls):
            return dataclasses.replace(config, **extra) if extra else config  # type: ignore[type-var]
        return cls(**{**given, **extra})
