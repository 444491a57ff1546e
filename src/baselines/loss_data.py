"""Loss-data-curve baselines: validation loss, online MDL (Voita & Titov, "Information-Theoretic Probing with Minimum
Description Length", EMNLP 2020, arXiv:2003.12298), surplus description length SDL_ε and ε sample complexity ε-SC
(Whitney et al., "Evaluating representations by the complexity of learning low-loss predictors",
arXiv:2009.07368). Lower is better for all four.

The curve: a probe is trained on the first n_1 < n_2 < … < n_S = n samples of ONE random permutation of the
training set (nested subsets, ``seed``) and its mean cross-entropy on a fixed validation set is L(n_i).

Probe (default :func:`fit_logistic`): multinomial logistic regression (linear, with bias), L2 penalty
``l2``/2·(‖W‖² + ‖b‖²) on the mean cross-entropy, fitted to convergence by full-batch L-BFGS in float64 — a
strictly convex problem, so the fit does not depend on the optimiser's path (deterministic given the subset). The
reprieve default (willwhitney/reprieve ``LossDataEstimator``) is different: an MLP trained by Adam for 5000
minibatch steps of 256, averaged over 5 seeds; ours is the linear probe the SynBench protocol itself uses (a
linear classifier), and it takes seconds instead of hours. Inputs are whitened as reprieve's ``whiten=True``: one
scalar mean and one scalar standard deviation over all entries of the full training set.

Units: nats by default (reprieve's losses are natural-log cross-entropies, the units of the SynBench paper's
Table 7); ``units="bits"`` divides by log 2 (Voita & Titov report bits).

Codes from the curve, with n_0 = 0 and C classes:

* ``convention="online"`` (default, Voita & Titov's online code): the first block is coded uniformly, block
  (n_i, n_{i+1}] with the probe trained on the first n_i samples, its per-sample code length estimated by the
  validation loss L(n_i): MDL = n_1 log C + Σ_{i<S} (n_{i+1} − n_i) L(n_i);
* ``convention="reprieve"`` (the code behind the SynBench paper's Table 7): MDL = Σ_{i≤S} (n_i − n_{i−1}) L(n_i)
  (each block at the loss of the probe trained on it, the first block included);
* SDL_ε: the same sums with each per-sample loss ℓ replaced by max(ℓ − ε, 0) (Whitney et al., def. 2);
* ε-SC: the smallest n_i with L(n_i) ≤ ε.

When the curve never reaches ε (L(n_S) > ε), the true SDL_ε and ε-SC lie beyond the data: both are returned as a
:class:`Bound` with ``lower_bound=True`` holding the value at n_S (SDL: the sum so far; ε-SC: n_S), printed
"> value" like the paper's Table 7 (e.g. "> 1843.0").
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from ..utils.checks import check_features, check_int, check_labels, check_real
from ..utils.threads import torch_threads

F64 = torch.float64

__all__ = [
    "LossDataCurve",
    "Bound",
    "Fit",
    "fit_logistic",
    "log_grid",
    "loss_data_curve",
    "val_loss",
    "mdl",
    "sdl",
    "eps_sample_complexity",
    "reprieve_split",
]

Predictor = Callable[[Tensor], Tensor]  # x (m, D) → log-probabilities (m, C)
Fit = Callable[[Tensor, Tensor, int], Predictor]  # (x, y, C) → predictor
UNITS = {"nats": 1.0, "bits": 1.0 / math.log(2.0)}
CONVENTIONS = ("online", "reprieve")


@dataclass(frozen=True)
class LossDataCurve:
    """Validation loss ``losses[i]`` (mean per sample, in ``units``) of the probe trained on the first ``sizes[i]``
    training samples; ``num_classes`` C (for the uniform code log C)."""

    sizes: tuple[int, ...]
    losses: tuple[float, ...]
    num_classes: int
    units: str = "nats"

    def __post_init__(self) -> None:
        sizes = tuple(check_int(s, "sizes", 1) for s in self.sizes)
        losses = tuple(float(v) for v in self.losses)
        if not sizes or len(sizes) != len(losses):
            raise ValueError(f"LossDataCurve needs one loss per size, got {len(sizes)} sizes and {len(losses)} losses")
        if any(b <= a for a, b in zip(sizes, sizes[1:])):
            raise ValueError(f"LossDataCurve sizes must increase strictly, got {sizes}")
        if not all(math.isfinite(v) and v >= 0 for v in losses):
            raise ValueError(f"LossDataCurve losses must be finite and >= 0, got {losses}")
        if self.units not in UNITS:
            raise ValueError(f"units must be one of {sorted(UNITS)}, got {self.units!r}")
        check_int(self.num_classes, "num_classes", 2)
        object.__setattr__(self, "sizes", sizes)
        object.__setattr__(self, "losses", losses)

    @property
    def uniform_loss(self) -> float:
        """log C in ``units``: the per-sample code length of the uniform code."""
        return math.log(self.num_classes) * UNITS[self.units]


@dataclass(frozen=True)
class Bound:
    """A score that may be a lower bound only: ``value`` and whether the true value is larger (``lower_bound``)."""

    value: float
    lower_bound: bool = False

    def __float__(self) -> float:
        return self.value

    def __str__(self) -> str:
        return f"> {self.value:.2f}" if self.lower_bound else f"{self.value:.2f}"


def log_grid(n_max: int, n_points: int = 10, start: int = 10) -> tuple[int, ...]:
    """reprieve's default sizes: ceil(logspace(log10 start, log10 n_max, n_points)), duplicates removed."""
    n_max, n_points, start = (
        check_int(n_max, "n_max", 1),
        check_int(n_points, "n_points", 1),
        check_int(start, "start", 1),
    )
    if n_points == 1 or start >= n_max:
        return (n_max,)
    step = (math.log10(n_max) - math.log10(start)) / (n_points - 1)
    sizes = {min(n_max, math.ceil(10 ** (math.log10(start) + i * step) - 1e-9)) for i in range(n_points)}
    return tuple(sorted(sizes | {n_max}))


def fit_logistic(
    x: Tensor, y: Tensor, num_classes: int, *, l2: float = 1e-3, max_iter: int = 1000, threads: int | None = 1
) -> Predictor:
    """The default probe: multinomial logistic regression with the penalty l2/2·(‖W‖² + ‖b‖²), full-batch L-BFGS
    (strong Wolfe) in float64 to a gradient norm ≤ 1e-8 (a RuntimeWarning names ``max_iter`` when the strong-convexity
    bound ‖∇‖²/(2·l2) on the remaining loss gap exceeds 1e-6 nats). Returns
    x ↦ log-probabilities. ``threads``: torch CPU threads during the fit (1, default: its many small products run
    up to 100x slower with 2 threads on a busy CPU; None leaves torch's setting)."""
    x = x.to(F64)
    w = torch.zeros(x.shape[1], num_classes, dtype=F64, device=x.device, requires_grad=True)
    b = torch.zeros(num_classes, dtype=F64, device=x.device, requires_grad=True)
    opt = torch.optim.LBFGS(
        [w, b],
        lr=1.0,
        max_iter=max_iter,
        tolerance_grad=1e-8,
        tolerance_change=0.0,
        history_size=20,
        line_search_fn="strong_wolfe",
    )

    def objective() -> Tensor:
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(x @ w + b, y) + 0.5 * l2 * (w.square().sum() + b.square().sum())
        loss.backward()
        return loss

    with torch.enable_grad(), torch_threads(threads):
        opt.step(objective)
        objective()
    # The objective is l2-strongly convex, so its suboptimality is at most ‖∇‖² / (2·l2): the fit is as good as
    # converged when that bound is below 1e-6 nats per sample (six orders below the losses the curve reports).
    grad_sq = float(w.grad.square().sum() + b.grad.square().sum())
    gap = grad_sq / (2.0 * l2)
    if gap > 1e-6:
        warnings.warn(
            f"fit_logistic: L-BFGS stopped after max_iter={max_iter} with the loss up to {gap:.1e} nats above its "
            f"minimum (gradient norm {grad_sq**0.5:.1e}); raise max_iter or l2",
            RuntimeWarning,
            stacklevel=2,
        )
    w, b = w.detach(), b.detach()
    return lambda z: torch.log_softmax(z.to(F64) @ w + b, dim=1)


def loss_data_curve(
    train_features: Tensor,
    train_labels: Tensor,
    val_features: Tensor,
    val_labels: Tensor,
    *,
    sizes: Sequence[int] | None = None,
    seed: int = 0,
    num_classes: int | None = None,
    units: str = "nats",
    l2: float = 1e-3,
    fit: Fit | None = None,
) -> LossDataCurve:
    """The loss-data curve (module docstring): ``sizes`` (default :func:`log_grid` of the training-set size, 10
    points from 10) of nested subsets of one permutation drawn from ``seed``; ``fit`` (default
    :func:`fit_logistic` with ``l2``) trains a probe on whitened features; the validation loss is its mean
    cross-entropy on the validation set."""
    xtr = check_features(train_features, "train_features", min_rows=2, dtype=F64)
    xva = check_features(val_features, "val_features", dtype=F64)
    if xva.shape[1] != xtr.shape[1]:
        raise ValueError(
            f"val_features have {xva.shape[1]} columns, train_features {xtr.shape[1]}; use one feature map"
        )
    ytr, c_train = check_labels(train_labels, xtr.shape[0], num_classes, "train_labels")
    yva, c_val = check_labels(val_labels, xva.shape[0], num_classes, "val_labels")
    c = max(c_train, c_val, 2)
    if units not in UNITS:
        raise ValueError(f"units must be one of {sorted(UNITS)}, got {units!r}")
    n = xtr.shape[0]
    sizes = log_grid(n) if sizes is None else tuple(sorted({check_int(s, "sizes", 1) for s in sizes}))
    if sizes[-1] > n:
        raise ValueError(f"sizes go up to {sizes[-1]} but the training set has {n} samples; pass sizes <= {n}")
    l2 = check_real(l2, "l2", low=0.0)
    fit = fit or (lambda x, y, k: fit_logistic(x, y, k, l2=l2))
    mean, std = float(xtr.mean()), float(xtr.std())
    scale = 1.0 / std if std > 0 else 1.0
    xtr, xva = (xtr - mean) * scale, (xva - mean) * scale
    order = torch.randperm(n, generator=torch.Generator().manual_seed(check_int(seed, "seed", 0))).to(xtr.device)
    losses = []
    for s in sizes:
        idx = order[:s]
        predict = fit(xtr[idx], ytr[idx], c)
        logp = predict(xva)
        losses.append(-float(logp.gather(1, yva[:, None]).mean()) * UNITS[units])
    return LossDataCurve(sizes, tuple(losses), c, units)


def _check(curve: LossDataCurve, convention: str = "online") -> None:
    if not isinstance(curve, LossDataCurve):
        raise TypeError(f"expected a LossDataCurve (from loss_data_curve), got {type(curve).__name__}")
    if convention not in CONVENTIONS:
        raise ValueError(f"convention must be one of {CONVENTIONS}, got {convention!r}")


def _code_length(curve: LossDataCurve, convention: str, eps: float) -> float:
    """Σ over blocks of (block size)·max(per-sample loss − ε, 0) in the chosen convention (module docstring)."""
    sizes, losses = curve.sizes, curve.losses
    if convention == "online":
        blocks = [(sizes[0], curve.uniform_loss)] + [(b - a, loss) for a, b, loss in zip(sizes, sizes[1:], losses)]
    else:
        blocks = [(b - a, loss) for a, b, loss in zip((0, *sizes), sizes, losses)]
    return float(sum(m * max(loss - eps, 0.0) for m, loss in blocks))


def val_loss(curve: LossDataCurve) -> float:
    """The validation loss of the probe trained on the full training set (the last point of the curve)."""
    _check(curve)
    return curve.losses[-1]


def mdl(curve: LossDataCurve, convention: str = "online") -> float:
    """Minimum description length of the training labels (in the curve's units), module docstring."""
    _check(curve, convention)
    return _code_length(curve, convention, 0.0)


def sdl(curve: LossDataCurve, eps: float, convention: str = "online") -> Bound:
    """Surplus description length SDL_ε; a lower bound when the curve ends above ε (module docstring)."""
    _check(curve, convention)
    eps = check_real(eps, "eps", low=0.0)
    return Bound(_code_length(curve, convention, eps), curve.losses[-1] > eps)


def eps_sample_complexity(curve: LossDataCurve, eps: float) -> Bound:
    """ε sample complexity: the smallest size with loss ≤ ε; ``Bound(n_S, lower_bound=True)`` when none."""
    _check(curve)
    eps = check_real(eps, "eps", low=0.0)
    hits = [s for s, loss in zip(curve.sizes, curve.losses) if loss <= eps]
    return Bound(float(hits[0]), False) if hits else Bound(float(curve.sizes[-1]), True)


def reprieve_split(features: Tensor, labels: Tensor, val_frac: float = 0.1) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """reprieve's split of one dataset: the last ceil(val_frac·n) samples validate, the first ones train (with n =
    2048 this gives the 1843 training samples of the SynBench paper's Table 7). Returns (train_z, train_y, val_z,
    val_y)."""
    val_frac = check_real(val_frac, "val_frac", low=0.0, high=1.0)
    n = features.shape[0]
    n_val = math.ceil(n * val_frac)
    if not 0 < n_val < n:
        raise ValueError(f"val_frac={val_frac} leaves {n - n_val} training and {n_val} validation samples of {n}")
    cut = n - n_val
    return features[:cut], labels[:cut], features[cut:], labels[cut:]
