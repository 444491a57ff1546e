"""Every baseline score as one row of :data:`BASELINES`: its name, its function, what it reads (``needs``), its
direction and one line of documentation. The proxy task (:func:`src.baselines.baseline_scores`), the report (its
columns' directions, :func:`baseline_direction`) and the torchmetrics (:mod:`src.metrics.baselines`, their
``higher_is_better``) read this table, as :data:`src.perturbations.PERTURBATIONS` is read: a new baseline is one row.

``needs`` says what a score is computed from, and so how :func:`~src.baselines.baseline_scores` calls ``fn``:

* ``"features"``: ``fn(train_z)``, the training features (n, D);
* ``"features+labels"``: ``fn(train_z, train_y)``, the training features and their labels (n,);
* ``"curve"``: ``fn(curve)``, the loss-data curve (:func:`~src.baselines.loss_data_curve`) trained on the training
  set and validated on the test set, computed once for every score that needs it (timed as ``"loss_data_curve"``).

``options``: keyword arguments ``fn`` also takes from :func:`~src.baselines.baseline_scores` — ``"eps"`` (the score
is keyed ``name@ε``, one value per ε of ``eps=``), ``"convention"`` (the MDL convention of the baselines' convention,
:data:`src.baselines.conventions.CONVENTIONS`, or ``mdl_convention=``) and ``"authors"`` (the authors' code: True
under the ``paper`` convention).
``fn`` returns a float, or a :class:`~src.baselines.Bound` whose ``lower_bound`` marks the key in ``.lower_bounds``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from types import MappingProxyType

from .logme import logme
from .loss_data import eps_sample_complexity, mdl, sdl, val_loss
from .sfda import sfda
from .spectral import alpha_req, rankme

__all__ = [
    "BASELINES",
    "BaselineSpec",
    "NEEDS",
    "OPTIONS",
    "ALL_BASELINES",
    "baseline_direction",
    "baseline_names",
    "select_baselines",
]

#: what a score reads (``BaselineSpec.needs``) -> how ``baseline_scores`` calls its ``fn``
NEEDS = MappingProxyType(
    {
        "features": "fn(train_z): the training features (n, D)",
        "features+labels": "fn(train_z, train_y): the training features and their labels",
        "curve": "fn(curve): the loss-data curve, trained on the training set and validated on the test set",
    }
)

#: keyword options a score's ``fn`` takes from ``baseline_scores`` (``BaselineSpec.options``)
OPTIONS = MappingProxyType(
    {
        "eps": "eps=ε, one key name@ε per ε of baseline_scores(eps=...)",
        "convention": "convention=the MDL convention (the baselines' convention's, or baseline_scores(mdl_convention=...))",
        "authors": "authors=True under the paper convention: the authors' code (LogME, SFDA)",
    }
)


@dataclass(frozen=True)
class BaselineSpec:
    """One baseline score: ``name`` (the key; ``name@ε`` when ``options`` has ``"eps"``), ``fn`` (called as
    :data:`NEEDS` says, with the keywords of ``options``), ``needs`` (a key of :data:`NEEDS`), ``higher_is_better``
    (True / False; None: no monotone direction) and ``doc`` (one line: what it is, the paper)."""

    name: str
    fn: Callable[..., object]
    needs: str
    higher_is_better: bool | None
    doc: str
    options: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name or "@" in self.name or "/" in self.name:
            raise ValueError(f"a baseline's name must be a non-empty string without '@' or '/', got {self.name!r}")
        if self.needs not in NEEDS:
            raise ValueError(f"baseline {self.name!r}: needs must be one of {list(NEEDS)}, got {self.needs!r}")
        if self.higher_is_better not in (True, False, None):
            raise ValueError(
                f"baseline {self.name!r}: higher_is_better must be True, False or None, got {self.higher_is_better!r}"
            )
        unknown = [o for o in self.options if o not in OPTIONS]
        if unknown:
            raise ValueError(f"baseline {self.name!r}: unknown options {unknown}; known: {list(OPTIONS)}")
        if not callable(self.fn):
            raise TypeError(f"baseline {self.name!r}: fn must be callable, got {type(self.fn).__name__}")

    @property
    def takes_eps(self) -> bool:
        """Whether the score is keyed ``name@ε``, one value per ε."""
        return "eps" in self.options


#: the baselines of Ko et al. (ICML 2024, arXiv:2210.02989, Table 7), in the order of ``baseline_scores``' keys;
#: directions as the paper reads them ("for Val loss, MDL, SDL and ε SC the smaller the better; for LogME, SFDA the
#: bigger"; RankMe: bigger; α-ReQ: best near 1, no monotone direction)
BASELINES: MappingProxyType[str, BaselineSpec] = MappingProxyType(
    {
        s.name: s
        for s in (
            BaselineSpec("logme", logme, "features+labels", True, "LogME, You et al., ICML 2021 (arXiv:2102.11005)",
                         ("authors",)),
            BaselineSpec("sfda", sfda, "features+labels", True, "SFDA, Shao et al., ECCV 2022 (arXiv:2207.03036)",
                         ("authors",)),
            BaselineSpec("rankme", rankme, "features", True, "RankMe, Garrido et al., ICML 2023 (arXiv:2210.02885)"),
            BaselineSpec("alpha_req", alpha_req, "features", None, "α-ReQ, Agrawal et al., NeurIPS 2022 (α ≈ 1 best)"),
            BaselineSpec("val_loss", val_loss, "curve", False, "validation loss, Whitney et al. (arXiv:2009.07368)"),
            BaselineSpec("mdl", mdl, "curve", False, "MDL, Voita & Titov, EMNLP 2020 (arXiv:2003.12298)",
                         ("convention",)),
            BaselineSpec("sdl", sdl, "curve", False, "surplus description length SDL_ε, Whitney et al.",
                         ("eps", "convention")),
            BaselineSpec("esc", eps_sample_complexity, "curve", False, "ε sample complexity, Whitney et al.",
                         ("eps",)),
        )
    }
)  # fmt: skip

#: the baselines' names in table order (as imported; :func:`baseline_names` reads the table when called)
ALL_BASELINES: tuple[str, ...] = tuple(BASELINES)


def baseline_names() -> tuple[str, ...]:
    """The names of :data:`BASELINES` in table order, read when called."""
    return tuple(BASELINES)


def select_baselines(which: Iterable[str] | None = None) -> tuple[BaselineSpec, ...]:
    """The rows of ``which`` (None: every row) in table order; a ValueError naming the unknown ones otherwise."""
    names = baseline_names()
    if which is None:
        which = names
    which = tuple(which)
    unknown = sorted(set(which) - set(names))
    if unknown or not which:
        raise ValueError(f"which={which!r}: unknown {unknown}; choose from {names}")
    return tuple(BASELINES[n] for n in names if n in which)


def baseline_direction(column: str) -> bool | None:
    """The direction of a baseline column (``sdl@1`` reads ``sdl``): True higher is better, False lower is better,
    None no monotone direction — or not a baseline's column (test ``column.split("@")[0] in BASELINES`` for that)."""
    spec = BASELINES.get(column.split("@")[0])
    return None if spec is None else spec.higher_is_better
