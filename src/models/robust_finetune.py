"""Perturbation-robust fine-tuning (Liu, Jiang, Hong, Gong, "Robustness of Vision Foundation Models to Common
Perturbations", arXiv:2604.14973, §6.1):

    L1 = −mean_x cos(f′(x), f′(P(x, k)))      robustness: perturbed embeddings stay close to the clean one
    L2 = −mean_x cos(f(x), f′(x))             utility: the student stays close to the frozen teacher
    min_f′  L1 + λ·L2,                        f′ initialised as f, k drawn from the perturbation's domain

λ = 0 lets the student collapse to an (almost) constant embedding, robust and useless (the paper's Table 9).
"""

from __future__ import annotations

import copy
import logging
import re
import warnings
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics import MeanMetric

from ..backbones import Backbone, check_images
from ..perturbations import perturb, sample_parameters
from ..perturbations.registry import check_perturbation_names
from ..utils.checkpoint import register_module
from .base import RepBenchModule, unpack_batch

__all__ = ["PerturbationRobustFineTune", "select_trainable"]

log = logging.getLogger("repbench")

_STAGE_CODE = {"train": 1, "val": 2, "test": 3}
_BLOCK_CONTAINERS = ("blocks", "layers", "stages", "resblocks")
_NORM_TYPES = (nn.modules.batchnorm._NormBase, nn.LayerNorm, nn.GroupNorm, nn.LocalResponseNorm)


def _is_norm(module: nn.Module) -> bool:
    return isinstance(module, _NORM_TYPES) or "norm" in type(module).__name__.lower()


def select_trainable(backbone: nn.Module, trainable: str) -> list[str]:
    """Names of the parameters of ``backbone`` that fine-tuning updates.

    ``"all"``: every parameter. ``"norm_only"``: parameters of normalisation layers (BatchNorm/LayerNorm/GroupNorm…).
    ``"last_n_blocks:N"``: the last N entries of the network's block container (the first module named ``blocks``,
    ``layers``, ``stages`` or ``resblocks`` that is a Sequential/ModuleList) and every parameter registered after it
    (head convolution, final norm).
    """
    names = [n for n, _ in backbone.named_parameters()]
    if trainable == "all":
        return names
    if trainable == "norm_only":
        out = []
        for mname, module in backbone.named_modules():
            if _is_norm(module):
                out += [f"{mname}.{p}" if mname else p for p, _ in module.named_parameters(recurse=False)]
        if not out:
            raise ValueError("trainable='norm_only' but the backbone has no normalisation layers; use 'all'")
        return [n for n in names if n in set(out)]
    m = re.fullmatch(r"last_n_blocks:(\d+)", str(trainable))
    if m is None:
        raise ValueError(f"trainable must be 'all', 'norm_only' or 'last_n_blocks:N', got {trainable!r}")
    n_blocks = int(m.group(1))
    if n_blocks < 1:
        raise ValueError(f"last_n_blocks:N needs N >= 1, got {n_blocks}")
    for mname, module in backbone.named_modules():
        if mname.split(".")[-1] in _BLOCK_CONTAINERS and isinstance(module, (nn.Sequential, nn.ModuleList)):
            children = list(module.named_children())
            if n_blocks > len(children):
                raise ValueError(f"last_n_blocks:{n_blocks} but {mname!r} has only {len(children)} blocks")
            chosen = [f"{mname}.{c}." for c, _ in children[-n_blocks:]]
            inside = [n for n in names if n.startswith(f"{mname}.")]
            last_inside = names.index(inside[-1]) if inside else -1
            return [n for i, n in enumerate(names) if any(n.startswith(c) for c in chosen) or (i > last_inside >= 0)]
    raise ValueError(
        f"trainable={trainable!r}: no block container ({', '.join(_BLOCK_CONTAINERS)}) found in the backbone; "
        "use 'all' or 'norm_only'"
    )


def _mean_cos(a: Tensor, b: Tensor) -> Tensor:
    return F.cosine_similarity(a.float(), b.float(), dim=1, eps=1e-12)


@register_module
class PerturbationRobustFineTune(RepBenchModule):
    """Student f′ = ``self.backbone`` (initialised from the backbone, trained), teacher f = a frozen copy (eval mode,
    no gradients). Monitoring callbacks (DivergenceRadius, SynBench) look at ``self.backbone``: the student.

    Args:
        backbone: a :class:`Backbone`, a registry name or ``{name: ..., **opts}``.
        lam: λ >= 0, weight of the utility loss L2.
        perturbations: distinct names from :data:`src.perturbations.PERTURBATIONS` (a single name = a list of one,
            None = all nine); each training batch uses one, drawn uniformly (the paper uses JPEG compression).
        k_sampling: ``"batch"`` (one k per batch, the paper's "k sampled each epoch" at batch granularity) or
            ``"image"`` (one k per image); k is uniform on the perturbation's domain.
        trainable: ``"all"`` | ``"norm_only"`` | ``"last_n_blocks:N"`` (see :func:`select_trainable`).
        freeze_bn_stats: keep BatchNorm layers of the student in eval mode (running statistics frozen; their affine
            parameters still train when selected). Then f′ = f exactly at the start (L2 = −1).
        lr, weight_decay, optimizer (adam | adamw | sgd), scheduler (cosine | None): optimisation.
        seed: seeds the perturbation draws: (seed, stage, step, rank) -> generator, reproducible after a resume.

    Checkpoints store the student and leave out the frozen teacher when the backbone spec rebuilds it bit for bit
    (see :class:`~src.models.base.RepBenchModule`).
    """

    rebuilt_from_spec = ("teacher",)

    def __init__(
        self,
        backbone: Backbone | str | Mapping[str, Any],
        lam: float = 1.0,
        perturbations: Sequence[str] = ("jpeg_compression",),
        k_sampling: str = "batch",
        trainable: str = "all",
        freeze_bn_stats: bool = True,
        lr: float = 1e-4,
        weight_decay: float = 0.0,
        optimizer: str = "adamw",
        scheduler: str | None = "cosine",
        seed: int = 0,
    ) -> None:
        if not float(lam) >= 0.0:
            raise ValueError(f"lam must be >= 0 (weight of the utility loss), got {lam}")
        perturbations = list(check_perturbation_names(perturbations))  # a single name = a list of one
        if k_sampling not in ("batch", "image"):
            raise ValueError(f"k_sampling must be 'batch' or 'image', got {k_sampling!r}")
        if not float(lr) > 0:
            raise ValueError(f"lr must be > 0, got {lr}")
        super().__init__(backbone)
        self.perturbation_names = perturbations
        self.teacher = copy.deepcopy(self.backbone)
        for p in self.teacher.parameters():
            p.requires_grad_(False)
        self.teacher.eval()
        names = set(select_trainable(self.backbone, trainable))
        for n, p in self.backbone.named_parameters():
            p.requires_grad_(n in names)
        self.metrics = nn.ModuleDict(
            {f"{s}_{m}": MeanMetric() for s in ("val", "test") for m in ("l1", "l2", "utility", "pairwise_cos")}
        )

    # ----------------------------------------------------------------- modes
    def train(self, mode: bool = True) -> PerturbationRobustFineTune:
        """The teacher is always in eval mode; with ``freeze_bn_stats`` so are the student's BatchNorm layers."""
        super().train(mode)
        self.teacher.eval()
        if mode and self.hparams.freeze_bn_stats:
            for m in self.backbone.modules():
                if isinstance(m, nn.modules.batchnorm._BatchNorm):
                    m.eval()
        return self

    def forward(self, x: Tensor) -> Tensor:
        """Student embeddings."""
        return self.backbone.embed(x)

    def trainable_parameters(self) -> Iterable[nn.Parameter]:
        return [p for p in self.backbone.parameters() if p.requires_grad]

    # ----------------------------------------------------------------- steps
    def _generator(self, stage: str, batch_idx: int) -> torch.Generator:
        """Perturbation draws from (seed, stage, step, rank); validation draws depend on the batch only, so val/l1 is
        comparable across epochs."""
        step = self.global_step if stage == "train" else batch_idx
        seed = (
            int(self.hparams.seed) * 1_000_003 + _STAGE_CODE[stage] * 10_007 + step * 7919 + self.global_rank * 104_729
        )
        return torch.Generator().manual_seed(seed % (2**63 - 1))

    def _perturbed(self, x: Tensor, stage: str, batch_idx: int) -> tuple[Tensor, str]:
        g = self._generator(stage, batch_idx)
        names = self.perturbation_names
        name = names[int(torch.randint(len(names), (1,), generator=g))]
        n = x.shape[0] if self.hparams.k_sampling == "image" else 1
        k = sample_parameters(name, n, generator=g)
        return perturb(x, name, k if n > 1 else float(k[0]), generator=g), name

    def _losses(self, x: Tensor, stage: str, batch_idx: int) -> dict[str, Tensor]:
        check_images(x, name=f"{stage} images", value_range=(0.0, 1.0))
        xp, _ = self._perturbed(x, stage, batch_idx)
        z = self.backbone.embed(torch.cat([x, xp]))  # one forward (BatchNorm statistics frozen or per-batch)
        zs, zp = z[: len(x)], z[len(x) :]
        with torch.no_grad():
            zt = self.teacher.embed(x)
        cos_robust, cos_utility = _mean_cos(zs, zp), _mean_cos(zt, zs)
        l1, l2 = -cos_robust.mean(), -cos_utility.mean()
        out = {"l1": l1, "l2": l2, "loss": l1 + float(self.hparams.lam) * l2, "cos_robust": cos_robust}
        out["cos_utility"] = cos_utility
        out["zs"] = zs
        return out

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        x, _, _ = unpack_batch(batch)
        out = self._losses(x, "train", batch_idx)
        if not torch.isfinite(out["loss"]):
            raise FloatingPointError(
                f"non-finite fine-tuning loss at step {self.global_step} (l1={float(out['l1'])}, "
                f"l2={float(out['l2'])}); lower model.lr"
            )
        bs = x.shape[0]
        self.log("train/l1", out["l1"], batch_size=bs)
        self.log("train/l2", out["l2"], batch_size=bs)
        self.log("train/loss", out["loss"], prog_bar=True, batch_size=bs)
        return out["loss"]

    def _eval_step(self, stage: str, batch: Any, batch_idx: int) -> None:
        x, _, _ = unpack_batch(batch)
        with torch.no_grad():
            out = self._losses(x, stage, batch_idx)
            zs = F.normalize(out["zs"].float(), dim=1)
            n = zs.shape[0]
            gram = zs @ zs.T
            pair = (gram.sum() - gram.diagonal().sum()) / max(n * (n - 1), 1)
        self.metrics[f"{stage}_l1"].update(-out["cos_robust"])
        self.metrics[f"{stage}_l2"].update(-out["cos_utility"])
        self.metrics[f"{stage}_utility"].update(out["cos_utility"])
        if n > 1:
            self.metrics[f"{stage}_pairwise_cos"].update(pair, weight=n * (n - 1))

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._eval_step("val", batch, batch_idx)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._eval_step("test", batch, batch_idx)

    def _log_eval(self, stage: str) -> None:
        # every rank computes every metric (a collective under DDP), whatever its share of the batches
        for m in ("l1", "l2", "utility", "pairwise_cos"):
            metric = self.metrics[f"{stage}_{m}"]
            with warnings.catch_warnings():
                warnings.filterwarnings("ignore", message=".*compute.*before.*update.*")
                value = metric.compute()
            metric.reset()
            if torch.isfinite(value):
                self.log(f"{stage}/{m}", value, prog_bar=m == "utility", sync_dist=False)
            else:
                log.warning("%s/%s not logged: no samples (or batches of one image for pairwise_cos)", stage, m)

    def on_validation_epoch_end(self) -> None:
        self._log_eval("val")

    def on_test_epoch_end(self) -> None:
        self._log_eval("test")

    def on_fit_start(self) -> None:
        for metric in self.metrics.values():
            metric.reset()  # states created in __init__ are shared between ddp_spawn workers until reset
