"""The two conventions of the baseline scores, one row each: how the loss-data curve is made and read, and which
LogME / SFDA code runs. :func:`src.baselines.baseline_scores` (``convention=``), the report (``baselines.convention``)
and docs/baselines.md read this table.

* ``repbench`` (default): the curve of a multinomial logistic regression fitted to convergence (deterministic,
  seconds), trained on the training samples and validated on the test samples; MDL as Voita & Titov's online code;
  the exact LogME (converged evidence, α → ∞ limit) and SFDA (exact λ_max).
* ``paper``: the code behind the SynBench paper's Table 7 / Table 8 (Ko et al., ICML 2024, arXiv:2210.02989):
  reprieve's curve (:func:`src.baselines.reprieve.reprieve_curve`: its split of the training samples, its MLP,
  Adam, 4000 steps and 5 seeds per size, the mean over seeds), MDL in reprieve's convention, the authors' LogME
  (thuml/LogME, 11 fixed-point updates) and SFDA (TencentARC/SFDA, 3-step power estimate). The test samples are not
  used by the curve (reprieve validates on the last 10 % of the training samples). Cost: 200 000 MLP steps per
  backbone and budget.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType

__all__ = ["Convention", "CONVENTIONS", "check_convention"]


@dataclass(frozen=True)
class Convention:
    """One convention: ``curve`` ("logistic": :func:`~src.baselines.loss_data_curve` from the training to the test
    samples; "reprieve": :func:`~src.baselines.reprieve.reprieve_curve` on the training samples), ``mdl`` (the
    convention of :func:`~src.baselines.mdl` / :func:`~src.baselines.sdl`), ``authors`` (LogME and SFDA as their
    authors' code) and one line of ``doc``."""

    name: str
    curve: str
    mdl: str
    authors: bool
    doc: str


#: the conventions, by name (``baseline_scores(convention=...)``, the report's ``baselines.convention``)
CONVENTIONS: MappingProxyType[str, Convention] = MappingProxyType(
    {
        c.name: c
        for c in (
            Convention("repbench", "logistic", "online", False,
                       "logistic-regression curve (train → test), online MDL, exact LogME and SFDA"),
            Convention("paper", "reprieve", "reprieve", True,
                       "reprieve's MLP curve over 5 seeds on its split, reprieve's MDL, the authors' LogME and SFDA "
                       "(the SynBench paper's Table 7)"),
        )
    }
)  # fmt: skip


def check_convention(name: object, key: str = "convention") -> Convention:
    """The row of ``name``; a ValueError naming ``key``, the value and the choices otherwise."""
    if not isinstance(name, str) or name not in CONVENTIONS:
        choices = "; ".join(f"{c.name}: {c.doc}" for c in CONVENTIONS.values())
        raise ValueError(f"{key} must be one of {list(CONVENTIONS)}, got {name!r} ({choices})")
    return CONVENTIONS[name]
