"""ε-robust linear probing of a frozen backbone (SynBench, synbench_icml2024.txt §4.3).

    min_head  E_(x,y) max_{‖δ‖ ≤ ε}  CE(head(f(x + δ)), y)

with the inner maximisation by PGD in pixel space through the frozen backbone f (synbench_iclr_submission.txt
used 10-step PGD-ℓ2). ε = 0 is standard linear probing, optionally on cached features (the backbone runs once
per sample, later epochs never call it).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import lightning as L
import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torchmetrics.classification import MulticlassAccuracy

from src.attacks import pgd_attack
from src.backbones import Backbone, check_images, create_backbone
from src.utils import format_eps
from src.utils.checkpoint import record_module_class

from .feature_cache import FeatureCache

__all__ = ["RobustLinearProbe", "build_backbone"]

# The frozen backbone is in eval mode on purpose ("frozen means frozen"); Lightning warns about that at fit start.
warnings.filterwarnings("ignore", message=r".*module\(s\) in eval mode at the start of training.*")

_STAGE_CODE = {"train": 1, "val": 2, "test": 3}


def build_backbone(spec: Backbone | str | Mapping[str, Any]) -> Backbone:
    """A Backbone, a registry name, or a mapping ``{name: ..., **opts}``."""
    if isinstance(spec, Backbone):
        return spec
    if isinstance(spec, str):
        return create_backbone(spec)
    if isinstance(spec, Mapping) and "name" in spec:
        opts = {k: v for k, v in spec.items() if k != "name"}
        return create_backbone(spec["name"], **opts)
    raise TypeError(
        f"backbone must be a Backbone, a name like 'embedded:efficientnet_lite0' or {{name: ...}}, got {spec!r}"
    )


def _unpack(batch: Any) -> tuple[Tensor, Tensor, Tensor | None]:
    if isinstance(batch, Mapping):
        return batch["image"], batch["label"], batch.get("index")
    if len(batch) == 3:
        return batch[0], batch[1], batch[2]
    return batch[0], batch[1], None


class RobustLinearProbe(L.LightningModule):
    """Frozen backbone (always in eval mode) + linear head, trained clean (ε = 0) or adversarially (ε > 0).

    Args:
        backbone: a :class:`Backbone`, a registry name or ``{name: ..., **opts}`` (stored in hparams, so a
            checkpoint rebuilds the model; the frozen weights are saved in the checkpoint too).
        num_classes: number of labels; must match the data.
        epsilon: training budget ε ≥ 0 in pixel space, or ``"auto"``: argmax_ε SynBench-Score of the backbone,
            computed in ``setup`` before fitting (§4.3 of the SynBench paper; see ``auto_epsilon.py``).
        auto_epsilon: options of ``epsilon="auto"``: ``input_size``, ``scale`` and SynBenchConfig fields
            (``s_values``, ``n_train``, ``n_test``, ``eps`` grid, ``a_T``, ...).
        attack: training PGD: ``norm`` ("l2" | "linf"), ``steps``, ``step_size`` (None: 2.5 ε / steps),
            ``random_start``.
        eval_epsilons: budgets at which validation/test report PGD robust accuracy (``val/adv/acc_<norm>_<eps>``).
        eval_attack: PGD used for evaluation (same keys as ``attack``; ``norm`` defaults to the training norm,
            ``random_start`` to False so that robust accuracy does not depend on batching or sharding).
        feature_cache: with ε = 0, cache features by dataset index (batches must be ``(x, y, index)``).
        check_input_range: reject images outside [0, 1] (turn off for synthetic Gaussian data).
    """

    def __init__(
        self,
        backbone: Backbone | str | Mapping[str, Any] = "embedded:efficientnet_lite0",
        num_classes: int = 10,
        epsilon: float | str = 0.0,
        attack: Mapping[str, Any] | None = None,
        eval_epsilons: Sequence[float] = (),
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
        super().__init__()
        if isinstance(epsilon, str) and epsilon != "auto":
            raise ValueError(f"epsilon must be a number >= 0 or 'auto', got {epsilon!r}")
        if not isinstance(epsilon, str) and not (float(epsilon) >= 0 and float(epsilon) < float("inf")):
            raise ValueError(f"epsilon must be a finite number >= 0 (pixel-space budget), got {epsilon}")
        if int(num_classes) < 2:
            raise ValueError(f"num_classes must be >= 2, got {num_classes}")
        if any(not (float(e) >= 0) for e in eval_epsilons):
            raise ValueError(f"eval_epsilons must be >= 0, got {list(eval_epsilons)}")
        if optimizer not in ("adam", "sgd", "adamw"):
            raise ValueError(f"optimizer must be 'adam', 'adamw' or 'sgd', got {optimizer!r}")
        spec = backbone.name if isinstance(backbone, Backbone) else backbone
        self.save_hyperparameters({"backbone": spec if isinstance(spec, str) else dict(spec)})
        self.save_hyperparameters(ignore=["backbone"])
        self.backbone = build_backbone(backbone)
        self.backbone.requires_grad_(False).eval()
        self.head = nn.Linear(self.backbone.embed_dim, int(num_classes))
        self.attack_cfg = {"norm": "l2", "steps": 10, "step_size": None, "random_start": True, **(attack or {})}
        self.eval_attack_cfg = {**self.attack_cfg, "random_start": False, **(eval_attack or {})}
        if self.attack_cfg["norm"] not in ("l2", "linf") or self.eval_attack_cfg["norm"] not in ("l2", "linf"):
            raise ValueError("attack.norm must be 'l2' or 'linf'")
        self.epsilon: float | None = None if epsilon == "auto" else float(epsilon)
        self.eval_epsilons = [float(e) for e in eval_epsilons]
        self._cache = FeatureCache()
        self._val_cache = FeatureCache()
        self._checked: set[str] = set()
        self.train_acc = MulticlassAccuracy(int(num_classes), average="micro")
        self.val_acc = MulticlassAccuracy(int(num_classes), average="micro")
        self.test_acc = MulticlassAccuracy(int(num_classes), average="micro")
        self.adv_acc = nn.ModuleDict(
            {
                f"{stage}_{self._adv_key(e)}": MulticlassAccuracy(int(num_classes), average="micro")
                for stage in ("val", "test")
                for e in self.eval_epsilons
            }
        )

    # ----------------------------------------------------------------- helpers
    def _adv_key(self, eps: float) -> str:
        return f"acc_{self.eval_attack_cfg['norm']}_{format_eps(eps)}"

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
        if y.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
            raise TypeError(f"{stage} labels must be integer class indices, got dtype {y.dtype}")
        if y.numel() and (int(y.min()) < 0 or int(y.max()) >= self.hparams.num_classes):
            raise ValueError(
                f"{stage} labels lie in [{int(y.min())}, {int(y.max())}] but model.num_classes="
                f"{self.hparams.num_classes}; set model.num_classes to the data's number of classes"
            )
        self._checked.add(stage)

    def _clean_features(self, x: Tensor, index: Tensor | None, cache: FeatureCache | None) -> Tensor:
        with torch.no_grad():
            if cache is None or index is None:
                return self.backbone.embed(x)
            cached, hit = cache.lookup(index)
            if bool(hit.all()):
                return cached
            feats = self.backbone.embed(x[~hit])
            if not torch.isfinite(feats).all():
                raise FloatingPointError(f"backbone {self.backbone.name} produced non-finite features")
            cache.store(index[~hit], feats)
            out = cached.clone() if cached is not None else feats.new_empty(len(index), feats.shape[1])
            out[~hit] = feats
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
    def setup(self, stage: str) -> None:
        dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        n = getattr(dm, "num_classes", None)
        if n is not None and int(n) != int(self.hparams.num_classes):
            raise ValueError(
                f"the data has {n} classes but model.num_classes={self.hparams.num_classes}; set model.num_classes={n}"
            )
        if self.epsilon is None and stage == "fit":
            from .auto_epsilon import select_epsilon

            self.epsilon = select_epsilon(self, self.hparams.auto_epsilon)

    def on_fit_start(self) -> None:
        # metric states created in __init__ are shared between ddp_spawn workers until reset (stack.md)
        for m in (self.train_acc, self.val_acc, self.test_acc, *self.adv_acc.values()):
            m.reset()
        self.backbone.eval()

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        x, y, index = _unpack(batch)
        self._check_batch("train", x, y)
        eps = float(self.epsilon or 0.0)
        if eps == 0.0:
            feats = self._clean_features(x, index, self._cache if self.hparams.feature_cache else None)
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
        x, y, index = _unpack(batch)
        self._check_batch(stage, x, y)
        cache = self._val_cache if (stage == "val" and self.hparams.feature_cache) else None
        logits = self.head(self._clean_features(x, index, cache))
        acc = self.val_acc if stage == "val" else self.test_acc
        acc(logits, y)
        self.log(f"{stage}/loss", F.cross_entropy(logits, y), on_epoch=True, batch_size=len(y), sync_dist=True)
        self.log(f"{stage}/acc", acc, on_epoch=True, prog_bar=True, batch_size=len(y))
        for eps in self.eval_epsilons:
            key = self._adv_key(eps)
            with torch.enable_grad():
                x_adv = self._attack(x, y, eps, self.eval_attack_cfg, stage, batch_idx)
            with torch.no_grad():
                adv_logits = self.logits(x_adv)
            metric = self.adv_acc[f"{stage}_{key}"]
            metric(adv_logits, y)
            self.log(f"{stage}/adv/{key}", metric, on_epoch=True, batch_size=len(y))

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        self._eval_step("val", batch, batch_idx)

    def test_step(self, batch: Any, batch_idx: int) -> None:
        self._eval_step("test", batch, batch_idx)

    def on_train_start(self) -> None:
        for lg in self.loggers:  # the chosen epsilon (and, with epsilon=auto, the SynBench scores behind it)
            metrics = {"train/epsilon": float(self.epsilon or 0.0)}
            metrics.update(
                {
                    f"train/auto_epsilon/score_eps_{format_eps(e)}": v
                    for e, v in getattr(self, "auto_epsilon_scores", {}).items()
                }
            )
            lg.log_metrics(metrics, step=0)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        record_module_class(self, checkpoint)

    def configure_optimizers(self) -> Any:
        params = self.head.parameters()
        hp = self.hparams
        if hp.optimizer == "sgd":
            opt = torch.optim.SGD(params, lr=hp.lr, momentum=0.9, weight_decay=hp.weight_decay)
        elif hp.optimizer == "adamw":
            opt = torch.optim.AdamW(params, lr=hp.lr, weight_decay=hp.weight_decay)
        else:
            opt = torch.optim.Adam(params, lr=hp.lr, weight_decay=hp.weight_decay)
        if hp.scheduler in (None, "none"):
            return opt
        if hp.scheduler != "cosine":
            raise ValueError(f"scheduler must be 'cosine' or None, got {hp.scheduler!r}")
        total = max(1, int(self.trainer.estimated_stepping_batches))
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}
