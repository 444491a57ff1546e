"""SamplingPlan: which synthetic samples SynBench draws (ICML 2024 paper, Algorithm 1 line 8) and how they are
split into chunks, so that any number of processes draws exactly the single-process samples.

Samples have any shape (B, *input_shape): flat vectors (d,) (the paper's task lives in R^d), images (C, H, W) and
other ranks. Channels as :func:`~src.synbench.sampling.channel_layout` (axis 0 for rank ≥ 2, a flat vector is one
channel); ``normalization="imagenet"`` needs 3 of them (:func:`check_normalization_shape`).

Chunk c of split ("train"/"test") at s is a counter-based draw (:func:`~src.synbench.sampling.sample_chunk`): the
samples do not depend on the batch size, the other s values, or which process draws the chunk. A process with
shard (rank, world_size) draws chunks rank, rank + world_size, … (round robin); the union over ranks is the
single-process draw.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from numbers import Integral
from typing import Any

import torch

from ..utils.distributed import Shard
from .config import IMAGENET_MEAN, IMAGENET_STD, SynBenchConfig
from .sampling import banded_cholesky, banded_margin_scale, channel_layout, sample_chunk

Tensor = torch.Tensor
MeanStd = tuple[Sequence[float], Sequence[float]]

__all__ = [
    "SamplingPlan",
    "check_input_shape",
    "check_normalization_shape",
    "pixel_transform",
    "resolve_backbone_mean_std",
    "margin_scale",
    "reference_prior",
]


def _is_whole(v: Any) -> bool:
    """Whether ``v`` is an integer size (int, numpy/torch integer scalar, or a whole float), not a bool."""
    if isinstance(v, bool):
        return False
    try:
        return math.isfinite(float(v)) and float(v) == int(v)
    except (TypeError, ValueError, RuntimeError):
        return False


def check_input_shape(input_shape: Any) -> tuple[int, ...]:
    """``input_shape`` as a tuple of ints: a non-empty sequence (any iterable but a string) of positive integers,
    any rank ((d,), (C, H, W), …). TypeError for a bare number, a string or non-integer sizes; ValueError for an
    empty shape or a size below 1."""
    try:
        items = None if isinstance(input_shape, str | bytes) else tuple(input_shape)
    except TypeError:
        items = None
    if items is None:
        hint = f" (for flat vectors write input_shape=({input_shape},))" if isinstance(input_shape, Integral) else ""
        raise TypeError(
            f"SynBench: input_shape={input_shape!r} must be a sequence of sizes, the shape of one sample without "
            f"the batch axis, e.g. (d,) or (C, H, W){hint}"
        )
    if not items:
        raise ValueError("SynBench: input_shape=() is empty; give the shape of one sample, e.g. (d,) or (C, H, W)")
    if not all(_is_whole(v) for v in items):
        raise TypeError(f"SynBench: input_shape={items!r} must hold integers (the sizes of one sample)")
    shape = tuple(int(v) for v in items)
    if any(v < 1 for v in shape):
        raise ValueError(f"SynBench: input_shape={shape!r} must hold positive sizes (every axis at least 1)")
    return shape


def check_normalization_shape(normalization: str, input_shape: Sequence[int]) -> None:
    """Refuse a ``normalization`` the samples cannot take: "imagenet" needs 3 channels on axis 0 ((3, H, W));
    "backbone" and "none" take every shape (they add no per-channel statistics of their own)."""
    if normalization != "imagenet":
        return
    shape = tuple(input_shape)
    if len(shape) == 1:
        raise ValueError(
            f"SynBench: normalization='imagenet' applies the 3 ImageNet channel means/stds to images (3, H, W), but "
            f"input_shape={shape!r} is a flat vector; use SynBenchConfig(normalization='none') to feed the raw "
            "samples (the paper's task in R^d), or input_shape=(3, H, W)"
        )
    if shape[0] != 3:
        raise ValueError(
            f"SynBench: normalization='imagenet' needs 3 channels on axis 0, (3, H, W), but input_shape={shape!r} "
            f"has {shape[0]}; use SynBenchConfig(normalization='none') (raw samples) or normalization='backbone' "
            "(the feature function's own normalisation), or input_shape=(3, ...)"
        )


def resolve_backbone_mean_std(
    feature_fn: Any, backbone_mean_std: MeanStd | None, channels: int, input_shape: Sequence[int] | None = None
) -> MeanStd | None:
    """The normalisation ``feature_fn`` applies internally: the given pair, else ``mean``/``std`` attributes of
    the callable's owner (``bb.embed`` → ``bb``, or ``bb`` itself, as the repo's Backbone; a FeatureExtractor is
    looked through), else None (none). ``channels`` values each (``input_shape`` only names the samples in the
    error)."""
    if backbone_mean_std is None:
        inner = getattr(feature_fn, "feature_fn", feature_fn)  # FeatureExtractor → its function
        owner = getattr(inner, "__self__", inner)
        backbone_mean_std = (getattr(owner, "mean", None), getattr(owner, "std", None))
        try:
            pair = tuple(torch.as_tensor(v, dtype=torch.float64).reshape(-1) for v in backbone_mean_std)
        except (TypeError, ValueError, RuntimeError):
            return None
        if any(p.numel() != channels for p in pair):
            return None
    mean, std = (torch.as_tensor(v, dtype=torch.float64).reshape(-1) for v in backbone_mean_std)
    if mean.numel() != channels or std.numel() != channels or not bool((std > 0).all()):
        where = "" if input_shape is None else f" of input_shape={tuple(input_shape)!r}"
        raise ValueError(
            f"SynBench: backbone_mean_std must hold {channels} mean(s) and {channels} positive std(s), one per channel"
            f"{where} (axis 0; a flat vector is one channel), got {len(mean)} and {len(std)}; pass one value per "
            "channel, or None when feature_fn normalises nothing"
        )
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
        raise ValueError(
            f"normalization='imagenet' needs 3 channels, got {channels}; use normalization='none' or 'backbone'"
        )
    m_in, s_in = torch.tensor(IMAGENET_MEAN, dtype=torch.float64), torch.tensor(IMAGENET_STD, dtype=torch.float64)
    return (s_bb / s_in).float(), (m_bb - m_in * s_bb / s_in).float()


def reference_prior(cfg: SynBenchConfig) -> float:
    """τ of the reference and of the classifier threshold: the class prior with ``prior_correction``, else 0.5."""
    return cfg.class_prior if cfg.prior_correction else 0.5


def _factor(cfg: SynBenchConfig, shape: Sequence[int]) -> Tensor | None:
    return banded_cholesky(cfg.band, channel_layout(shape)[1]) if cfg.covariance == "banded" else None


def margin_scale(cfg: SynBenchConfig, input_shape: Sequence[int], factor: Tensor | None = None) -> float:
    """κ of the reference Φ(κs): 1 for Gaussian-I, √(1ᵀT⁻¹1/n) for the banded Gaussian-H (§4.4)."""
    if cfg.covariance != "banded":
        return 1.0
    n_values = channel_layout(input_shape)[1]
    return banded_margin_scale(cfg.band, n_values, factor if factor is not None else _factor(cfg, input_shape))


@dataclass(frozen=True)
class SamplingPlan:
    """Every sampling decision of one protocol run (seed, chunks, pixel transform, Gaussian-H factor)."""

    input_shape: tuple[int, ...]
    s_values: tuple[float, ...]
    n_train: int
    n_test: int
    batch_size: int
    sample_kwargs: dict[str, Any]  # keyword arguments of sample_chunk except chunk, s, split
    margin_scale: float = 1.0

    @classmethod
    def from_config(
        cls,
        cfg: SynBenchConfig,
        input_shape: Sequence[int],
        feature_fn: Any = None,
        backbone_mean_std: MeanStd | None = None,
        device: Any = "cpu",
    ) -> SamplingPlan:
        """The plan of ``cfg`` for samples of ``input_shape`` (any rank: (d,), (C, H, W), …; see the module
        docstring); ``device`` is where samples are drawn (the caller passes the feature device: the chunks' Philox
        streams give the same samples everywhere)."""
        shape = check_input_shape(input_shape)
        check_normalization_shape(cfg.normalization, shape)
        channels = channel_layout(shape)[0]
        affine = pixel_transform(
            cfg.normalization, channels, resolve_backbone_mean_std(feature_fn, backbone_mean_std, channels, shape)
        )
        factor = _factor(cfg, shape)
        dev = torch.device(device)
        kwargs = dict(
            input_shape=shape,
            seed=cfg.seed,
            chunk_size=cfg.chunk_size,
            mean_offset=cfg.mean_offset,
            class_prior=cfg.class_prior,
            # moved to the sampling device once, not per chunk (a host-to-device copy waits on CUDA)
            factor=None if factor is None else factor.to(dev),
            channel_affine=None if affine is None else tuple(t.to(dev) for t in affine),
            device=dev,
        )
        return cls(
            shape, cfg.s_values, cfg.n_train, cfg.n_test, cfg.batch_size, kwargs, margin_scale(cfg, shape, factor)
        )

    @property
    def chunk_size(self) -> int:
        return int(self.sample_kwargs["chunk_size"])

    def n_samples(self, split: str) -> int:
        return {"train": self.n_train, "test": self.n_test}[split]

    def n_chunks(self, split: str) -> int:
        return math.ceil(self.n_samples(split) / self.chunk_size)

    def chunk(self, s: float, split: str, c: int) -> tuple[Tensor, Tensor]:
        """Chunk ``c`` of one split at s, cut at the split's sample count (the last chunk may be short)."""
        x, y = sample_chunk(c, s=s, split=split, **self.sample_kwargs)
        keep = min(self.chunk_size, self.n_samples(split) - c * self.chunk_size)
        return (x, y) if keep == self.chunk_size else (x[:keep], y[:keep])

    def batches(self, s: float, split: str, shard: Shard = Shard()) -> Iterator[tuple[Tensor, Tensor]]:
        """This shard's chunks of one split, grouped into batches of whole chunks of about ``batch_size``
        samples (at least one chunk; empty for a shard without chunks)."""
        group: list[tuple[Tensor, Tensor]] = []
        size = 0
        for c in shard.indices(self.n_chunks(split)):
            x, y = self.chunk(s, split, c)
            if group and size + len(y) > self.batch_size:
                yield _cat(group)
                group, size = [], 0
            group.append((x, y))
            size += len(y)
        if group:
            yield _cat(group)


def _cat(group: list[tuple[Tensor, Tensor]]) -> tuple[Tensor, Tensor]:
    if len(group) == 1:
        return group[0]
    return torch.cat([g[0] for g in group]), torch.cat([g[1] for g in group])
