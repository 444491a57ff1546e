"""Every option of the Task-Prior probe study and of its moments, with its one default (Patel & Balestriero, "Task
Priors", arXiv:2507.09871, Thm 2.3, Algorithm 1, App. D.1).

:class:`TaskPriorConfig` is what ``compare_backbones``/``compare_features``, the ``task_prior:`` block of
``configs/task_prior.yaml``, :class:`~src.models.TaskPriorProbe` and :class:`~src.callbacks.TaskPriorCallback` take their
defaults from. The convention-dependent settings (temperatures, scales, order, probe score) default to None = the
value of ``convention`` (:mod:`src.task_prior.conventions` owns those values); :attr:`TaskPriorConfig.settings` is the
resolved :class:`~src.task_prior.conventions.TaskPriorConvention`. Every field is checked in ``__post_init__`` by the
validators of :mod:`src.task_prior.validation`, naming the field and the fix.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from ..backbones.spec import check_backbone_spec
from ..utils.checks import check_fraction, check_int, check_nonnegative, check_positive
from ..utils.options import Options
from .conventions import DEFAULT_CONVENTION, TaskPriorConvention, resolve_convention
from .moments import DEFAULT_BLOCK_SIZE, DEFAULT_RTOL
from .probing import DEFAULT_QUANTILES
from .validation import check_moment_precision, check_quantiles

__all__ = ["CONVENTION_OPTIONS", "TaskPriorConfig"]

#: the options of a convention that a config (or a module) may override; None = the convention's value
CONVENTION_OPTIONS = (
    "sample_temperature",
    "temperature",
    "order",
    "eval_scale",
    "prior_scale",
    "sampler_scale",
    "probe_metric",
    "probe_split",
)


@dataclass(frozen=True)
class TaskPriorConfig(Options):
    """The Task-Prior probe study's protocol.

    Labelings: ``num_tasks`` labelings with ``task_classes`` (q >= 2) classes drawn from the Task Prior of
    ``prior_backbone``'s centred cosine kernel K (prefix sampler, Algorithm 1), seeded by ``seed``.
    ``convention``: ``"paper"`` | ``"authors"`` | ``"repbench"`` (default), the preset of the settings below
    (docs/task_prior.md, "Conventions"); each of ``sample_temperature``, ``temperature``, ``order``, ``eval_scale``,
    ``prior_scale``, ``sampler_scale``, ``probe_metric``, ``probe_split`` left at None takes the preset's value, an
    explicit value wins.
    Probes: one linear probe per task, trained with Adam for ``epochs`` epochs (``lr``, ``weight_decay``) — head, input
    features, batch and lr schedule are the convention's (``repbench``, ``paper``: q-way softmax on z-scored features,
    full batch, constant lr; ``authors``: one BCE logit on the raw features, batches of 256, cosine annealing to
    1e-6) — on a seeded split holding out ``test_fraction`` of the images (with ``probe_split="train"``: on every
    image); summarised by the ``quantiles`` of the per-task scores. Moments (Thm 2.3): tiled in row blocks of ``block_size`` (memory, not the result); products in
    ``moment_precision`` ("float64" exact; "float32"; "auto": float32 per kernel where its derived error bound is <=
    ``moment_rtol``, see :func:`src.task_prior.moments.float32_error_bounds`).
    """

    num_tasks: int = 32
    task_classes: int = 2
    convention: str = DEFAULT_CONVENTION
    sample_temperature: float | None = None
    temperature: float | None = None
    order: str | None = None
    eval_scale: str | None = None
    prior_scale: str | None = None
    sampler_scale: str | None = None
    probe_metric: str | None = None
    probe_split: str | None = None
    test_fraction: float = 0.3
    epochs: int = 100
    lr: float = 1e-2
    weight_decay: float = 0.0
    quantiles: tuple[float, ...] = DEFAULT_QUANTILES
    seed: int = 0
    prior_backbone: Any = "embedded:efficientnet_lite2"
    block_size: int = DEFAULT_BLOCK_SIZE
    moment_precision: str = "float64"
    moment_rtol: float = DEFAULT_RTOL

    OPTIONS_BLOCK = "the task_prior: block of configs/task_prior.yaml"

    def __post_init__(self) -> None:
        checked = {
            "num_tasks": check_int(self.num_tasks, "num_tasks", 1),
            "task_classes": check_int(self.task_classes, "task_classes", 2),
            "test_fraction": check_fraction(self.test_fraction, "test_fraction"),
            "epochs": check_int(self.epochs, "epochs", 1),
            "lr": check_positive(self.lr, "lr", "e.g. lr=0.01"),
            "weight_decay": check_nonnegative(self.weight_decay, "weight_decay"),
            "quantiles": check_quantiles(self.quantiles),
            "seed": check_int(self.seed, "seed", 0),
            "block_size": check_int(self.block_size, "block_size", 1),
            "moment_precision": check_moment_precision(self.moment_precision, "moment_precision"),
            "moment_rtol": check_positive(self.moment_rtol, "moment_rtol", "e.g. moment_rtol=1e-4"),
            "prior_backbone": check_backbone_spec(self.prior_backbone, "prior_backbone"),
        }
        for name, value in checked.items():
            object.__setattr__(self, name, value)
        settings = self.settings  # the convention and every override, checked (conventions.py)
        if settings.probe_head == "logit" and self.task_classes != 2:
            raise ValueError(
                f"convention {settings.name!r} trains one BCE logit per task (the authors' probe, binary tasks), but "
                f"task_classes={self.task_classes}; use task_classes=2, or convention=repbench / paper (q-way softmax)"
            )
        for name in ("sample_temperature", "temperature"):  # an explicit T as a float (e.g. an int from YAML)
            if getattr(self, name) is not None:
                object.__setattr__(self, name, getattr(settings, name))

    @cached_property
    def settings(self) -> TaskPriorConvention:
        """The resolved settings: ``convention``'s preset with every explicit (not None) override."""
        return resolve_convention(self.convention, **{k: getattr(self, k) for k in CONVENTION_OPTIONS})

    def sample_labels(self, prior_features: Any) -> Any:
        """The ``num_tasks`` sampled labelings (num_tasks, n) of the study from the prior's features — Algorithm 1 with
        this config's settings and a generator seeded by ``seed``: the one seed rule of the tasks, shared by
        :func:`~src.task_prior.compare.compare_features` and :class:`~src.models.TaskPriorProbe`."""
        import torch

        from .sampler import sample_task_labels

        return sample_task_labels(
            prior_features,
            self.task_classes,
            num_tasks=self.num_tasks,
            generator=torch.Generator().manual_seed(self.seed),
            convention=self.settings,
        )

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain JSON-ready values (tuples as lists, a Backbone as its name)."""
        from ..backbones.spec import backbone_spec

        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["quantiles"] = list(self.quantiles)
        out["prior_backbone"] = backbone_spec(self.prior_backbone)
        if isinstance(self.convention, TaskPriorConvention):
            out["convention"] = dataclasses.asdict(self.convention)
        return out
