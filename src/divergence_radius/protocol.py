"""The DivergenceRadius perturbation sweep, written once (design: "one loop per protocol").

For each image x and perturbation P with m parameters k_1..k_m (equally spaced over the domain by default, the
paper's choice m = 5; Liu et al., arXiv:2604.14973, §4.2), the point set is the clean embedding f(x) (k = ⊥) plus
the m embeddings f(P(x, k_j)); per image and perturbation it yields R_dr and R_cs (§3) and, given a classifier and
labels, ACC_p: the fraction of the m perturbed versions classified correctly (§5.1; the clean version is not counted
— it gives the ordinary ACC, returned separately).

Seams: images are cut into fixed chunks of ``chunk_size`` consecutive images (global chunk c = images
c·chunk_size …); ``shard`` says which chunks this process computes, and random perturbations of chunk c draw from a
generator seeded by (seed, c), so every image sees the same perturbations whatever the number of processes.
``reduce`` combines the per-perturbation partial sums (identity in one process, all_reduce under DDP; every rank
calls it, an empty share contributing zeros).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from ..features import as_extractor
from ..perturbations import parameter_grid, perturb
from ..utils.distributed import Reduce, Shard, no_reduce
from ..utils.numerics import mix_seed
from .config import DivergenceRadiusConfig
from .metrics import cosine_robustness, divergence_radius

__all__ = [
    "SweepOutput",
    "sweep_parameters",
    "robustness_sweep",
    "sweep_sums",
    "sweep_means",
]

F64 = torch.float64


def _name_key(name: str) -> int:
    return zlib.crc32(name.encode())


def sweep_parameters(
    names: Sequence[str] | None = None,
    m: int | None = None,
    mode: str | None = None,
    seed: int | None = None,
    *,
    config: DivergenceRadiusConfig | Mapping[str, Any] | None = None,
) -> dict[str, Tensor]:
    """The m parameters of every perturbation of ``config`` (arguments that are not None override its fields):
    equally spaced, or (``mode="random"``) uniform draws seeded by (seed, perturbation name), shared by all images
    of the sweep."""
    cfg = DivergenceRadiusConfig.merged(config, perturbations=names, m=m, mode=mode, seed=seed)
    out = {}
    for name in cfg.perturbations:
        g = torch.Generator().manual_seed(mix_seed(cfg.seed, _name_key(name))) if cfg.mode == "random" else None
        out[name] = parameter_grid(name, cfg.m, mode=cfg.mode, generator=g)
    return out


@dataclass
class SweepOutput:
    """Per-image values of this process's images. ``index`` (n,) are positions in the input batch; ``r_dr``,
    ``r_cs``, ``acc_p`` are (n, P) float64 in the order of ``names``; ``clean_correct`` (n,) (or None)."""

    names: tuple[str, ...]
    parameters: dict[str, Tensor]
    index: Tensor
    r_dr: Tensor
    r_cs: Tensor
    acc_p: Tensor | None = None
    clean_correct: Tensor | None = None


def _finite(z: Tensor, what: str, n: int) -> Tensor:
    """The embeddings of ``n`` images: a finite (n, D) tensor (the feature-function contract), else a clear error."""
    if z.dim() != 2 or z.shape[0] != n:
        hint = "; for one value per image add a feature axis, e.g. lambda x: f(x)[:, None]" if z.dim() == 1 else ""
        raise ValueError(
            f"feature_fn must map (B, 3, H, W) images to (B, D) embeddings (one D-vector per image), got shape "
            f"{tuple(z.shape)} for {what} (B = {n}){hint}"
        )
    if not bool(torch.isfinite(z).all()):
        raise FloatingPointError(f"the feature function returned NaN/inf embeddings for {what}")
    return z


def robustness_sweep(
    images: Tensor,
    feature_fn: Callable[[Tensor], Tensor],
    config: DivergenceRadiusConfig | Mapping[str, Any] | None = None,
    *,
    perturbations: Sequence[str] | None = None,
    m: int | None = None,
    mode: str | None = None,
    seed: int | None = None,
    labels: Tensor | None = None,
    classifier: Callable[[Tensor], Tensor] | None = None,
    chunk_size: int | None = None,
    shard: Shard = Shard(),
    device: str | torch.device | None = None,
    max_batch: int = 256,
) -> SweepOutput:
    """Run the sweep on this shard's chunks of ``images`` (N, 3, H, W) in [0, 1] (see module docstring).

    ``config``: the sweep (:class:`~src.divergence_radius.config.DivergenceRadiusConfig`, a mapping of its fields, or None
    for its defaults); ``perturbations``, ``m``, ``mode``, ``seed``, ``chunk_size`` override its fields when not None.
    ``feature_fn``: (B, 3, H, W) -> (B, D) (a Backbone's ``embed``, or a FeatureExtractor); it runs through
    :class:`~src.features.FeatureExtractor` under inference mode in the caller's train/eval mode.
    ``classifier``: (B, D) embeddings -> (B, C) scores (a linear probe, or zero-shot text weights); with ``labels``
    (N,) it gives ACC_p and the clean correctness.
    """
    cfg = DivergenceRadiusConfig.merged(
        config, perturbations=perturbations, m=m, mode=mode, seed=seed, chunk_size=chunk_size
    )
    names, m, chunk_size, seed = cfg.perturbations, cfg.m, cfg.chunk_size, cfg.seed
    if not isinstance(images, Tensor) or images.dim() != 4 or images.shape[1] != 3:
        shape = tuple(images.shape) if isinstance(images, Tensor) else type(images).__name__
        raise ValueError(f"images must be a (N, 3, H, W) tensor in [0, 1], got {shape}")
    if (labels is None) != (classifier is None):
        raise ValueError("ACC_p needs both labels and classifier (or neither)")
    if labels is not None and labels.shape != (images.shape[0],):
        raise ValueError(f"labels must have shape ({images.shape[0]},), got {tuple(labels.shape)}")
    params = sweep_parameters(config=cfg)
    extract = as_extractor(feature_fn, device=device, max_batch=max_batch)
    n_img, P = images.shape[0], len(names)
    chunks = [c for c in shard.indices(math.ceil(n_img / chunk_size))]
    idx_all, dr_all, cs_all, acc_all, clean_all = [], [], [], [], []
    for c in chunks:
        sl = slice(c * chunk_size, min(n_img, (c + 1) * chunk_size))
        x = images[sl]
        if device is not None:
            x = x.to(device)
        n = x.shape[0]
        g = torch.Generator().manual_seed(mix_seed(seed, c))
        z_clean = _finite(extract(x), "the clean images", n)
        y = labels[sl].to(z_clean.device) if labels is not None else None
        sets, acc = [], []
        for name in names:
            ks = params[name]
            # all m versions of the chunk in one batch: image i at parameter j is row j·n + i
            xp = torch.cat([perturb(x, name, float(k), generator=g) for k in ks])
            zp = _finite(extract(xp), f"perturbation {name}", m * n)
            sets.append(torch.cat([z_clean[:, None], zp.reshape(m, n, -1).transpose(0, 1)], dim=1))  # (n, m+1, D)
            if classifier is not None:
                pred = classifier(zp).argmax(-1).reshape(m, n)
                acc.append((pred == y[None]).to(F64).mean(0))
        pts = torch.stack(sets, 1)  # (n, P, m+1, D): one batched MEB for the chunk
        idx_all.append(torch.arange(sl.start, sl.stop))
        dr_all.append(divergence_radius(pts).cpu())
        cs_all.append(cosine_robustness(pts).cpu())
        if classifier is not None:
            acc_all.append(torch.stack(acc, 1).cpu())
            clean_all.append((classifier(z_clean).argmax(-1) == y).to(F64).cpu())
    empty = torch.zeros(0, P, dtype=F64)
    cat = lambda xs, e: torch.cat(xs) if xs else e  # noqa: E731
    return SweepOutput(
        names=names,
        parameters=params,
        index=cat(idx_all, torch.zeros(0, dtype=torch.long)),
        r_dr=cat(dr_all, empty),
        r_cs=cat(cs_all, empty),
        acc_p=cat(acc_all, empty) if classifier is not None else None,
        clean_correct=cat(clean_all, torch.zeros(0, dtype=F64)) if classifier is not None else None,
    )


def sweep_sums(out: SweepOutput, reduce: Reduce = no_reduce) -> dict[str, Tensor]:
    """Per-perturbation sums over this process's images, combined by ``reduce`` (every rank must call it):
    ``count`` (P,), ``sum_dr``, ``sum_cs``, and with a classifier ``sum_acc_p`` (P,) and ``sum_clean`` (1,)."""
    P = len(out.names)
    parts = [
        torch.full((P,), float(out.r_dr.shape[0]), dtype=F64),
        out.r_dr.sum(0),
        out.r_cs.sum(0),
        out.acc_p.sum(0) if out.acc_p is not None else torch.zeros(P, dtype=F64),
        (out.clean_correct.sum() if out.clean_correct is not None else torch.zeros((), dtype=F64)).reshape(1),
    ]
    flat = reduce(torch.cat(parts))  # one collective for everything
    keys = ["count", "sum_dr", "sum_cs", "sum_acc_p"]
    res = {k: flat[i * P : (i + 1) * P] for i, k in enumerate(keys)}
    res["sum_clean"] = flat[4 * P :]
    return res


def sweep_means(sums: dict[str, Tensor], names: Sequence[str], accuracy: bool = False) -> dict[str, float]:
    """{"divergence_radius/<name>", "divergence_radius/mean", "cosine_robustness/<name>", ...} and, with
    ``accuracy``, "acc_p/<name>", "acc_p/mean", "acc/clean": means over all images (raises if there were none)."""
    count = sums["count"]
    if not bool((count > 0).all()):
        raise ValueError("the sweep saw no images (empty image set on every process)")
    out: dict[str, float] = {}
    families = [("divergence_radius", "sum_dr"), ("cosine_robustness", "sum_cs")]
    for fam, key in families + ([("acc_p", "sum_acc_p")] if accuracy else []):
        mean = sums[key] / count
        for name, v in zip(names, mean.tolist()):
            out[f"{fam}/{name}"] = v
        out[f"{fam}/mean"] = float(mean.mean())
    if accuracy:
        out["acc/clean"] = float(sums["sum_clean"][0] / count[0])
    return out
