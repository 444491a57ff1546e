"""ε-robust linear probing of a frozen backbone (SynBench: Ko et al., ICML 2024, arXiv:2210.02989, §4.3).

    min_head  E_(x,y) max_{‖δ‖ ≤ ε}  CE(head(f(x + δ)), y)

with the inner maximisation by PGD in pixel space through the frozen backbone f (the SynBench
ICLR submission used 10-step PGD-ℓ2). ε = 0 is standard linear probing, optionally on cached features (the backbone runs once
per sample, later epochs never call it).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

from ..attacks import adv_metric_name, pgd_attack, pgd_label
from ..backbones import Backbone, check_images
from ..features import FeatureExtractor
from ..utils import format_eps
from ..utils.checkpoint import register_module
from ..utils.checks import check_int
from .base import RepBenchModule, unpack_batch
from .feature_cache import FeatureCache, find_random_transforms

__all__ = ["ATTACK_DEFAULTS", "EVAL_ATTACK_DEFAULTS", "RobustLinearProbe"]

log = logging.getLogger("repbench")

# Code defaults equal configs/ (tests/test_defaults.py): configs/attack/pgd_l2.yaml and model/robust_probe.yaml
ATTACK_DEFAULTS: dict[str, Any] = {"norm": "l2", "steps": 2, "step_size": None, "random_start": True}
EVAL_ATTACK_DEFAULTS: dict[str, Any] = {"steps": 5}

_STAGE_CODE = {"train": 1, "val": 2, "test": 3}
_ATTACK_KEYS = ("norm", "steps", "step_size", "random_start")


def _attack_config(cfg: dict[str, Any], name: str) -> dict[str, Any]:
    """Validate a PGD config (keys of ``ATTACK_DEFAULTS``)."""
    unknown = sorted(set(cfg) - set(_ATTACK_KEYS))
    if unknown:
        raise ValueError(f"{name} has unknown keys {unknown}; expected {list(_ATTACK_KEYS)}")
    if cfg["norm"] not in ("l2", "linf"):
        raise ValueError(f"{name}.norm must be 'l2' or 'linf', got {cfg['norm']!r}")
    if int(cfg["steps"]) < 1:
        raise ValueError(f"{name}.steps must be >= 1, got {cfg['steps']}")
    if cfg["step_size"] is not None and not float(cfg["step_size"]) > 0:
        raise ValueError(f"{name}.step_size must be > 0 or null (2.5 eps / steps), got {cfg['step_size']}")
    return cfg


@register_module
class RobustLinearProbe(RepBenchModule):
    """Frozen backbone (always in eval mode) + linear head, trained clean (ε = 0) or adversarially (ε > 0).

    During fitting the head is in train mode and the backbone in eval mode (:meth:`train`; the mode switch is
    :class:`~src.models.base.RepBenchModule`'s). Lightning therefore warns "Found N module(s) in eval mode at the start
    of training" in your own process: true and intended (the backbone's modules); ``python -m src.train`` silences it.

    Args:
        backbone: a :class:`Backbone`, a registry name or ``{name: ..., **opts}`` (stored in hparams, so a
            checkpoint rebuilds the model). Checkpoints leave out the frozen weights when this spec rebuilds them bit
            for bit (a sha256 check on load refuses weights that changed since) and store them otherwise (e.g. a
            randomly initialised backbone): see :class:`~src.models.base.RepBenchModule`.
        num_classes: number of labels; must match the data.
        epsilon: training budget ε ≥ 0 in pixel space, or ``"auto"``: argmax_ε SynBench-Score of the backbone,
            computed in ``setup`` before fitting (§4.3 of the SynBench paper; see ``auto_epsilon.py``).
        auto_epsilon: options of ``epsilon="auto"``: ``input_size``, ``scale`` and SynBenchConfig fields
            (``s_values``, ``n_train``, ``n_test``, ``eps`` grid, ``a_T``, ...).
        attack: training PGD: ``norm`` ("l2" | "linf"), ``steps``, ``step_size`` (None: 2.5 ε / steps),
            ``random_start``.
        eval_epsilons: budgets at which validation/test report PGD robust accuracy, named after the attack and its
            steps (``val/adv/acc_pgd<steps>_<norm>_<eps>``, e.g. ``val/adv/acc_pgd5_l2_0p05``; :mod:`src.attacks.naming`).
        eval_attack: PGD used for evaluation (same keys as ``attack``; ``norm`` defaults to the training norm,
            ``random_start`` to False so that robust accuracy does not depend on batching or sharding).
        feature_cache: with ε = 0, cache features by dataset index (batches must be ``(x, y, index)``).
        check_input_range: reject images outside [0, 1] (turn off for synthetic Gaussian data).
    """

    rebuilt_from_spec = ("backbone",)

    def __init__(
        self,
        backbone: Backbone | str | Mapping[str, Any] = "embedded:efficientnet_lite0",
        num_classes: int = 10,
        epsilon: float | str = 0.05,
        attack: Mapping[str, Any] | None = None,
        eval_epsilons: Sequence[float] = (0.05,),
        eval_attack: Mapping[str, Any] | None = None,
        lr: float = 3e-3,
        weight_decay: float = 0.0,
        optimizer: str = "adam",
        scheduler: str | None = "cosine",
        feature_cache: bool = True,
        check_input_range: bool = True,
        auto_epsilon: Mapping[str, Any] | None = None,
        seed: int = 0,
    ) -> None:
        if isinstance(epsilon, str) and epsilon != "auto":
            raise ValueError(f"epsilon must be a number >= 0 or 'auto', got {epsilon!r}")
        if not isinstance(epsilon, str) and not (float(epsilon) >= 0 and float(epsilon) < float("inf")):
            raise ValueError(f"epsilon must be a finite number >= 0 (pixel-space budget), got {epsilon}")
        if any(not (float(e) >= 0) for e in eval_epsilons):
            raise ValueError(f"eval_epsilons must be >= 0, got {list(eval_epsilons)}")
        num_classes = check_int(num_classes, "model.num_classes", 2, meaning="classes of the head")
        attack_cfg = _attack_config({**ATTACK_DEFAULTS, **dict(attack or {})}, "attack")
        eval_cfg = {**attack_cfg, "random_start": False, **EVAL_ATTACK_DEFAULTS, **dict(eval_attack or {})}
        eval_cfg = _attack_config(eval_cfg, "eval_attack")
        super().__init__(backbone)
        self.backbone.requires_grad_(False).eval()
        self.head = nn.Linear(self.backbone.embed_dim, num_classes)
        self.attack_cfg = attack_cfg
        self.eval_attack_cfg = eval_cfg
        self.epsilon: float | None = None if epsilon == "auto" else float(epsilon)
        self.eval_epsilons = [float(e) for e in eval_epsilons]
        self.cache_enabled = bool(feature_cache)  # turned off at fit start when the training images are random
        self._cache = FeatureCache()
        self._val_cache = FeatureCache()
        self._checked: set[str] = set()
        self.train_acc = MulticlassAccuracy(num_classes, average="micro")
        self.val_acc = MulticlassAccuracy(num_classes, average="micro")
        self.test_acc = MulticlassAccuracy(num_classes, average="micro")
        self.adv_acc = nn.ModuleDict(
            {
                self.adv_name(stage, e).replace("/", "_"): MulticlassAccuracy(num_classes, average="micro")
                for stage in ("val", "test")
                for e in self.eval_epsilons
            }
        )

    # ----------------------------------------------------------------- helpers
    def adv_name(self, stage: str, eps: float) -> str:
        """The logged name of the evaluation PGD's robust accuracy at ``eps``, e.g. ``val/adv/acc_pgd5_l2_0p05``."""
        cfg = self.eval_attack_cfg
        return adv_metric_name(stage, pgd_label(int(cfg["steps"])), cfg["norm"], eps)

    def train(self, mode: bool = True) -> RobustLinearProbe:
        """Frozen means frozen: the backbone stays in eval mode (no BatchNorm drift, no dropout)."""
        super().train(mode)
        self.backbone.eval()
        return self

    def logits(self, x: Tensor) -> Tensor:
        """Pixel-space images -> class logits."""
        return self.head(self.backbone.embed(x))

    forward = logits

    def _generator(self, stage: str, batch_idx: int, device: torch.device) -> torch.Generator:
        """PGD random starts derived from (seed, stage, step, rank): reproducible and identical after a resume."""
        step = self.global_step if stage == "train" else batch_idx
        seed = self.hparams.seed * 1_000_003 + _STAGE_CODE[stage] * 10_007 + step * 7919 + self.global_rank * 104_729
        return torch.Generator(device=device).manual_seed(seed % (2**63 - 1))

    def _check_batch(self, stage: str, x: Tensor, y: Tensor) -> None:
        if stage in self._checked:
            return
        check_images(x, name=f"{stage} images", value_range=(0.0, 1.0) if self.hparams.check_input_range else None)
        self.check_labels(y, stage)
        self._checked.add(stage)

    def _clean_features(self, x: Tensor, index: Tensor | None, cache: FeatureCache | None) -> Tensor:
        """Frozen-backbone features; through ``cache`` (by dataset index) when one is given."""
        if cache is None or index is None:
            with torch.no_grad():
                return self.backbone.embed(x)
        cached, hit = cache.lookup(index)
        if bool(hit.all()):
            return cached
        feats = FeatureExtractor(self.backbone.embed, max_batch=max(1, len(x)))(x[~hit])
        if not torch.isfinite(feats).all():
            raise FloatingPointError(f"backbone {self.backbone.name} produced non-finite features")
        cache.store(index[~hit], feats)  # copies out of inference mode into the cache's own tensor
        out = cached.clone() if cached is not None else cache.features.new_empty(len(index), cache.features.shape[1])
        out[~hit] = cache.features[index[~hit].to(out.device)]
        return out

    def _attack(self, x: Tensor, y: Tensor, eps: float, cfg: Mapping[str, Any], stage: str, batch_idx: int) -> Tensor:
        if torch.is_inference_mode_enabled():
            raise RuntimeError(
                "PGD needs gradients: run the Trainer with inference_mode=False (trainer.inference_mode=false)"
            )
        return pgd_attack(
            self.logits,
            x,
            y,
            eps=eps,
            norm=cfg["norm"],
            steps=int(cfg["steps"]),
            step_size=cfg.get("step_size"),
            random_start=bool(cfg.get("random_start", True)),
            clip=(0.0, 1.0) if self.hparams.check_input_range else None,
            generator=self._generator(stage, batch_idx, x.device),
        )

    # ------------------------------------------------------------------ fitting
    def trainable_parameters(self) -> Iterable[nn.Parameter]:
        return self.head.parameters()  # the backbone is frozen

    def setup(self, stage: str) -> None:
        self.check_datamodule_classes()
        if self.epsilon is None and stage == "fit":
            from .auto_epsilon import select_epsilon

            self.epsilon = select_epsilon(self, self.hparams.auto_epsilon)

    def on_fit_start(self) -> None:
        super().on_fit_start()  # train mode; the backbone stays in eval mode (self.train)
        # metric states created in __init__ are shared between ddp_spawn workers until reset (measured with lightning 2.6)
        for m in (self.train_acc, self.val_acc, self.test_acc, *self.adv_acc.values()):
            m.reset()

    def _check_cache_validity(self) -> None:
        """The cache keys features by dataset index: random training (or validation) transforms would freeze the
        first epoch's crops/flips for every later epoch. Detect them and train without the cache instead."""
        if not self.cache_enabled or float(self.epsilon or 0.0) != 0.0:
            return
        trainer = self.trainer
        sources = {
            "training": (trainer.train_dataloader, getattr(trainer, "datamodule", None)),
            "validation": (trainer.val_dataloaders, None),
        }
        for split, (loaders, dm) in sources.items():
            found = find_random_transforms(loaders, datamodule=dm)
            if found:
                self.cache_enabled = False
                self._cache.clear()
                self._val_cache.clear()
                log.warning(
                    "feature cache turned off: the %s images are random (%s), so cached features would repeat the "
                    "first epoch's augmentation; every epoch runs the backbone (set model.feature_cache=false to "
                    "silence this, or use a deterministic transform to keep the cache)",
                    split,
                    "; ".join(found),
                )
                return

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        x, y, index = unpack_batch(batch)
        self._check_batch("train", x, y)
        eps = float(self.epsilon or 0.0)
        if eps == 0.0:
            feats = self._clean_features(x, index, self._cache if self.cache_enabled else None)
        else:
            x_adv = self._attack(x, y, eps, self.attack_cfg, "train", batch_idx)
            with torch.no_grad():
                feats = self.backbone.embed(x_adv)
        logits = self.head(feats)
        loss = F.cross_entropy(logits, y)
        if not torch.isfinite(loss):
            raise FloatingPointError(
                f"non-finite training loss at step {self.global_step} (lr={self.hparams.lr}); "
                "check the features for NaN/inf and lower model.lr"
            )
        self.train_acc(logits.detach(), y)
        self.log("train/loss", loss, prog_bar=True, on_step=True, on_epoch=False, batch_size=len(y))
        self.log("train/acc", self.train_acc, on_step=False, on_epoch=True, batch_size=len(y))
        return loss

    def _eval_step(self, stage: str, batch: Any, batch_idx: int) -> None:
        x, y, index = unpack_batch(batch)
        self._check_batch(stage, x, y)
        cache = self._val_cache if (stage == "val" and self.cache_enabled) else None
        logits = self.head(self._clean_features(x, index, cache))
        acc = self.val_acc if stage == "val" else self.test_acc
        acc(logits, y)
        self.log(f"{stage}/loss", F.cross_entropy(logits, y), on_epoch=True, batch_size=len(y), sync_dist=True)
        self.log(f"{stage}/acc", acc, on_epoch=True, prog_bar=True, batch_size=len(y))
        for eps in self.eval_epsilons:
            name = self.adv_name(stage, eps)
            with torch.enable_grad():
                x_adv = self._attack(x, y, eps, self.eval_attack_cfg, stage, batch_idx)
            with torch.no_grad():
                adv_logits = self.logits(x_adv)
            metric = self.adv_acc[name.replace("/", "_")]
            metric(adv_logits, y)
            self.log(name, metric, on_epoch=True, batch_size=len(y))

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._eval_step("val", batch, batch_idx)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._eval_step("test", batch, batch_idx)

    def on_train_start(self) -> None:
        super().on_train_start()
        self._check_cache_validity()
        for lg in self.loggers:  # the chosen epsilon (and, with epsilon=auto, the SynBench scores behind it)
            metrics = {"train/epsilon": float(self.epsilon or 0.0)}
            metrics.update(
                {
                    f"train/auto_epsilon/score_eps_{format_eps(e)}": v
                    for e, v in getattr(self, "auto_epsilon_scores", {}).items()
                }
            )
            lg.log_metrics(metrics, step=0)
