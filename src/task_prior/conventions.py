"""Settings conventions of the Task Prior: the paper's, the authors' code's and RepBench's (the default).

Patel & Balestriero, "Task Priors" (arXiv:2507.09871), state Thm 2.3 and Algorithm 1 on the centred kernels
themselves (no rescaling), with one temperature T (Fig. 6 uses T = 0.01) and points visited in index order. The
authors' code computes the moments on Frobenius-scaled kernels at T = 1e-5, samples labelings from the centred RAW
features (not row-normalised) in a random order at T = 500–1000, and scores each probe by its recall on the positive
class on the training set. RepBench's defaults (docs/task_prior.md, "Conventions") scale M by ‖M‖_F, keep K raw and
sample on K/‖K‖_F at T = 0.01, scoring held-out accuracy.

One owner: :class:`TaskPriorConvention` holds every setting a convention fixes, :data:`CONVENTIONS` the three
presets, and :func:`resolve_convention` turns ``convention=`` plus explicit options into the settings (an explicit
option, i.e. one that is not None, always wins).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .validation import SCALES, check_temperature

__all__ = [
    "CONVENTIONS",
    "DEFAULT_CONVENTION",
    "FACTORS",
    "ORDERS",
    "PROBE_METRICS",
    "PROBE_SPLITS",
    "SCALES",
    "TaskPriorConvention",
    "resolve_convention",
]

ORDERS = ("sequential", "random")
#: the sampler's factor Z (K = Z Zᵀ): "cosine" = H X̂ (rows ℓ2-normalised, then centred: the centred cosine kernel),
#: "raw" = H X (the features only centred: the authors' sampler)
FACTORS = ("cosine", "raw")
PROBE_METRICS = ("accuracy", "positive_recall")
PROBE_SPLITS = ("test", "train")


@dataclass(frozen=True)
class TaskPriorConvention:
    """Every setting a convention fixes.

    Moments (Thm 2.3): ``eval_scale`` / ``prior_scale`` divide M / K by their Frobenius norm (``"frobenius"``) or
    not (``"none"``); ``temperature`` is their T. Sampler (Algorithm 1): ``sampler_factor`` (``"cosine"`` | ``"raw"``),
    ``sampler_scale`` (the factor is divided by √‖ZZᵀ‖_F for ``"frobenius"``), ``sample_temperature`` and ``order``
    (``"sequential"`` | ``"random"``). Probes: ``probe_metric`` (``"accuracy"`` | ``"positive_recall"``, the recall of
    class 1 of a binary task) measured on ``probe_split`` (``"test"`` | ``"train"``).
    """

    name: str
    eval_scale: str
    prior_scale: str
    temperature: float
    sampler_factor: str
    sampler_scale: str
    sample_temperature: float
    order: str
    probe_metric: str
    probe_split: str

    def __post_init__(self) -> None:
        for field, choices in (
            ("eval_scale", SCALES),
            ("prior_scale", SCALES),
            ("sampler_factor", FACTORS),
            ("sampler_scale", SCALES),
            ("order", ORDERS),
            ("probe_metric", PROBE_METRICS),
            ("probe_split", PROBE_SPLITS),
        ):
            value = getattr(self, field)
            if value not in choices:
                raise ValueError(f"{field} must be one of {choices}, got {value!r} (convention {self.name!r})")
        for field in ("temperature", "sample_temperature"):
            object.__setattr__(self, field, check_temperature(getattr(self, field), field))


CONVENTIONS: dict[str, TaskPriorConvention] = {
    # Thm 2.3 / Algorithm 1 as written: centred cosine kernels unscaled, one T (Fig. 6: 0.01), index order
    "paper": TaskPriorConvention(
        name="paper",
        eval_scale="none",
        prior_scale="none",
        temperature=0.01,
        sampler_factor="cosine",
        sampler_scale="none",
        sample_temperature=0.01,
        order="sequential",
        probe_metric="accuracy",
        probe_split="test",
    ),
    # the authors' code: Frobenius-scaled kernels at T = 1e-5; centred raw features, random order, T = 1000 (their
    # runs use 500–1000); recall of the positive class on the training set
    "authors": TaskPriorConvention(
        name="authors",
        eval_scale="frobenius",
        prior_scale="frobenius",
        temperature=1e-5,
        sampler_factor="raw",
        sampler_scale="none",
        sample_temperature=1000.0,
        order="random",
        probe_metric="positive_recall",
        probe_split="train",
    ),
    # RepBench's defaults (docs/task_prior.md, "Scales" and "Sampler scale")
    "repbench": TaskPriorConvention(
        name="repbench",
        eval_scale="frobenius",
        prior_scale="none",
        temperature=0.01,
        sampler_factor="cosine",
        sampler_scale="frobenius",
        sample_temperature=0.01,
        order="sequential",
        probe_metric="accuracy",
        probe_split="test",
    ),
}

DEFAULT_CONVENTION = "repbench"

_FIELDS = tuple(f.name for f in dataclasses.fields(TaskPriorConvention) if f.name != "name")


def resolve_convention(convention: str | TaskPriorConvention | None = None, **options: object) -> TaskPriorConvention:
    """The settings of ``convention`` (a preset name, a :class:`TaskPriorConvention`, or None = ``"repbench"``) with
    every explicit option (keyword not None) replacing the preset's value; each value is checked.

    >>> resolve_convention("paper", eval_scale="frobenius").eval_scale
    'frobenius'
    """
    if convention is None:
        convention = DEFAULT_CONVENTION
    if isinstance(convention, TaskPriorConvention):
        base = convention
    elif isinstance(convention, str) and convention in CONVENTIONS:
        base = CONVENTIONS[convention]
    else:
        raise ValueError(
            f"convention must be one of {tuple(CONVENTIONS)}, got {convention!r}; 'paper' = Thm 2.3 and Algorithm 1 as "
            "written, 'authors' = the authors' code, 'repbench' = RepBench's defaults (docs/task_prior.md)"
        )
    unknown = sorted(set(options) - set(_FIELDS))
    if unknown:
        raise TypeError(f"unknown Task-Prior option(s) {unknown}; the options a convention sets are {list(_FIELDS)}")
    explicit = {k: v for k, v in options.items() if v is not None}
    return dataclasses.replace(base, **explicit) if explicit else base
