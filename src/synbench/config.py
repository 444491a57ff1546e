"""SynBenchConfig: every SynBench convention as a field. Defaults reproduce the official implementation
(IBM/synbench ``evaluate_synbench.py``) where it differs from the paper text - see docs/synbench.md."""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Iterable
from dataclasses import asdict, dataclass, fields
from types import MappingProxyType
from typing import Any

from ..utils.checks import check_int
from ..utils.options import Options

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)
GRID_START = 0.6  # start of the official threshold grid linspace(0.6, 1, 100) (src.synbench.score.official_grid)


def official_s_values() -> tuple[float, ...]:
    """np.arange(0.1, 5.0, 0.1) of the official code, without float drift: 0.1, 0.2, …, 4.9 (49 values).
    (The paper text says s ~ U{0.1, …, 5}, 50 values.)"""
    return tuple(round(k * 0.1, 10) for k in range(1, 50))


def _default_eps() -> tuple[float, ...]:
    return tuple(round(k * 0.1, 10) for k in range(9))  # 0, 0.1, …, 0.8: paper Fig. 3 and Table 6


def _real_tuple(values: Any, name: str) -> tuple[float, ...]:
    """``values`` (a list of numbers) as floats; a TypeError naming the field for a string, a bool or a non-list."""
    if isinstance(values, (str, bytes)) or not isinstance(values, Iterable):
        raise TypeError(f"{name} must be a list of numbers, got {values!r} ({type(values).__name__})")
    values = tuple(values)
    bad = [v for v in values if isinstance(v, bool) or not isinstance(v, numbers.Real)]
    if bad:
        raise TypeError(f"{name} must hold numbers only, got {bad[0]!r} ({type(bad[0]).__name__}) in {list(values)}")
    return tuple(float(v) for v in values)


@dataclass(frozen=True)
class SynBenchConfig(Options):
    """Protocol of one SynBench run (ICML 2024 paper, Algorithm 1).

    s_values: separations s (μ̃ = s·1/√d); n_train / n_test: samples per s (official 2048 + 2048).
    eps: ε grid (0 … 0.8, paper Fig. 3 / Table 6); eps_mode: "relative" (official, ‖z‖ ≤ ε‖μ̃‖) | "absolute".
    a_T: threshold accuracies reported by :meth:`SynBenchResult.table` (paper: 0.7 … 0.9; 0.7 headline). With
      the "grid" integral a_T must be ≥ 0.6, the grid's start (below it every a_T would give the a_T = 0.6 score).
    integral: "grid" (official Riemann sum on linspace(0.6, 1, 100)) | "exact" (any a_T in [0.5, 1)).
    norm: "l2" | "linf" (ε-ball of the robust classifier, Appendix A.5).
    mean_offset: pixel mean 0.5 (μ̄ of Algorithm 1 line 8 in the official per-pixel form).
    normalization: what the network sees - "imagenet" (official: (x − ImageNet mean)/ImageNet std),
      "backbone" (the feature function's own normalisation of the pixel images) or "none" (raw pixels);
      see :func:`src.synbench.runner.pixel_transform`. "imagenet" needs samples (3, H, W); "backbone" and "none"
      take any input shape (flat vectors (d,) included, :func:`src.synbench.plan.check_normalization_shape`).
    covariance: "identity" (Gaussian-I) | "banded" (Gaussian-H, §4.4; ``band`` = (c₀, c₁, c₂, c₃) is the
      per-channel Toeplitz band over flattened H·W pixels - the paper does not publish its values; ours).
    class_prior: τ = P(y = 1). prior_correction: False (official: classifier without prior threshold, Theorem
      3.1 reference - exact for every τ) | True (eq. 5 threshold q/2 and Theorem A.3 reference).
    seed; batch_size (forward batch); chunk_size (sampling chunk: changing it changes the samples).
    cov_divisor: "n-2" (official) | "n-1" (paper) | "n"; eig_tol ≥ 0: covariance eigenvalues ≤ the cut-off are
      dropped (pseudo-inverse); eig_tol_mode: "absolute" (official: cut-off = eig_tol = 1e-6, depends on the
      feature scale; refused with a ValueError naming the fix when it would drop more than 1 % of the feature
      variance) | "relative" (cut-off = eig_tol·λ_max, scale-invariant; warns beyond 1 %).
    sample_on_device: deprecated, no effect (True warns). Samples are always drawn on the feature device from
      counter-based Philox streams that give the same numbers on every device (src/synbench/sampling.py).
    linalg_threads: torch CPU threads for everything except ``feature_fn`` (sampling, statistics, eigh, ε
      solves; forwards keep the caller's setting). 1 (default) is robust on busy CPUs, None leaves torch's
      setting; see :func:`src.synbench.bayes.torch_threads`.
    """

    s_values: tuple[float, ...] = official_s_values()
    n_train: int = 2048
    n_test: int = 2048
    eps: tuple[float, ...] = _default_eps()
    a_T: tuple[float, ...] = (0.7, 0.75, 0.8, 0.85, 0.9)
    eps_mode: str = "relative"
    integral: str = "grid"
    norm: str = "l2"
    mean_offset: float = 0.5
    normalization: str = "imagenet"
    covariance: str = "identity"
    band: tuple[float, ...] = (1.0, 0.5, 0.25, 0.125)
    class_prior: float = 0.5
    prior_correction: bool = False
    seed: int = 0
    # batch_size: FORWARD_BATCH of src/features/extractor.py, written out: this module imports no torch (a test checks)
    batch_size: int = 256
    chunk_size: int = 256
    cov_divisor: str = "n-2"
    eig_tol: float = 1e-6
    eig_tol_mode: str = "absolute"
    sample_on_device: bool = False
    linalg_threads: int | None = 1

    OPTIONS_BLOCK = "the synbench: block of configs/synbench.yaml"

    def __post_init__(self) -> None:
        # types first, so that a string (a Hydra override such as synbench.n_train=abc) is named, not compared
        for name, minimum in (("n_train", 4), ("n_test", 1), ("seed", 0), ("batch_size", 1), ("chunk_size", 1)):
            object.__setattr__(self, name, check_int(getattr(self, name), name, minimum))
        if self.linalg_threads is not None:
            object.__setattr__(self, "linalg_threads", check_int(self.linalg_threads, "linalg_threads", 1))
        for name in ("s_values", "eps", "a_T", "band"):
            object.__setattr__(self, name, _real_tuple(getattr(self, name), name))
        for name in ("mean_offset", "class_prior"):
            object.__setattr__(self, name, _real_tuple((getattr(self, name),), name)[0])
        if not self.s_values or any(not (math.isfinite(s) and s > 0) for s in self.s_values):
            raise ValueError(f"s_values must be a non-empty list of finite s > 0, got {self.s_values}")
        if len(set(self.s_values)) != len(self.s_values):
            raise ValueError("s_values must be distinct")
        from .bayes import check_eps  # local: keep config importable on its own

        check_eps(self.eps, self.eps_mode)
        if not self.a_T or any(not 0.5 <= a < 1.0 for a in self.a_T):
            raise ValueError(f"a_T values must lie in [0.5, 1), got {self.a_T}")
        if self.integral == "grid" and any(a < GRID_START for a in self.a_T):
            raise ValueError(
                f"a_T = {min(self.a_T)} lies below the grid integral's start {GRID_START} (official "
                "linspace(0.6, 1, 100)), which would silently give the a_T = 0.6 score; use a_T >= 0.6 or "
                "integral='exact'"
            )
        from .bayes import check_eig_tol

        check_eig_tol(self.eig_tol, self.eig_tol_mode)
        choices = {
            "integral": ("grid", "exact"),
            "norm": ("l2", "linf"),
            "normalization": ("imagenet", "backbone", "none"),
            "covariance": ("identity", "banded"),
            "cov_divisor": ("n-2", "n-1", "n"),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {getattr(self, name)!r}")
        if not 0.0 < self.class_prior < 1.0:
            raise ValueError(f"class_prior must lie in (0, 1), got {self.class_prior}")
        if self.sample_on_device:
            warnings.warn(
                "SynBenchConfig(sample_on_device=True) is deprecated and has no effect: samples are always drawn on "
                "the feature device, identical on CPU and GPU (Philox streams); drop the option",
                DeprecationWarning,
                stacklevel=3,
            )

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable dict (tuples become lists)."""
        return {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SynBenchConfig:
        names = {f.name for f in fields(cls)}
        unknown = set(d) - names
        if unknown:
            raise ValueError(f"unknown SynBenchConfig fields: {sorted(unknown)}")
        return cls(**d)

    @classmethod
    def budget(cls, name: str, **overrides: Any) -> SynBenchConfig:
        """The named budget ``name`` of :data:`SYNBENCH_BUDGETS` with the ``overrides`` that are not None (as
        :meth:`coerce`): ``SynBenchConfig.budget("report", n_train=8192)``."""
        return cls.coerce(synbench_budget(name), **overrides)


#: The named SynBench budgets: the SynBenchConfig fields each sets over the defaults (tuples; the rest are the
#: ``SynBenchConfig()`` defaults). Each budget is stated here only; its users read it (:meth:`SynBenchConfig.budget`,
#: :func:`synbench_budget`); the YAML blocks that repeat one for Hydra say so, and tests check they are equal.
#: The image side is not a protocol field: each user states its own (quoted in the comments).
SYNBENCH_BUDGETS: MappingProxyType[str, MappingProxyType[str, Any]] = MappingProxyType(
    {
        # the official protocol (IBM/synbench evaluate_synbench.py): 49 s values x (2048 + 2048) samples per s, at
        # each backbone's native input size; about an hour per backbone on 2 CPU cores (python -m src.synbench
        # full=true, python -m src.report full=true)
        "official": MappingProxyType({}),
        # python -m src.synbench (full=false, configs/synbench.yaml budget: cpu): 9 s values x (2048 + 1024) at
        # 64 px, the synbench: block's epsilon grid and a_T on top; efficientnet-lite0/1/2 in a few minutes on 2 cores
        "cpu": MappingProxyType(
            {"s_values": (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5), "n_train": 2048, "n_test": 1024}
        ),
        # python -m src.report (full=false): the cpu samples with 3 epsilons, at 32 px; a few seconds per backbone on
        # 2 CPU cores (also the baselines' proxy task: n_train + n_test samples at one s)
        "report": MappingProxyType(
            {
                "s_values": (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5),
                "n_train": 2048,
                "n_test": 1024,
                "eps": (0.0, 0.2, 0.4),
            }
        ),
        # SynBenchCallback's default, every epoch of a training run (configs/callbacks/synbench.yaml config:), at
        # 32 px: 6 s values x (2048 + 512) = 15,360 images, 2.8 s per call on a training resnet10t on 2 CPU cores
        # (docs/monitoring.md, Cost). The network sees the samples normalised as its training images ("backbone",
        # not the official "imagenet"); a relative eigenvalue cut-off, since a monitor must not stop a run whose
        # features shrink (the official absolute 1e-6 refuses once it would drop > 1 % of the feature variance)
        "callback": MappingProxyType(
            {
                "s_values": (0.5, 1.0, 1.5, 2.0, 3.0, 4.0),
                "n_train": 2048,
                "n_test": 512,
                "eps": (0.0, 0.2, 0.4, 0.6, 0.8),
                "a_T": (0.7,),
                "normalization": "backbone",
                "eig_tol_mode": "relative",
            }
        ),
        # python -m src.monitor_study and experiment=monitor_pretraining / monitor_simclr (the callback's config at
        # 32 px, SynBenchCallback's input_size): 4 s values x (512 + 256) = 3,072 images per epoch, one epsilon;
        # a_T = 0.6, the grid integral's lowest: a small net at 32 px keeps little of the Gaussian mean signal, so
        # higher thresholds leave the score at 0 for every model
        "monitor": MappingProxyType(
            {
                "s_values": (1.0, 2.0, 3.0, 4.0),
                "n_train": 512,
                "n_test": 256,
                "eps": (0.0,),
                "a_T": (0.6,),
                "normalization": "backbone",
                "eig_tol_mode": "relative",
            }
        ),
        # epsilon=auto of RobustLinearProbe (src/models/auto_epsilon.py), once in setup, at 64 px: the callback's
        # samples and epsilon grid with the official normalisation and cut-off, 6 s values x (2048 + 512) = 15,360
        # images. a_T in order: the paper's 0.7 first; where every score is 0 there, 0.6 decides (lite0 at 64 px
        # scores 0 at 0.7 (eps = 0: held-out robust accuracy 0.523 +- 0.012 over 3 seeds) and picks eps = 0.2 at
        # 0.6 (0.670 +- 0.011; the labelled sweep 0.653 +- 0.017): benchmarks/epsilon_auto.py)
        "auto_epsilon": MappingProxyType(
            {
                "s_values": (0.5, 1.0, 1.5, 2.0, 3.0, 4.0),
                "n_train": 2048,
                "n_test": 512,
                "eps": (0.0, 0.2, 0.4, 0.6, 0.8),
                "a_T": (0.7, 0.6),
            }
        ),
    }
)


def synbench_budget(name: str) -> dict[str, Any]:
    """A fresh dict of the fields of budget ``name`` (:data:`SYNBENCH_BUDGETS`), lists for tuples as YAML writes
    them; a ValueError naming the budgets otherwise."""
    if not isinstance(name, str) or name not in SYNBENCH_BUDGETS:
        raise ValueError(f"unknown SynBench budget {name!r}; the budgets are {', '.join(SYNBENCH_BUDGETS)}")
    return {k: list(v) if isinstance(v, tuple) else v for k, v in SYNBENCH_BUDGETS[name].items()}
