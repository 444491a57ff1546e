"""The DivergenceRadius perturbation sweep, written once (design: "one loop per protocol").

For each image x and perturbation P with m parameters k_1..k_m (equally spaced over the domain by default, the
paper's choice m = 5; Liu et al., arXiv:2604.14973, §4.2), the point set is the clean embedding f(x) (k = ⊥) plus
the m embeddings f(P(x, k_j)); per image and perturbation it yields R_dr and R_cs (§3) and, given a classifier and
labels, ACC_p: the fraction of the m perturbed versions classified correctly (§5.1; the clean version is not counted
— it gives the ordinary ACC, returned separately); or, given ground-truth depth maps (:class:`DepthTargets`; the
feature function then returns each version's embedding followed by its predicted depth map), RMSE_p: the mean over
the m perturbed versions of their depth RMSE (App. E, eq. 16; the clean version's RMSE is returned separately).

Seams: images are cut into fixed chunks of ``chunk_size`` consecutive images (global chunk c = images
c·chunk_size …); ``shard`` says which chunks this process computes, and random perturbations of chunk c draw from a
generator seeded by (seed, c), so every image sees the same perturbations whatever the number of processes.
``reduce`` combines the per-perturbation partial sums (identity in one process, all_reduce under DDP; every rank
calls it, an empty share contributing zeros).

Cache: on a fixed probe set (a monitor's images, every epoch) the perturbed versions never change, only the network
does. :func:`cache_perturbations` draws every chunk's versions once, exactly as the sweep draws them, into a
:class:`PerturbationCache`; ``robustness_sweep(..., perturbed=cache)`` then only embeds and solves the MEBs, with
results bit-identical to the uncached sweep (one loop: both paths take a chunk's versions from :func:`_versions`).
"""

from __future__ import annotations

import hashlib
import math
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor

from ..features import FORWARD_BATCH, as_extractor
from ..perturbations import parameter_grid, perturb
from ..perturbations._random import engine_for
from ..utils.allocator import freed_memory_kept
from ..utils.distributed import Reduce, Shard, no_reduce
from ..utils.numerics import mix_seed
from .config import DivergenceRadiusConfig
from .depth import image_rmse
from .metrics import cosine_robustness, divergence_radius

__all__ = [
    "DepthTargets",
    "SweepOutput",
    "PerturbationCache",
    "cache_perturbations",
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
    cfg = DivergenceRadiusConfig.coerce(config, perturbations=names, m=m, mode=mode, seed=seed)
    out = {}
    for name in cfg.perturbations:
        g = torch.Generator().manual_seed(mix_seed(cfg.seed, _name_key(name))) if cfg.mode == "random" else None
        out[name] = parameter_grid(name, cfg.m, mode=cfg.mode, generator=g)
    return out


@dataclass
class SweepOutput:
    """Per-image values of this process's images. ``index`` (n,) are positions in the input batch; ``r_dr``,
    ``r_cs``, ``acc_p`` (classifier), ``rmse_p`` (depth) are (n, P) float64 in the order of ``names``;
    ``clean_correct`` (classifier) and ``clean_rmse`` (depth) (n,) (or None)."""

    names: tuple[str, ...]
    parameters: dict[str, Tensor]
    index: Tensor
    r_dr: Tensor
    r_cs: Tensor
    acc_p: Tensor | None = None
    clean_correct: Tensor | None = None
    rmse_p: Tensor | None = None
    clean_rmse: Tensor | None = None


@dataclass(frozen=True)
class DepthTargets:
    """The depth task of a sweep (App. E): ``depth`` (N, 1, H, W) ground-truth maps of the swept images, and
    ``embed_dim`` D: the feature function returns (B, D + H·W), each version's embedding (R_dr and R_cs are computed
    on it) followed by its predicted depth map (:meth:`src.divergence_radius.depth.DepthModel.sweep_features`)."""

    depth: Tensor
    embed_dim: int

    def split(self, out: Tensor, what: str) -> tuple[Tensor, Tensor]:
        """(embeddings (B, D), predicted maps (B, 1, H, W)) of a feature function's output, else a clear error."""
        h, w = self.depth.shape[-2:]
        if out.dim() != 2 or out.shape[1] != self.embed_dim + h * w:
            raise ValueError(
                f"with depth targets the feature function must return (B, embed_dim + H·W) = (B, {self.embed_dim} + "
                f"{h}·{w}) (the embedding, then the predicted depth map; DepthModel.sweep_features), got "
                f"{tuple(out.shape)} for {what}"
            )
        return out[:, : self.embed_dim], out[:, self.embed_dim :].reshape(-1, 1, h, w)


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


def _check_images(images: Tensor) -> None:
    if not isinstance(images, Tensor) or images.dim() != 4 or images.shape[1] != 3:
        shape = tuple(images.shape) if isinstance(images, Tensor) else type(images).__name__
        raise ValueError(f"images must be a (N, 3, H, W) tensor in [0, 1], got {shape}")


def _chunk_slices(n_img: int, chunk_size: int, shard: Shard) -> list[tuple[int, slice]]:
    """(global chunk index c, the images' slice) of this shard's chunks."""
    return [
        (c, slice(c * chunk_size, min(n_img, (c + 1) * chunk_size)))
        for c in shard.indices(math.ceil(n_img / chunk_size))
    ]


def _versions(x: Tensor, names: Sequence[str], params: Mapping[str, Tensor], seed: int, c: int) -> Tensor:
    """Every version of chunk ``c``'s images ``x`` (n, 3, H, W) in one tensor ((1 + P·m)·n, 3, H, W): rows 0 … n − 1
    the clean images, then per perturbation p (in the order of ``names``) its m versions, image i at parameter j in
    row n + (p·m + j)·n + i. Random perturbations draw from one generator seeded by (seed, c), perturbation by
    perturbation and parameter by parameter in that order: the sweep's draws, cached or not."""
    g = torch.Generator().manual_seed(mix_seed(seed, c))
    return torch.cat([x] + [perturb(x, name, float(k), generator=g) for name in names for k in params[name]])


def _perturb_device(images: Tensor, device: str | torch.device | None) -> torch.device:
    """Where the sweep perturbs: ``device`` resolved as a tensor move resolves it (``cuda`` → ``cuda:0``), else the
    images' device."""
    return images[:0].to(device).device if device is not None else images.device


def _cache_key(
    images: Tensor, cfg: DivergenceRadiusConfig, params: Mapping[str, Tensor], shard: Shard, where: torch.device
) -> str:
    """Digest of everything a chunk's versions depend on: the images' bytes, shape and dtype, the parameter grid,
    seed, chunk_size, perturbation names, m, mode, the shard, the perturbation device and its random engine."""
    h = hashlib.blake2b(digest_size=16)
    flat = images.detach().reshape(-1).contiguous().cpu()
    h.update(repr((tuple(images.shape), str(images.dtype))).encode())
    h.update(flat.view(torch.uint8).numpy().tobytes())
    for name in cfg.perturbations:
        h.update(name.encode() + b"\0" + params[name].detach().to(F64).cpu().numpy().tobytes())
    fields = (cfg.perturbations, cfg.m, cfg.mode, cfg.seed, cfg.chunk_size, shard.rank, shard.world_size)
    h.update(repr((fields, str(where), engine_for(where))).encode())
    return h.hexdigest()


@dataclass(frozen=True)
class PerturbationCache:
    """A fixed image set's perturbed versions for one sweep config and shard (:func:`cache_perturbations`).

    ``key``: digest of the images (bytes, shape, dtype), the parameter grid, seed, chunk_size, perturbation names, m,
    mode, the shard and the perturbation device (:func:`robustness_sweep` refuses a cache whose key differs from its
    call's). ``chunks``: per chunk of this shard, (global chunk index, first image, end image, versions
    ((1 + P·m)·n, 3, H, W), see :func:`_versions`). ``nbytes``: the versions' memory,
    n_images × (1 + P·m) × 3 × H × W × element size (float32: 4) summed over this shard's images. Treat the tensors
    as read-only."""

    key: str
    names: tuple[str, ...]
    m: int
    parameters: dict[str, Tensor] = field(repr=False)
    chunks: tuple[tuple[int, int, int, Tensor], ...] = field(repr=False)
    nbytes: int = 0
    device: torch.device = torch.device("cpu")

    def matches(
        self,
        images: Tensor,
        config: DivergenceRadiusConfig | Mapping[str, Any] | None = None,
        *,
        shard: Shard = Shard(),
        device: str | torch.device | None = None,
        **overrides: Any,
    ) -> bool:
        """Whether :func:`robustness_sweep` with these arguments (``overrides``: ``perturbations``, ``m``, ``mode``,
        ``seed``, ``chunk_size``) would take this cache (False: build a new one with :func:`cache_perturbations`)."""
        cfg = DivergenceRadiusConfig.coerce(config, **overrides)
        return self.key == _cache_key(images, cfg, sweep_parameters(config=cfg), shard, _perturb_device(images, device))


def cache_perturbations(
    images: Tensor,
    config: DivergenceRadiusConfig | Mapping[str, Any] | None = None,
    *,
    perturbations: Sequence[str] | None = None,
    m: int | None = None,
    mode: str | None = None,
    seed: int | None = None,
    chunk_size: int | None = None,
    shard: Shard = Shard(),
    device: str | torch.device | None = None,
) -> PerturbationCache:
    """Perturb ``images`` (N, 3, H, W) in [0, 1] once for the sweep of ``config`` (fields overridden by the keyword
    arguments that are not None, as in :func:`robustness_sweep`) on this ``shard``'s chunks, on ``device`` (None: the
    images' device): every chunk's clean images and, per perturbation, its m versions, drawn exactly as the sweep
    draws them (same generator per chunk, same order), so ``robustness_sweep(images, f, config, shard=shard,
    device=device, perturbed=cache)`` equals the uncached sweep bit for bit and costs only the forwards and MEBs.

    Memory (``cache.nbytes``): n_images × (1 + P·m) × 3 × H × W × 4 bytes for float32 images (P perturbations,
    n_images this shard's images); the default monitor (32 images of 64 px, P = 9, m = 5):
    32 × 46 × 3 × 64² × 4 ≈ 72 MB."""
    cfg = DivergenceRadiusConfig.coerce(
        config, perturbations=perturbations, m=m, mode=mode, seed=seed, chunk_size=chunk_size
    )
    _check_images(images)
    params = sweep_parameters(config=cfg)
    where = _perturb_device(images, device)
    chunks = []
    with torch.no_grad():
        for c, sl in _chunk_slices(images.shape[0], cfg.chunk_size, shard):
            versions = _versions(images[sl].to(where), cfg.perturbations, params, cfg.seed, c)
            chunks.append((c, sl.start, sl.stop, versions))
    return PerturbationCache(
        key=_cache_key(images, cfg, params, shard, where),
        names=cfg.perturbations,
        m=cfg.m,
        parameters=params,
        chunks=tuple(chunks),
        nbytes=sum(v.numel() * v.element_size() for *_, v in chunks),
        device=where,
    )


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
    max_batch: int = FORWARD_BATCH,
    perturbed: PerturbationCache | None = None,
    depth: DepthTargets | None = None,
) -> SweepOutput:
    """Run the sweep on this shard's chunks of ``images`` (N, 3, H, W) in [0, 1] (see module docstring).

    ``config``: the sweep (:class:`~src.divergence_radius.config.DivergenceRadiusConfig`, a mapping of its fields, or None
    for its defaults); ``perturbations``, ``m``, ``mode``, ``seed``, ``chunk_size`` override its fields when not None.
    ``feature_fn``: (B, 3, H, W) -> (B, D) (a Backbone's ``embed``, or a FeatureExtractor); it runs through
    :class:`~src.features.FeatureExtractor` under inference mode in the caller's train/eval mode, on each chunk's
    (1 + P·m)·n versions in one call (forwards of ``max_batch`` images).
    ``classifier``: (B, D) embeddings -> (B, C) scores (a linear probe, or zero-shot text weights); with ``labels``
    (N,) it gives ACC_p and the clean correctness.
    ``depth``: :class:`DepthTargets` (ground-truth maps and the embedding size); ``feature_fn`` then returns each
    version's embedding and predicted depth map, and the sweep gives RMSE_p (eq. 16) and the clean RMSE per image.
    ``perturbed``: the :func:`cache_perturbations` of the same images, config, shard and device: the versions are
    taken from it instead of being drawn again (same results bit for bit); a cache of other images, config, shard or
    device is refused (ValueError).
    Malloc keeps freed memory for the duration of the call (:func:`src.utils.allocator.freed_memory_kept`).
    """
    cfg = DivergenceRadiusConfig.coerce(
        config, perturbations=perturbations, m=m, mode=mode, seed=seed, chunk_size=chunk_size
    )
    names, m, chunk_size, seed = cfg.perturbations, cfg.m, cfg.chunk_size, cfg.seed
    _check_images(images)
    if (labels is None) != (classifier is None):
        raise ValueError("ACC_p needs both labels and classifier (or neither)")
    if labels is not None and labels.shape != (images.shape[0],):
        raise ValueError(f"labels must have shape ({images.shape[0]},), got {tuple(labels.shape)}")
    if depth is not None:
        if classifier is not None:
            raise ValueError("a sweep scores one downstream task: pass labels and classifier, or depth, not both")
        if depth.depth.dim() != 4 or depth.depth.shape[:2] != (images.shape[0], 1):
            raise ValueError(
                f"depth targets must be (N, 1, H, W) with N = {images.shape[0]}, got {tuple(depth.depth.shape)}"
            )
    params = sweep_parameters(config=cfg)
    if perturbed is not None:
        if not isinstance(perturbed, PerturbationCache):
            raise TypeError(
                f"perturbed must be a PerturbationCache (cache_perturbations), got {type(perturbed).__name__}"
            )
        if perturbed.key != _cache_key(images, cfg, params, shard, _perturb_device(images, device)):
            raise ValueError(
                "perturbed= holds the perturbations of other images, another sweep config (perturbations, m, mode, "
                "seed, chunk_size, parameters), another shard or another device than this call's; build it with "
                "cache_perturbations(images, config, shard=..., device=...) using this call's arguments"
            )
        chunks = [(c, slice(a, b), v) for c, a, b, v in perturbed.chunks]
    else:
        chunks = [(c, sl, None) for c, sl in _chunk_slices(images.shape[0], chunk_size, shard)]
    extract = as_extractor(feature_fn, device=device, max_batch=max_batch)
    P = len(names)
    idx_all, dr_all, cs_all, acc_all, clean_all, rmse_all, clean_rmse_all = [], [], [], [], [], [], []
    with freed_memory_kept():
        for c, sl, versions in chunks:
            if versions is None:
                x = images[sl]
                if device is not None:
                    x = x.to(device)
                versions = _versions(x, names, params, seed, c)
            n = sl.stop - sl.start
            z = extract(versions)
            maps = None
            if depth is not None:
                z, maps = depth.split(z, f"chunk {c}")
                target = depth.depth[sl].to(maps.device)
            z_clean = _finite(z[:n], "the clean images", n)
            y = labels[sl].to(z.device) if labels is not None else None
            sets, acc, rmse = [], [], []
            for p, name in enumerate(names):
                # image i at parameter j is row j·n + i of the perturbation's block
                rows = slice(n + p * m * n, n + (p + 1) * m * n)
                zp = _finite(z[rows], f"perturbation {name}", m * n)
                sets.append(torch.cat([z_clean[:, None], zp.reshape(m, n, -1).transpose(0, 1)], dim=1))  # (n, m+1, D)
                if classifier is not None:
                    pred = classifier(zp).argmax(-1).reshape(m, n)
                    acc.append((pred == y[None]).to(F64).mean(0))
                if maps is not None:  # eq. 16: the mean over the m versions of each version's RMSE
                    err = image_rmse(maps[rows], target.repeat(m, 1, 1, 1))
                    rmse.append(err.reshape(m, n).mean(0))
            pts = torch.stack(sets, 1)  # (n, P, m+1, D): one batched MEB for the chunk
            idx_all.append(torch.arange(sl.start, sl.stop))
            dr_all.append(divergence_radius(pts).cpu())
            cs_all.append(cosine_robustness(pts).cpu())
            if classifier is not None:
                acc_all.append(torch.stack(acc, 1).cpu())
                clean_all.append((classifier(z_clean).argmax(-1) == y).to(F64).cpu())
            if maps is not None:
                rmse_all.append(torch.stack(rmse, 1).cpu())
                clean_rmse_all.append(image_rmse(maps[:n], target).cpu())
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
        rmse_p=cat(rmse_all, empty) if depth is not None else None,
        clean_rmse=cat(clean_rmse_all, torch.zeros(0, dtype=F64)) if depth is not None else None,
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
