"""SynBenchConfig: every SynBench convention as a field. Defaults reproduce the official implementation
(IBM/synbench ``evaluate_synbench.py``) where it differs from the paper text - see docs/synbench.md."""

from __future__ import annotations

import math
import numbers
import warnings
from collections.abc import Iterable, Mapping
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


#: spaces of the proxy task's attack: "gaussian" (SynBench's data space, where the samples are drawn) | "input" (what
#: the network sees after SynBench's normalisation)
PROXY_SPACES = ("gaussian", "input")


@dataclass(frozen=True)
class ProxyAccuracy:
    """Table 1 of the paper: standard and robust accuracy (SA / RA) of a linear probe on the synthetic proxy task
    (:func:`src.synbench.proxy.proxy_accuracy`; docs/synbench.md, "Proxy-task SA / RA").

    s: the separation of the proxy task, class means mean_offset ± s/√d (the paper does not say which; 3.0 is the
      smallest round s whose input-space Bayes accuracy Φ(s) = 99.87 % is above every SA of Table 1 (99.8 % at most),
      and it lies on the s grid of every named budget, so the probe trains on samples SynBench itself draws).
    eps: ℓ2 radius of the PGD attack (the paper's "attack strength 0.2"), in ``space``.
    steps: PGD steps (step size 2.5·eps/steps, Madry et al.; no random start, so a linear model's worst case is
      reached exactly after ceil(steps/2.5) steps); the paper does not give its steps.
    space: "gaussian" (default: the ball lies in SynBench's data space, where the samples are N(μ, Σ), converted to
      pixels through SynBench's per-channel pixel transform) | "input" (the ball lies in what the network sees after
      SynBench's normalisation, e.g. ImageNet-normalised values under normalization="imagenet").
    C: inverse L2 strength of the logistic-regression probe on standardised features (the report's downstream probe).
    n_train, n_test: samples of the proxy task (None = the config's n_train / n_test; chunk seeds as SynBench's, so
      the samples at an s of the grid are SynBench's own); batch_size: test samples per PGD batch.
    """

    s: float = 3.0
    eps: float = 0.2
    steps: int = 10
    space: str = "gaussian"
    C: float = 1.0
    n_train: int | None = None
    n_test: int | None = None
    batch_size: int = 128

    def __post_init__(self) -> None:
        for name in ("s", "eps", "C"):
            value = _real_tuple((getattr(self, name),), f"proxy.{name}")[0]
            if not math.isfinite(value) or value < 0 or (name != "eps" and value == 0):
                bound = ">= 0" if name == "eps" else "> 0"
                raise ValueError(f"proxy.{name} must be a finite number {bound}, got {getattr(self, name)!r}")
            object.__setattr__(self, name, value)
        object.__setattr__(self, "steps", check_int(self.steps, "proxy.steps", 1))
        object.__setattr__(self, "batch_size", check_int(self.batch_size, "proxy.batch_size", 1))
        for name, minimum in (("n_train", 4), ("n_test", 1)):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, check_int(getattr(self, name), f"proxy.{name}", minimum))
        if self.space not in PROXY_SPACES:
            raise ValueError(f"proxy.space must be one of {PROXY_SPACES}, got {self.space!r}")

    @classmethod
    def from_option(cls, value: Any) -> ProxyAccuracy | None:
        """``value`` as the ``proxy`` field takes it: None / False = off, True = the defaults, a mapping of the
        fields (``{}`` = the defaults; Hydra: ``synbench.proxy={s: 2.5}``) or a ProxyAccuracy."""
        if value is None or value is False:
            return None
        if value is True:
            return cls()
        if isinstance(value, cls):
            return value
        if not isinstance(value, Mapping):
            raise TypeError(
                f"proxy must be null, true or a mapping of {cls.__name__} fields, got {type(value).__name__}"
            )
        names = [f.name for f in fields(cls)]
        unknown = sorted(str(k) for k in value if k not in names)
        if unknown:
            raise ValueError(f"proxy: unknown field(s) {unknown}; the fields are {', '.join(names)}")
        return cls(**{k: v for k, v in value.items() if v is not None})


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
    proxy: None (default, off) or a :class:`ProxyAccuracy` (a mapping of its fields, True = its defaults): the
      paper's Table 1 SA / RA of a linear probe on the proxy task at one s, computed by :func:`synbench` (and so by
      ``python -m src.synbench`` and the report); the torchmetric and the callback refuse it.
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
    proxy: ProxyAccuracy | None = None

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
        object.__setattr__(self, "proxy", ProxyAccuracy.from_option(self.proxy))
        if self.sample_on_device:
            warnings.warn(
                "SynBenchConfig(sample_on_device=True) is deprecated and has no effect: samples are always drawn on "
                "the feature device, identical on CPU and GPU (Philox streams); drop the option",
                DeprecationWarning,
                stacklevel=3,
            )

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable dict (tuples become lists; ``proxy`` only when set, so a result without it reads as
        before the field existed)."""
        out = {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self).items()}
        if out["proxy"] is None:
            del out["proxy"]
        return out

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
