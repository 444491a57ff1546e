"""Perturbation-robust fine-tuning (Liu, Jiang, Hong, Gong, "Robustness of Vision Foundation Models to Common
Perturbations", arXiv:2604.14973, §6.1):

    L1 = −mean_x cos(f′(x), f′(P(x, k)))      robustness: perturbed embeddings stay close to the clean one
    L2 = −mean_x cos(f(x), f′(x))             utility: the student stays close to the frozen teacher
    min_f′  L1 + λ·L2,                        f′ initialised as f, k drawn from the perturbation's domain

λ = 0 lets the student collapse to an (almost) constant embedding, robust and useless (the paper's Table 9).

With an ``open_clip:<arch>`` backbone the test stage also measures the paper's utility number (Table 9, ACC): the CLIP
zero-shot accuracy of the frozen teacher (before fine-tuning) and of the student (after) on the labelled test set,
against text embeddings of the class-name prompts from the backbone's own text tower.
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
from ..divergence_radius.downstream import ZeroShotClassifier, prompt_class_names
from ..divergence_radius.downstream import zero_shot_head as core_zero_shot_head
from ..perturbations import perturb, sample_parameters
from ..perturbations.registry import check_perturbation_names
from ..utils.checkpoint import register_module
from .base import RepBenchModule, backbone_spec, unpack_batch

__all__ = ["PerturbationRobustFineTune", "select_trainable", "zero_shot_class_names", "zero_shot_head"]

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


def _spec_parts(spec: Any) -> tuple[str, dict[str, Any]]:
    """(name, options) of a backbone spec as stored in hparams (a name or ``{name: ..., **opts}``)."""
    if isinstance(spec, str):
        return spec, {}
    opts = dict(spec)
    return str(opts.pop("name", "")), opts


def _is_open_clip(spec: Any) -> bool:
    return _spec_parts(spec)[0].startswith("open_clip:")


def zero_shot_head(spec: Any, class_names: Sequence[str], *, seed: int = 0) -> ZeroShotClassifier:
    """The CLIP zero-shot head of the module's ``open_clip:<arch>`` backbone spec, "a photo of a {c}." per class
    (:func:`src.divergence_radius.downstream.zero_shot_head`; its errors name ``model.zero_shot_eval=false``)."""
    return core_zero_shot_head(spec, class_names, seed=seed, fix="set model.zero_shot_eval=false")


def zero_shot_class_names(
    explicit: Sequence[str] | str | None, datamodule: Any, key: str = "model.zero_shot_class_names"
) -> list[str]:
    """The class names of the zero-shot prompts (label i = name i): ``explicit`` if given (a list, or ``"imagenet"``:
    OpenAI's 1000 ImageNet names, label i = the i-th WordNet-id folder in sorted order), else the data module's
    ``class_names`` read as folder names (:func:`~src.divergence_radius.downstream.prompt_class_names`: the digits'
    "0".."9" become "zero".."nine", ``_`` a space; WordNet-id folders are refused, naming ``imagenet``); a ValueError
    naming the fix when there are none (``key``: the setting named in errors)."""
    if explicit is not None:
        return prompt_class_names(explicit, key=key)
    names = getattr(datamodule, "class_names", None)
    if names is None:
        raise ValueError(
            "zero-shot accuracy needs class names: the data module has no `class_names`; set "
            f"{key}=[...] (one per label, in label order) or model.zero_shot_eval=false"
        )
    return prompt_class_names(names, from_folders=True, key=key)


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
        zero_shot_eval: ``"auto"`` (on for ``open_clip:`` backbones), True or False: at test time log
            ``test/zero_shot/acc_before`` (frozen teacher) and ``test/zero_shot/acc_after`` (student), the CLIP
            zero-shot accuracy on the test labels (the paper's Table 9 ACC; see :func:`zero_shot_head`).
        zero_shot_class_names: the prompts' class names (label i = name i); None = the data module's
            ``class_names``; ``"imagenet"`` = OpenAI's ImageNet class names (see :func:`zero_shot_class_names`).
        zero_shot_every_val: also log ``val/zero_shot/acc_before`` and ``val/zero_shot/acc_after`` at every
            validation (the same head, on the validation labels), so the zero-shot accuracy is a curve over the
            epochs (the paper's Fig. 7c); off by default (a text tower built at the first validation).

    Checkpoints store the student and leave out the frozen teacher when the backbone spec rebuilds it bit for bit
    (see :class:`~src.models.base.RepBenchModule`).

    During fitting the student is in train mode (with ``freeze_bn_stats`` its BatchNorm layers in eval mode) and the
    teacher in eval mode (:meth:`train`). Lightning therefore warns "Found N module(s) in eval mode at the start of
    training" in your own process: true and intended (the teacher's modules, and the frozen BatchNorm layers);
    ``python -m src.train`` silences it.
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
        zero_shot_eval: bool | str = "auto",
        zero_shot_class_names: Sequence[str] | None = None,
        zero_shot_every_val: bool = False,
    ) -> None:
        if zero_shot_eval not in (True, False, "auto"):
            raise ValueError(f"zero_shot_eval must be true, false or 'auto', got {zero_shot_eval!r}")
        if zero_shot_every_val and zero_shot_eval is False:
            raise ValueError("zero_shot_every_val=true needs the zero-shot head: set zero_shot_eval to auto or true")
        if zero_shot_eval is True and not _is_open_clip(backbone_spec(backbone)):
            zero_shot_head(backbone_spec(backbone), ["x"])  # raises the error naming the backbone and the fix
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
        self.zero_shot_metrics = nn.ModuleDict({"acc_before": MeanMetric(), "acc_after": MeanMetric()})
        self.val_zero_shot_metrics = nn.ModuleDict({"acc_before": MeanMetric(), "acc_after": MeanMetric()})
        self._zero_shot: list[ZeroShotClassifier] = []  # built at test start; a list, not a submodule: never saved

    @property
    def zero_shot(self) -> ZeroShotClassifier | None:
        """The zero-shot head of the current test run (None outside it, or when ``zero_shot_eval`` is off)."""
        return self._zero_shot[0] if self._zero_shot else None

    def zero_shot_names(self) -> list[str] | None:
        """The class names of the test-time zero-shot accuracy, or None when it is not measured: ``zero_shot_eval``
        false, or "auto" with a backbone that is not open_clip or data without class names (said in the log).
        ``zero_shot_eval=true`` without class names is a ValueError naming the fix."""
        mode = self.hparams.get("zero_shot_eval", "auto")
        if mode is False or (mode == "auto" and not _is_open_clip(self.hparams.backbone)):
            return None
        explicit = self.hparams.get("zero_shot_class_names")
        datamodule = getattr(self._trainer, "datamodule", None) if self._trainer is not None else None
        if mode == "auto" and explicit is None and getattr(datamodule, "class_names", None) is None:
            log.warning(
                "zero-shot accuracy not measured: the data has no class_names (unlabelled images?); set "
                "model.zero_shot_class_names=[...] to measure test/zero_shot/acc_before|acc_after"
            )
            return None
        return zero_shot_class_names(explicit, datamodule)

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
        out["zs"], out["zt"] = zs, zt
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
        x, y, _ = unpack_batch(batch)
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
        if self.zero_shot is not None and (stage == "test" or self.hparams.get("zero_shot_every_val")):
            metrics = self.zero_shot_metrics if stage == "test" else self.val_zero_shot_metrics
            self._update_zero_shot(out["zt"], out["zs"], y, metrics)

    def _update_zero_shot(self, zt: Tensor, zs: Tensor, y: Tensor, metrics: nn.ModuleDict) -> None:
        """Per-image zero-shot hits of the teacher (before) and the student (after) against the labels."""
        assert self.zero_shot is not None
        k = self.zero_shot.text_weights.shape[0]
        if y.numel() and (int(y.min()) < 0 or int(y.max()) >= k):
            raise ValueError(
                f"test labels span [{int(y.min())}, {int(y.max())}] but there are {k} zero-shot class names; set "
                "model.zero_shot_class_names to one name per label (label i = name i)"
            )
        for key, z in (("acc_before", zt), ("acc_after", zs)):
            metrics[key].update((self.zero_shot(z).argmax(1) == y.to(z.device)).float())

    def on_test_start(self) -> None:
        """Build the zero-shot head once (text tower of the backbone's weights; class names from the data)."""
        self._zero_shot.clear()
        names = self.zero_shot_names()
        if names is not None:
            head = zero_shot_head(self.hparams.backbone, names, seed=int(self.hparams.seed))
            self._zero_shot.append(head.to(self.device))
            log.info("zero-shot accuracy at test time over %d classes: %s", len(names), names)

    def on_validation_start(self) -> None:
        """With ``zero_shot_every_val``: the zero-shot head, built at the first validation and kept."""
        if self.hparams.get("zero_shot_every_val") and not self._zero_shot:
            names = self.zero_shot_names()
            if names is not None:
                head = zero_shot_head(self.hparams.backbone, names, seed=int(self.hparams.seed))
                self._zero_shot.append(head.to(self.device))
                log.info("zero-shot accuracy at every validation over %d classes: %s", len(names), names)

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
        if self.hparams.get("zero_shot_every_val") and self.zero_shot is not None:
            for key, metric in self.val_zero_shot_metrics.items():
                self.log(f"val/zero_shot/{key}", metric.compute(), sync_dist=False)
                metric.reset()

    def on_test_epoch_end(self) -> None:
        self._log_eval("test")
        if self.zero_shot is not None:
            for key, metric in self.zero_shot_metrics.items():
                self.log(f"test/zero_shot/{key}", metric.compute(), sync_dist=False)
                metric.reset()

    def on_fit_start(self) -> None:
        super().on_fit_start()  # train mode: the student (less its BatchNorm with freeze_bn_stats); teacher eval
        if self.hparams.get("zero_shot_eval") is True:
            self.zero_shot_names()  # no class names is an error now, not after training
        for metric in [*self.metrics.values(), *self.zero_shot_metrics.values(), *self.val_zero_shot_metrics.values()]:
            metric.reset()  # states created in __init__ are shared between ddp_spawn workers until reset
