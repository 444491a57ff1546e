"""Settings conventions of the Task Prior: the paper's, the authors' code's and RepBench's (the default).

Patel & Balestriero, "Task Priors" (arXiv:2507.09871), state Thm 2.3 and Algorithm 1 on the centred kernels
themselves (no rescaling), with one temperature T (Fig. 6 uses T = 0.01) and points visited in index order. The
authors' code computes the moments on Frobenius-scaled kernels at T = 1e-5, samples labelings from the centred RAW
features (not row-normalised) in a random order at T = 500–1000, and scores each probe by its recall on the positive
class on the training set. Its probe (``examples/mieb/3_run_linear_probes.py``, ``linear_probe_multi``) is one
``nn.Linear(D, num_tasks)``: one logit per binary task, ``BCEWithLogitsLoss`` (mean over batch × tasks), Adam (lr 1e-2),
``CosineAnnealingLR(T_max=100 epochs, eta_min=1e-6)`` stepped per epoch, shuffled batches of 256, on the raw features;
trained and scored on every image. RepBench's defaults (docs/task_prior.md, "Conventions") scale M by ‖M‖_F, keep K
raw and sample on K/‖K‖_F at T = 0.01, scoring held-out accuracy of a q-way softmax probe (Adam, full batch, constant
lr) on z-scored features; the paper does not state its probe's loss, optimiser or split, so ``"paper"`` keeps
RepBench's probe.

One owner: :class:`TaskPriorConvention` holds every setting a convention fixes, :data:`CONVENTIONS` the three
presets, and :func:`resolve_convention` turns ``convention=`` plus explicit options into the settings (an explicit
option, i.e. one that is not None, always wins).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from ..utils.checks import check_int
from .validation import SCALES, check_temperature

__all__ = [
    "CONVENTIONS",
    "DEFAULT_CONVENTION",
    "COSINE_MIN_LR",
    "FACTORS",
    "ORDERS",
    "PROBE_FEATURES",
    "PROBE_HEADS",
    "PROBE_METRICS",
    "PROBE_SCHEDULES",
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
#: the probe's head and loss: "softmax" = q logits per task, mean cross-entropy per task summed over tasks;
#: "logit" = one logit per (binary) task, BCE-with-logits averaged over batch × tasks (the authors' probe)
PROBE_HEADS = ("softmax", "logit")
#: the probe's input: "standardized" = z-scored with the training rows' statistics; "raw" = the backbone's features
PROBE_FEATURES = ("standardized", "raw")
#: the probe's learning rate: "constant"; "cosine" = cosine annealing from lr to COSINE_MIN_LR over the epochs,
#: stepped once per epoch (torch's CosineAnnealingLR(T_max=epochs, eta_min=1e-6): the authors' schedule)
PROBE_SCHEDULES = ("constant", "cosine")
COSINE_MIN_LR = 1e-6


@dataclass(frozen=True)
class TaskPriorConvention:
    """Every setting a convention fixes.

    Moments (Thm 2.3): ``eval_scale`` / ``prior_scale`` divide M / K by their Frobenius norm (``"frobenius"``) or
    not (``"none"``); ``temperature`` is their T. Sampler (Algorithm 1): ``sampler_factor`` (``"cosine"`` | ``"raw"``),
    ``sampler_scale`` (the factor is divided by √‖ZZᵀ‖_F for ``"frobenius"``), ``sample_temperature`` and ``order``
    (``"sequential"`` | ``"random"``). Probes: ``probe_metric`` (``"accuracy"`` | ``"positive_recall"``, the recall of
    class 1 of a binary task) measured on ``probe_split`` (``"test"`` | ``"train"``: the images the probe trained on);
    ``probe_head`` (:data:`PROBE_HEADS`), ``probe_features`` (:data:`PROBE_FEATURES`), ``probe_batch_size`` (rows per
    Adam step, reshuffled every epoch; None = full batch, one step per epoch) and ``probe_schedule``
    (:data:`PROBE_SCHEDULES`). The epochs, lr and weight decay (Adam) are the study's (``TaskPriorConfig``: 100, 1e-2,
    0 in every convention).
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
    probe_head: str
    probe_features: str
    probe_batch_size: int | None
    probe_schedule: str

    def __post_init__(self) -> None:
        for field, choices in (
            ("eval_scale", SCALES),
            ("prior_scale", SCALES),
            ("sampler_factor", FACTORS),
            ("sampler_scale", SCALES),
            ("order", ORDERS),
            ("probe_metric", PROBE_METRICS),
            ("probe_split", PROBE_SPLITS),
            ("probe_head", PROBE_HEADS),
            ("probe_features", PROBE_FEATURES),
            ("probe_schedule", PROBE_SCHEDULES),
        ):
            value = getattr(self, field)
            if value not in choices:
                raise ValueError(f"{field} must be one of {choices}, got {value!r} (convention {self.name!r})")
        for field in ("temperature", "sample_temperature"):
            object.__setattr__(self, field, check_temperature(getattr(self, field), field))
        if self.probe_batch_size is not None:
            batch = check_int(self.probe_batch_size, "probe_batch_size", 1, meaning="None = full batch")
            object.__setattr__(self, "probe_batch_size", batch)

    @property
    def probe_options(self) -> dict[str, object]:
        """The probe settings as options of :func:`~src.task_prior.probing.evaluate_task_probes` (``standardize``)
        and :func:`~src.task_prior.probing.fit_task_probes` (``head``, ``batch_size``, ``schedule``)."""
        return {
            "standardize": self.probe_features == "standardized",
            "head": self.probe_head,
            "batch_size": self.probe_batch_size,
            "schedule": self.probe_schedule,
        }


CONVENTIONS: dict[str, TaskPriorConvention] = {
    # Thm 2.3 / Algorithm 1 as written: centred cosine kernels unscaled, one T (Fig. 6: 0.01), index order; the paper
    # states no probe loss, optimiser, schedule or split (App. D.1: "an independent linear probe on every sampled
    # task"), so its probe is RepBench's
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
        probe_head="softmax",
        probe_features="standardized",
        probe_batch_size=None,
        probe_schedule="constant",
    ),
    # the authors' code: Frobenius-scaled kernels at T = 1e-5; centred raw features, random order, T = 1000 (their
    # runs use 500–1000); recall of the positive class on the training set; their probe (3_run_linear_probes.py):
    # one BCE logit per task on the raw features, Adam, batches of 256, cosine annealing to 1e-6 over the epochs
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
        probe_head="logit",
        probe_features="raw",
        probe_batch_size=256,
        probe_schedule="cosine",
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
        probe_head="softmax",
        probe_features="standardized",
        probe_batch_size=None,
        probe_schedule="constant",
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
