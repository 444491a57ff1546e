"""The rejection mechanism of the SynBench paper (Ko et al., ICML 2024, arXiv:2210.02989, App. A.19, Table 20): is a
downstream data set consistent with SynBench's Gaussian?

The paper: "use goodness-of-fit tests to verify the null hypothesis that the downstream data of interest are generated
from a Normal distribution. If the data follow Normal distribution, the Mahalanobis distances should follow a
Chi-Squared distribution with degrees of freedom equal to the number of features. [...] subtracting the CDF value from
1 gives the p-value", one p-value per data set for Gaussian-I (Σ = I) and Gaussian-H (the banded Σ of §4.4).

What the paper leaves open, and what :func:`rejection_test` does (docs/synbench.md, "Rejection test"):

* **Space.** The images are mapped into SynBench's Gaussian space by inverting SynBench's own pixel transform
  (:func:`~src.synbench.plan.pixel_transform`: x' = a·g + b per channel), so a data image is compared with the sample g
  SynBench would have had to draw for the network to see it. With the official normalisation and an
  ImageNet-normalised backbone (the default ``backbone_mean_std``) that is the identity: [0, 1] pixels are compared with
  N(mean_offset·1, Σ) pixels.
* **Null family.** N(μ, σ²Σ) with Σ the configured covariance (identity, or the channel-block band of
  ``config.band`` through its banded Cholesky factor L: MD² = Σ_c ‖L⁻¹(g_c − μ_c)‖², never a dense d×d inverse).
  ``mean``: "data" (default: μ estimated per value from the data set — the class-free mean) or "synbench"
  (μ = mean_offset, SynBench's mixture centre). ``scale``: "data" (default: one scalar σ² estimated — the null is then
  "Normal with Σ's shape", which is what distinguishes Gaussian-I from Gaussian-H) or "synbench" (σ² = 1: SynBench's own
  noise level; real [0, 1] images have a per-pixel variance near 0.06, so they are far inside that ball).
* **Per image, the paper's formula.** p_i = 1 − F_{χ²_d}(MD²_i) with MD²_i = (g_i − μ̂)ᵀΣ⁻¹(g_i − μ̂)/σ̂²;
  ``paper_p`` = their mean over the images, our reading of Table 20's one number per data set (its values, 0.31 to
  0.83, are what a mean of per-image p-values gives for a set whose MD² spread is wide; a p-value of a valid test would
  be near 0 for natural images). It is **not a test**: under the null it concentrates at 0.5.
* **Per data set, a valid test.** A Kolmogorov–Smirnov goodness-of-fit test of the squared distances against χ²_d
  (two-sided: too near and too far both reject). Its samples are independent under the null: with an estimated mean
  the n − 1 Helmert contrasts (Σ_{j≤k} g_j − k·g_{k+1})/√(k(k+1)), which are i.i.d. N(0, σ²Σ) whatever μ, else the n
  images. With a known scale its p-value is the KS distribution's; with an estimated scale (the contrasts' squared
  distances divided by their mean over d) it is a Monte Carlo p-value from ``mc_samples`` replicates of the same
  statistic on i.i.d. χ²_d draws, exact for this composite null (the statistic depends on the squared distances only
  through their ratios; the draws are seeded by ``config.seed``, so a run is reproducible and its p-value is valid
  over the data and the draws together). ``reject``: its p-value < ``alpha``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from ..utils.numerics import seed_word
from .config import IMAGENET_MEAN, IMAGENET_STD, SynBenchConfig
from .plan import MeanStd, check_input_shape, check_normalization_shape, pixel_transform, resolve_backbone_mean_std
from .sampling import banded_cholesky, channel_layout

Tensor = torch.Tensor
F64 = torch.float64

__all__ = [
    "IMAGENET_MEAN_STD",
    "MEANS",
    "SCALES",
    "RejectionResult",
    "mahalanobis_squared",
    "rejection_test",
    "table20",
]

#: the normalisation of the backbones the paper audits: SynBench's Gaussian space is then the [0, 1] pixel space
IMAGENET_MEAN_STD: MeanStd = (IMAGENET_MEAN, IMAGENET_STD)
MEANS = ("data", "synbench")
SCALES = ("data", "synbench")
_VALUES_PER_BATCH = 1 << 22  # float64 values of one batch's work arrays (32 MB each): ~27 images at 224 px


@dataclass
class RejectionResult:
    """The rejection test of one data set against one covariance (module docstring).

    md2 / p_values: per image, MD² and the paper's 1 − F_{χ²_d}(MD²); paper_p: their mean (Table 20's number as we
    read it; not a test). ks_statistic / ks_p: the valid test (KS of the squared distances of ``ks_samples``
    independent null samples against χ²_d; ``method`` says how its p-value was obtained). sigma2: the scale used.
    """

    covariance: str
    band: tuple[float, ...]
    mean: str
    scale: str
    n: int
    d: int
    sigma2: float
    md2: Tensor
    p_values: Tensor
    paper_p: float
    ks_statistic: float
    ks_p: float
    ks_samples: int
    method: str
    alpha: float = 0.05
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def reject(self) -> bool:
        """The valid test's decision at ``alpha``: the data set is not Normal with this covariance's shape."""
        return self.ks_p < self.alpha

    def summary(self) -> dict[str, Any]:
        """One flat row: covariance, n, d, paper_p, ks_statistic, ks_p, reject, mean and median MD²/d."""
        ratio = self.md2 / self.d
        return {
            "covariance": self.covariance,
            "mean": self.mean,
            "scale": self.scale,
            "n": self.n,
            "d": self.d,
            "paper_p": self.paper_p,
            "ks_statistic": self.ks_statistic,
            "ks_p": self.ks_p,
            "reject": self.reject,
            "md2_over_d_mean": float(ratio.mean()),
            "md2_over_d_median": float(ratio.median()),
            "sigma2": self.sigma2,
        }

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable dict; inverse :meth:`from_dict`."""
        return {
            "covariance": self.covariance,
            "band": list(self.band),
            "mean": self.mean,
            "scale": self.scale,
            "n": self.n,
            "d": self.d,
            "sigma2": self.sigma2,
            "md2": self.md2.tolist(),
            "p_values": self.p_values.tolist(),
            "paper_p": self.paper_p,
            "ks_statistic": self.ks_statistic,
            "ks_p": self.ks_p,
            "ks_samples": self.ks_samples,
            "method": self.method,
            "alpha": self.alpha,
            "extra": dict(self.extra),
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> RejectionResult:
        t = lambda v: torch.tensor(v, dtype=F64)  # noqa: E731
        return cls(
            d["covariance"], tuple(d["band"]), d["mean"], d["scale"], int(d["n"]), int(d["d"]), float(d["sigma2"]),
            t(d["md2"]), t(d["p_values"]), float(d["paper_p"]), float(d["ks_statistic"]), float(d["ks_p"]),
            int(d["ks_samples"]), d["method"], float(d.get("alpha", 0.05)), dict(d.get("extra", {})),
        )  # fmt: skip


def _whitener(config: SynBenchConfig, values_per_channel: int) -> Any:
    """v (k, C, n) float64 → ‖L⁻¹v_c‖² summed over channels (k,): L the banded Cholesky factor of one channel's block
    (LAPACK's banded triangular solve, O(n·band) per vector), or the identity for Gaussian-I."""
    if config.covariance != "banded":
        return lambda v: v.square().sum(dim=(1, 2))
    from scipy.linalg.lapack import dtbtrs

    factor = np.ascontiguousarray(banded_cholesky(config.band, values_per_channel).numpy())

    def md2(v: Tensor) -> Tensor:
        k, c, n = v.shape
        rhs = np.asfortranarray(v.reshape(k * c, n).T.numpy())  # (n, k·C): one right-hand side per (vector, channel)
        sol, info = dtbtrs(factor, rhs, uplo="L")
        if info != 0:  # pragma: no cover - the factor of a positive-definite band has a non-zero diagonal
            raise RuntimeError(f"banded triangular solve failed (LAPACK info {info})")
        return torch.from_numpy(np.square(sol).sum(0)).view(k, c).sum(1)

    return md2


def mahalanobis_squared(v: Tensor, config: SynBenchConfig | None = None) -> Tensor:
    """(v_i)ᵀΣ⁻¹(v_i) of centred samples ``v`` (k, *input_shape) under the configured covariance (identity, or the
    channel-block band through its banded Cholesky factor); float64 (k,)."""
    cfg = SynBenchConfig.coerce(config)
    shape = check_input_shape(v.shape[1:])
    c, n = channel_layout(shape)
    return _whitener(cfg, n)(v.to(F64).reshape(v.shape[0], c, n))


def _ks_uniform(p: np.ndarray) -> np.ndarray:
    """KS distance of each row of ``p`` (B, m) from U(0, 1)."""
    p = np.sort(p, axis=-1)
    m = p.shape[-1]
    i = np.arange(1, m + 1)
    return np.maximum((i / m - p).max(-1), (p - (i - 1) / m).max(-1))


def rejection_test(
    images: Tensor,
    config: SynBenchConfig | None = None,
    *,
    mean: str = "data",
    scale: str = "data",
    alpha: float = 0.05,
    backbone_mean_std: MeanStd | None = IMAGENET_MEAN_STD,
    mc_samples: int = 999,
) -> RejectionResult:
    """The App. A.19 rejection test of ``images`` (N, *input_shape) against SynBench's Gaussian of ``config``
    (``covariance``, ``band``, ``normalization``, ``mean_offset``; ``seed`` seeds the Monte Carlo p-value): see the
    module docstring for every choice. ``images`` are what SynBench would feed the feature function (RepBench: [0, 1]
    pixels), ``backbone_mean_std`` the normalisation inside it (default ImageNet's, the paper's backbones; None = none),
    as :func:`src.synbench.synbench`'s. N >= 3. Memory: a few batches of 2²² float64 values, whatever N."""
    from scipy import stats

    cfg = SynBenchConfig.coerce(config)
    if mean not in MEANS:
        raise ValueError(f"mean must be one of {MEANS}, got {mean!r}")
    if scale not in SCALES:
        raise ValueError(f"scale must be one of {SCALES}, got {scale!r}")
    if not 0.0 < float(alpha) < 1.0:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    if isinstance(mc_samples, bool) or not isinstance(mc_samples, int) or mc_samples < 19:
        raise ValueError(f"mc_samples must be an integer >= 19 (a p-value resolution of 0.05), got {mc_samples!r}")
    if not isinstance(images, Tensor) or not images.is_floating_point() or images.dim() < 2 or images.shape[0] < 3:
        raise ValueError(
            f"images must be a float tensor (N, *input_shape) with N >= 3, got "
            f"{type(images).__name__} {tuple(getattr(images, 'shape', ()))}"
        )
    if not bool(torch.isfinite(images).all()):
        raise ValueError("images hold NaN or inf values")
    shape = check_input_shape(images.shape[1:])
    check_normalization_shape(cfg.normalization, shape)
    channels, per_channel = channel_layout(shape)
    pair = resolve_backbone_mean_std(None, backbone_mean_std, channels, shape) if backbone_mean_std else None
    affine = pixel_transform(cfg.normalization, channels, pair)
    n, d = int(images.shape[0]), math.prod(shape)
    whiten = _whitener(cfg, per_channel)
    step = max(1, _VALUES_PER_BATCH // d)

    def gaussian(lo: int) -> Tensor:  # images lo … lo+step−1 in SynBench's Gaussian space, (k, C, n) float64
        g = images[lo : lo + step].detach().cpu().to(F64).reshape(-1, channels, per_channel)
        if affine is not None:
            a, b = (t.to(F64).view(1, channels, 1) for t in affine)
            g = (g - b) / a
        return g

    if mean == "data":
        centre = sum(gaussian(lo).sum(0) for lo in range(0, n, step)) / n  # (C, n)
    else:
        centre = torch.full((channels, per_channel), cfg.mean_offset, dtype=F64)
    raw, null = torch.empty(n, dtype=F64), []
    running = torch.zeros(channels, per_channel, dtype=F64)  # Σ of the centred images so far (Helmert contrasts)
    for lo in range(0, n, step):
        v = gaussian(lo) - centre
        raw[lo : lo + len(v)] = whiten(v)
        if mean == "data":
            k = torch.arange(lo, lo + len(v), dtype=F64).view(-1, 1, 1)  # images before each one
            before = running + v.cumsum(0) - v
            running += v.sum(0)
            keep = k.view(-1) >= 1
            contrast = (before - k * v)[keep] / torch.sqrt(k * (k + 1))[keep]
            null.append(whiten(contrast))
    q = torch.cat(null) if mean == "data" else raw  # i.i.d. σ²χ²_d under the null
    m = int(q.numel())
    if scale == "data":
        sigma2 = float(raw.sum()) / ((n - 1 if mean == "data" else n) * d)
        q_scaled = q.numpy() * (m * d / float(q.sum()))
    else:
        sigma2, q_scaled = 1.0, q.numpy()
    md2 = raw / sigma2
    p_values = torch.from_numpy(stats.chi2.sf(md2.numpy(), d))
    statistic = float(_ks_uniform(stats.chi2.sf(q_scaled, d)[None])[0])
    if scale == "data":
        rng = np.random.default_rng(seed_word(cfg.seed, 0x2819))  # 0x2819: issue 28, App. A.19
        reps, chunk = np.empty(mc_samples), max(1, _VALUES_PER_BATCH // m)
        for lo in range(0, mc_samples, chunk):
            draws = rng.chisquare(d, size=(min(chunk, mc_samples - lo), m))
            draws *= m * d / draws.sum(1, keepdims=True)
            reps[lo : lo + len(draws)] = _ks_uniform(stats.chi2.sf(draws, d))
        ks_p = (1 + int((reps >= statistic).sum())) / (mc_samples + 1)
        method = f"ks-monte-carlo ({mc_samples} replicates: estimated scale)"
    else:
        ks_p = float(stats.kstest(stats.chi2.sf(q_scaled, d), "uniform").pvalue)
        method = "ks"
    return RejectionResult(
        cfg.covariance, tuple(cfg.band), mean, scale, n, d, sigma2, md2, p_values, float(p_values.mean()), statistic,
        ks_p, m, method, float(alpha),
    )  # fmt: skip


def table20(results: Sequence[tuple[str, RejectionResult, RejectionResult]]) -> str:
    """The layout of the paper's Table 20 as Markdown: a row per data set, per covariance the paper's number (mean
    per-image p-value) and the valid test's p-value, with the decision."""
    lines = [
        "| data set | n | d | Gaussian-I: paper p | Gaussian-I: KS p | Gaussian-H: paper p | Gaussian-H: KS p |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, gi, gh in results:
        cells = [f"{r.paper_p:.2f} | {r.ks_p:.3g}{' (reject)' if r.reject else ''}" for r in (gi, gh)]
        lines.append(f"| {name} | {gi.n} | {gi.d} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
