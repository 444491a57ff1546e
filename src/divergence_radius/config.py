"""``DivergenceRadiusConfig``: the sweep specification of the DivergenceRadius protocol (Liu et al., "Robustness of
Vision Foundation Models to Common Perturbations", arXiv:2604.14973, §4), with its one set of defaults.

Every entry point of the method (``robustness_sweep``, ``robustness_metrics``, ``DivergenceRadiusCallback``,
``robustness_report``, ``compare_backbones``, ``python -m src.divergence_radius``) takes ``config=`` (this class, a mapping of
its fields, or None; merged with keyword overrides once by :meth:`~src.utils.options.Options.coerce`) and reads its defaults from here; the vocabulary (perturbation names, m, mode) is validated by the
perturbation registry, :mod:`src.perturbations.registry`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ..perturbations.registry import check_m, check_mode, check_perturbation_names
from ..utils.checks import check_int
from ..utils.options import Options

__all__ = ["DivergenceRadiusConfig"]

#: seeds are mixed as 64-bit words (``src.utils.numerics.mix_seed``) and ``seed + 1`` seeds torch generators
SEED_LIMIT = 2**63


@dataclass(frozen=True)
class DivergenceRadiusConfig(Options):
    """The sweep of one DivergenceRadius run.

    perturbations: names of :data:`src.perturbations.PERTURBATIONS` (None = all nine of Table 8, stored as the tuple
      of all nine); a single name stands for a list of one.
    m: perturbed versions per image and perturbation, i.e. the parameters of each perturbation's grid (the paper's 5;
      equally spaced sampling saturates at m >= 5, Fig. 3).
    mode: "equal" (a, a + (b − a)/(m − 1), …, b; the paper's) | "random" (m uniform draws per sweep, seeded by
      (seed, perturbation name), shared by the sweep's images).
    seed: seeds the random perturbations (per chunk) and the random parameters; an integer in [0, 2^63).
    chunk_size: images per chunk, the unit of work sharded over processes; random perturbations draw from a generator
      seeded by (seed, chunk), so changing it changes the random perturbations' draws (not the equal-mode grid).
    """

    perturbations: tuple[str, ...] | None = None
    m: int = 5
    mode: str = "equal"
    seed: int = 0
    chunk_size: int = 16

    OPTIONS_BLOCK = "the divergence_radius: block of configs/divergence_radius.yaml"

    def __post_init__(self) -> None:
        checked = {
            "perturbations": check_perturbation_names(self.perturbations, "perturbations"),
            "m": check_m(self.m, "m"),
            "mode": check_mode(self.mode, "mode"),
            "seed": check_int(self.seed, "seed", 0, meaning="the seed of the random perturbations"),
            "chunk_size": check_int(self.chunk_size, "chunk_size", 1, meaning="images per chunk of the sweep"),
        }
        if checked["seed"] >= SEED_LIMIT:
            raise ValueError(
                f"seed must be an integer below 2^63 (the seed of the random perturbations), got {self.seed}"
            )
        for name, value in checked.items():
            object.__setattr__(self, name, value)  # frozen: normalised values (tuple, int) set once here

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain JSON / hparams values (perturbations as a list)."""
        out = dataclasses.asdict(self)
        out["perturbations"] = list(self.perturbations)
        return out
