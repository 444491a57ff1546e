"""``synbench()``: stream synthetic Gaussian images through a feature function and score the representation
(ICML 2024 paper, Algorithm 1). Per s: sample train batches → features → additive float64 statistics → one
eigendecomposition → W for every ε → sample test batches → accuracy and mean scaled bound per ε. Only one s's
statistics (a D×D matrix) live at a time, so peak memory does not grow with the number of s values.
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from src.utils.modes import eval_mode
from src.utils.threads import torch_threads

from .bayes import TrainStats, classifier_from_statistics, finalize_test_statistics, test_statistics
from .config import IMAGENET_MEAN, IMAGENET_STD, SynBenchConfig
from .sampling import banded_cholesky, banded_margin_scale, iter_samples
from .score import expected_bound_curve, official_grid, synbench_score
from .theory import reference_curve

Tensor = torch.Tensor
MeanStd = tuple[Sequence[float], Sequence[float]]


def resolve_backbone_mean_std(feature_fn: Any, backbone_mean_std: MeanStd | None, channels: int) -> MeanStd | None:
    """The normalisation ``feature_fn`` applies internally: the given pair, else ``mean``/``std`` attributes of
    the callable's owner (``bb.embed`` → ``bb``, or ``bb`` itself, as the repo's Backbone), else None (none)."""
    if backbone_mean_std is None:
        owner = getattr(feature_fn, "__self__", feature_fn)
        backbone_mean_std = (getattr(owner, "mean", None), getattr(owner, "std", None))
        try:
            pair = tuple(torch.as_tensor(v, dtype=torch.float64).reshape(-1) for v in backbone_mean_std)
        except (TypeError, ValueError, RuntimeError):
            return None
        if any(p.numel() != channels for p in pair):
            return None
    mean, std = (torch.as_tensor(v, dtype=torch.float64).reshape(-1) for v in backbone_mean_std)
    if mean.numel() != channels or std.numel() != channels or not bool((std > 0).all()):
        raise ValueError(f"backbone_mean_std must hold {channels} means and {channels} positive stds")
    return tuple(mean.tolist()), tuple(std.tolist())


def pixel_transform(
    normalization: str, channels: int, backbone_mean_std: MeanStd | None
) -> tuple[Tensor, Tensor] | None:
    """Per-channel affine x' = a·x + b applied to pixel-space samples before ``feature_fn``.

    With N(x) = (x − m_bb)/s_bb the normalisation inside ``feature_fn`` (identity when None), x' = N⁻¹(T(x)) so
    that the network sees T(x): "imagenet" T(x) = (x − m_in)/s_in (official code; x' = ((x − m_in)/s_in)·s_bb
    + m_bb), "backbone" T = N (x' = x), "none" T = identity (x' = x·s_bb + m_bb). None means x' = x.
    """
    if normalization == "backbone" or (normalization == "none" and backbone_mean_std is None):
        return None
    pair = backbone_mean_std or ([0.0] * channels, [1.0] * channels)
    m_bb, s_bb = (torch.tensor(v, dtype=torch.float64) for v in pair)
    if normalization == "none":
        return s_bb.float(), m_bb.float()
    if normalization != "imagenet":
        raise ValueError(f"unknown normalization {normalization!r}")
    if channels != 3:
        raise ValueError("normalization='imagenet' needs 3 channels; use 'backbone' or 'none'")
    m_in, s_in = torch.tensor(IMAGENET_MEAN, dtype=torch.float64), torch.tensor(IMAGENET_STD, dtype=torch.float64)
    return (s_bb / s_in).float(), (m_bb - m_in * s_bb / s_in).float()


def _eval_mode(feature_fn: Any) -> contextlib.AbstractContextManager:
    """Frozen means frozen: an nn.Module behind ``feature_fn`` (``bb.embed`` or ``bb``) runs in eval mode
    (no BatchNorm batch statistics or running-stat drift) and gets every submodule's mode back afterwards."""
    owner = getattr(feature_fn, "__self__", feature_fn)
    return eval_mode(owner) if isinstance(owner, torch.nn.Module) else contextlib.nullcontext()


@contextlib.contextmanager
def _progress(enabled: bool, total: int) -> Iterator[Callable[[int], None]]:
    """rich progress bar when requested and importable, else a no-op."""
    if enabled:
        try:
            from rich.progress import Progress
        except ImportError:  # pragma: no cover - rich is a dependency
            enabled = False
    if not enabled:
        yield lambda n: None
        return
    with Progress(transient=True) as bar:
        task = bar.add_task("SynBench", total=total)
        yield lambda n: bar.advance(task, n)


def _features(
    feature_fn: Callable[[Tensor], Tensor], x: Tensor, device: torch.device, clock: list[float], threads: int
) -> Tensor:
    """feature_fn(x) under inference mode with the caller's thread count, as (B, D); adds its time to clock[0]."""
    t0 = time.perf_counter()
    with torch.inference_mode(), torch_threads(threads):
        z = feature_fn(x.to(device, non_blocking=True))
    if device.type == "cuda":
        torch.cuda.synchronize(device)
    clock[0] += time.perf_counter() - t0
    return z.reshape(z.shape[0], -1)


def _run_one_s(
    feature_fn: Callable[[Tensor], Tensor],
    s: float,
    cfg: SynBenchConfig,
    tau: float,
    common: dict[str, Any],
    dev: torch.device,
    clock: list[float],
    advance: Callable[[int], None],
    threads: int,
) -> tuple[Tensor, Tensor, int]:
    """Algorithm 1 lines 8 and 11-16 for one s: (accuracy (E,), mean scaled bound (E,), D)."""
    stats: TrainStats | None = None
    for x, y in iter_samples(cfg.n_train, cfg.batch_size, s=s, split="train", **common):
        z = _features(feature_fn, x, dev, clock, threads)
        if stats is None:  # shift = first batch mean: avoids cancellation in the raw moments
            stats = TrainStats.zeros(z.shape[1], z.to(torch.float64).mean(0), z.device)
        stats.update(z, y)
        advance(len(y))
    assert stats is not None
    dim = stats.shift.numel()
    clf = classifier_from_statistics(
        stats, cfg.eps, cfg.eps_mode, norm=cfg.norm, eig_tol=cfg.eig_tol, cov_divisor=cfg.cov_divisor, class_prior=tau
    )
    del stats
    total = None
    for x, y in iter_samples(cfg.n_test, cfg.batch_size, s=s, split="test", **common):
        ts = test_statistics(_features(feature_fn, x, dev, clock, threads), y, clf)
        total = ts if total is None else total + ts
        advance(len(y))
    a, b = finalize_test_statistics(total)
    return a.cpu(), b.cpu(), dim


def reference_prior(cfg: SynBenchConfig) -> float:
    """τ of the reference and of the classifier threshold: the class prior with ``prior_correction``, else 0.5."""
    return cfg.class_prior if cfg.prior_correction else 0.5


def sampling_plan(
    cfg: SynBenchConfig,
    shape: Sequence[int],
    feature_fn: Any,
    backbone_mean_std: MeanStd | None = None,
    device: Any = "cpu",
) -> tuple[dict[str, Any], float]:
    """(keyword arguments of :func:`~src.synbench.sampling.sample_chunk` for this protocol, margin scale κ).

    One place decides the samples (seed, chunks, mean offset, prior, Gaussian-H factor, normalisation folded into
    the sampling), so the runner and the sharded metric draw identical data.
    """
    shape = tuple(int(v) for v in shape)
    affine = pixel_transform(
        cfg.normalization, shape[0], resolve_backbone_mean_std(feature_fn, backbone_mean_std, shape[0])
    )
    n_pix = math.prod(shape[1:])
    factor = banded_cholesky(cfg.band, n_pix) if cfg.covariance == "banded" else None
    kappa = banded_margin_scale(cfg.band, n_pix, factor) if factor is not None else 1.0
    common = dict(
        input_shape=shape,
        seed=cfg.seed,
        chunk_size=cfg.chunk_size,
        mean_offset=cfg.mean_offset,
        class_prior=cfg.class_prior,
        factor=factor,
        channel_affine=affine,
        device=device,
    )
    return common, kappa


def synbench(
    feature_fn: Callable[[Tensor], Tensor],
    *,
    input_shape: Sequence[int],
    config: SynBenchConfig | None = None,
    device: Any = "cpu",
    progress: bool = False,
    backbone_mean_std: MeanStd | None = None,
) -> SynBenchResult:
    """Run SynBench (Algorithm 1) on ``feature_fn``: (B, *input_shape) float → (B, D) (a Backbone's ``embed``).

    ``backbone_mean_std``: the (mean, std) ``feature_fn`` normalises with internally; None auto-detects a
    Backbone's ``mean``/``std`` (pass ((0,)*C, (1,)*C) for a plain function that normalises nothing). It
    matters only for how ``config.normalization`` is realised, see :func:`pixel_transform`. An nn.Module
    behind ``feature_fn`` is put in eval mode for the run and restored afterwards.
    """
    cfg = config or SynBenchConfig()
    shape = tuple(int(v) for v in input_shape)
    dev = torch.device(device)
    common, kappa = sampling_plan(
        cfg, shape, feature_fn, backbone_mean_std, dev if cfg.sample_on_device else torch.device("cpu")
    )
    tau = reference_prior(cfg)
    ref_a, ref_b = reference_curve(np.asarray(cfg.s_values), tau, kappa)
    acc = torch.zeros(len(cfg.s_values), len(cfg.eps), dtype=torch.float64)
    bnd = torch.zeros_like(acc)
    clock, dim, t_start = [0.0], 0, time.perf_counter()
    threads = torch.get_num_threads()  # forwards keep the caller's threads; our own work uses linalg_threads
    with (
        _eval_mode(feature_fn),
        _progress(progress, len(cfg.s_values) * (cfg.n_train + cfg.n_test)) as advance,
        torch_threads(cfg.linalg_threads),
    ):
        for i, s in enumerate(cfg.s_values):
            try:
                acc[i], bnd[i], dim = _run_one_s(feature_fn, s, cfg, tau, common, dev, clock, advance, threads)
            except ValueError as err:
                raise ValueError(f"{err} (s = {s})") from err
    timings = {"total_s": time.perf_counter() - t_start, "forward_s": clock[0]}
    return SynBenchResult(cfg, shape, dim, acc, bnd, torch.as_tensor(ref_a), torch.as_tensor(ref_b), timings)


@dataclass
class SynBenchResult:
    """Per-(s, ε) accuracy and mean scaled bound (S × E, float64), the reference pairs per s, the config.

    Scores are eq. 3 ratios and are *not* clipped: finite-sample noise can push a near-perfect representation
    slightly above 1; a useless one gives 0.
    """

    config: SynBenchConfig
    input_shape: tuple[int, ...]
    feature_dim: int
    accuracy: Tensor
    bound: Tensor
    ref_accuracy: Tensor
    ref_bound: Tensor
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def s_values(self) -> tuple[float, ...]:
        return self.config.s_values

    @property
    def eps(self) -> tuple[float, ...]:
        return self.config.eps

    def _eps_index(self, eps: float) -> int:
        for j, e in enumerate(self.eps):
            if abs(e - float(eps)) <= 1e-9:
                return j
        raise ValueError(f"eps={eps} is not on this result's grid {list(self.eps)}")

    def score(self, eps: float = 0.0, a_T: float | None = None, integral: str | None = None) -> float:
        """SynBench-Score(θ, ε, a_T), eq. 3 (a_T defaults to config.a_T[0], integral to config.integral)."""
        j = self._eps_index(eps)
        return synbench_score(
            self.accuracy[:, j],
            self.bound[:, j],
            self.ref_accuracy,
            self.ref_bound,
            self.config.a_T[0] if a_T is None else a_T,
            integral or self.config.integral,
        )

    def table(self, integral: str | None = None) -> list[dict[str, float]]:
        """One row {"eps", "a_T", "score"} per (ε, a_T) of the config."""
        return [{"eps": e, "a_T": t, "score": self.score(e, t, integral)} for t in self.config.a_T for e in self.eps]

    def to_markdown(self, integral: str | None = None) -> str:
        """Scores as a markdown table: one row per a_T, one column per ε (the layout of the paper's Table 6)."""
        head = "| a_T | " + " | ".join(f"ε = {e:g}" for e in self.eps) + " |"
        rows = [head, "|" + " --- |" * (len(self.eps) + 1)]
        for t in self.config.a_T:
            rows.append(f"| {t:g} | " + " | ".join(f"{self.score(e, t, integral):.3f}" for e in self.eps) + " |")
        return "\n".join(rows)

    def best_eps(self, a_T: float | None = None, integral: str | None = None) -> float:
        """argmax_ε SynBench-Score(ε, a_T) (ties: the smallest ε) - the ε for ε-robust probing (paper §4.3)."""
        scores = [self.score(e, a_T, integral) for e in self.eps]
        return self.eps[int(np.argmax(scores))]

    def curves(self, a_t: Sequence[float] | None = None) -> dict[str, Any]:
        """E(a_t) (eq. 2) on ``a_t`` (default official grid): {"a_t", "reference", "eps": {ε: curve}}."""
        t = official_grid() if a_t is None else np.asarray(a_t, dtype=np.float64)
        return {
            "a_t": t,
            "reference": expected_bound_curve(self.ref_accuracy, self.ref_bound, t),
            "eps": {e: expected_bound_curve(self.accuracy[:, j], self.bound[:, j], t) for j, e in enumerate(self.eps)},
        }

    def figure(self, a_t: Sequence[float] | None = None, title: str | None = None) -> Any:
        """matplotlib Figure of :meth:`curves` (paper Fig. 3, left)."""
        from .plots import result_figure

        return result_figure(self, a_t, title)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable dict (plain lists and numbers); inverse :meth:`from_dict`."""
        return {
            "config": self.config.to_dict(),
            "input_shape": list(self.input_shape),
            "feature_dim": self.feature_dim,
            "accuracy": self.accuracy.tolist(),
            "bound": self.bound.tolist(),
            "ref_accuracy": self.ref_accuracy.tolist(),
            "ref_bound": self.ref_bound.tolist(),
            "timings": dict(self.timings),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SynBenchResult:
        t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
        return cls(
            SynBenchConfig.from_dict(d["config"]),
            tuple(d["input_shape"]),
            int(d["feature_dim"]),
            t(d["accuracy"]),
            t(d["bound"]),
            t(d["ref_accuracy"]),
            t(d["ref_bound"]),
            dict(d.get("timings", {})),
        )
