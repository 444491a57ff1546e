"""``TaskPriorProbe``: linear probes of a frozen backbone on many tasks sampled from a Task Prior, trained at once.

Task Priors (Patel & Balestriero, arXiv:2507.09871), App. D.1 / Fig. 5: draw labelings of a data set from the Task
Prior μ^q_K of a prior backbone's centred cosine kernel K (prefix sampler, Algorithm 1), train a linear probe of the
evaluated backbone on every task, and compare the mean and variance of held-out accuracy across tasks with the
closed-form E[Tr(MG)] and Var[Tr(MG)] of Thm 2.3 (M: the evaluated backbone's kernel).

How it runs in a Lightning fit with a RepBench data module (batches ``(x, y, index)``, ``index`` the position in
its split): in ``setup`` the module reads every image of the train and val splits once, computes the evaluated and
the prior backbone's features through :class:`~src.features.FeatureExtractor` (the prior backbone is dropped
afterwards), samples ``num_tasks`` labelings of all train + val images with a seeded generator, and computes E and
Var. Training steps then look features and task labels up by ``index`` (the images in the batch are not used again)
and update one batched head (weight (num_tasks, q, D); with ``convention="authors"`` the authors' probe: one BCE
logit per task, weight (num_tasks, D), on the raw features, lr annealed to 1e-6 per epoch); the data module's labels
are ignored. Its train/val split is the fixed, seeded train/test split of every task, its batch size the probes'
batch and the trainer's epochs their epochs. Validation logs ``val/task_prior/acc_mean``, ``acc_var``,
``acc_std``, ``acc_q10/50/90`` beside ``val/task_prior/mean``, ``var`` and ``z`` = E/√Var.

Under DDP every rank computes the (cheap, cached) features and the same labels; the moments are split by row
blocks over the ranks and all-reduced, and the accuracies are sum-reduced counts (:class:`TaskAccuracies`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset, Subset

from ..backbones import Backbone
from ..features import FORWARD_BATCH, FeatureExtractor
from ..metrics.task_prior import TaskAccuracies
from ..task_prior import TaskPriorConfig, task_prior_moments
from ..task_prior.conventions import COSINE_MIN_LR
from ..task_prior.probing import (
    Standardizer,
    accuracy_summary,
    make_probe_head,
    task_scores,
)
from ..utils.checkpoint import register_module
from ..utils.distributed import process_seams
from ..utils.modes import eval_mode
from .base import RepBenchModule, build_backbone, unpack_batch

__all__ = ["TaskPriorProbe", "dataset_features"]


def dataset_features(dataset: Dataset, extractor: FeatureExtractor, batch_size: int = FORWARD_BATCH) -> Tensor:
    """Features of every item of ``dataset`` in index order: (len(dataset), D) float32 on the CPU."""
    loader = DataLoader(dataset, batch_size=batch_size, shuffle=False, num_workers=0)
    out = []
    for batch in loader:
        x, _, _ = unpack_batch(batch)
        z = extractor(x).float().cpu()
        if not torch.isfinite(z).all():
            raise FloatingPointError("the backbone produced NaN/inf features on the data set; check its weights")
        out.append(z)
    if not out:
        raise ValueError("the data set is empty: no images to compute Task-Prior features on")
    return torch.cat(out)


@register_module
class TaskPriorProbe(RepBenchModule):
    """Args:
    Every Task-Prior option (and its default) is a :class:`~src.task_prior.TaskPriorConfig` field, checked there.

    backbone: the evaluated (frozen) backbone: a :class:`Backbone`, a registry name or ``{name: ..., **opts}``.
    prior_backbone: the backbone whose kernel K defines the Task Prior (built once in ``setup``, then dropped).
    num_tasks: labelings sampled (probes trained at once).
    task_classes: q, classes per sampled labeling (>= 2).
    convention: ``"repbench"`` (default), ``"paper"`` or ``"authors"``: the preset of the options below and of
        the sampler's factor (``src.task_prior.conventions``, docs/task_prior.md, "Conventions").
    sample_temperature: T of the prefix sampler (Algorithm 1) on K scaled by ``sampler_scale``.
    temperature: T of the closed-form moments (Thm 2.3).
    order: ``"sequential"`` (paper) or ``"random"`` (authors' code) visiting order of the sampler.
    eval_scale, prior_scale: kernel scales of the moments (``"frobenius"`` | ``"none"``).
    sampler_scale: kernel scale of the sampler.
    probe_metric, probe_split: the logged probe score (``"accuracy"`` | ``"positive_recall"``, the recall of class 1)
        and the split it is measured on (``"test"`` = the data module's val split | ``"train"``); ``"authors"``
        scores each probe by its recall of class 1 on the training split.
        Each of these eight left at None takes the convention's value; an explicit value wins.
    block_size: row-block size of the moments.
    standardize: z-score features with the training split's statistics before the heads; None = the convention's
        (``repbench``, ``paper``: yes; ``authors``: no, the raw features).
    scheduler: None = the convention's (``repbench``, ``paper``: constant lr; ``authors``: cosine annealing from
        ``lr`` to 1e-6 over ``trainer.max_epochs``, stepped per epoch); ``"cosine"``: the base module's per-step
        cosine to 0. The head is the convention's (``probe_head``: a q-way softmax, or ``authors``' one BCE logit per
        binary task); the batch size is the data module's (``data.batch_size``; the authors': 256) and the epochs the
        trainer's (``trainer.max_epochs``; the authors': 100).
    max_batch: images per backbone forward when computing features.
    max_samples: use only the first ``max_samples`` images of each split (a CPU budget; batch rows beyond are
        skipped); None: all.
    results_file: write a JSON row (backbone, E, Var, accuracy summary, per-task accuracies) here at fit end.
    seed: labelings and head initialisation.

    Checkpoints leave out the frozen backbone's weights when its spec rebuilds them bit for bit (see
    :class:`~src.models.base.RepBenchModule`).

    During fitting the heads are in train mode and the backbone in eval mode (:meth:`train`). Lightning therefore
    warns "Found N module(s) in eval mode at the start of training" in your own process: true and intended (the
    backbone's modules); ``python -m src.train`` silences it.
    """

    rebuilt_from_spec = ("backbone",)

    def __init__(
        self,
        backbone: Backbone | str | Mapping[str, Any] = "embedded:efficientnet_lite0",
        prior_backbone: Backbone | str | Mapping[str, Any] = TaskPriorConfig.prior_backbone,
        num_tasks: int = TaskPriorConfig.num_tasks,
        task_classes: int = TaskPriorConfig.task_classes,
        sample_temperature: float | None = None,
        temperature: float | None = None,
        order: str | None = None,
        eval_scale: str | None = None,
        prior_scale: str | None = None,
        sampler_scale: str | None = None,
        convention: str = TaskPriorConfig.convention,
        block_size: int = TaskPriorConfig.block_size,
        standardize: bool | None = None,
        lr: float = TaskPriorConfig.lr,
        weight_decay: float = TaskPriorConfig.weight_decay,
        optimizer: str = "adam",
        scheduler: str | None = None,
        quantiles: Sequence[float] = TaskPriorConfig.quantiles,
        max_batch: int = FORWARD_BATCH,
        max_samples: int | None = None,
        results_file: str | None = None,
        seed: int = TaskPriorConfig.seed,
        probe_metric: str | None = None,
        probe_split: str | None = None,
    ) -> None:
        if isinstance(prior_backbone, Backbone):
            prior_backbone = getattr(prior_backbone, "spec", None) or prior_backbone.name
        # every Task-Prior option, checked here (before any backbone is built); the study's epochs and split are
        # the trainer's and the data module's, so those fields keep their defaults
        config = TaskPriorConfig(
            num_tasks=num_tasks,
            task_classes=task_classes,
            convention=convention,
            sample_temperature=sample_temperature,
            temperature=temperature,
            order=order,
            eval_scale=eval_scale,
            prior_scale=prior_scale,
            sampler_scale=sampler_scale,
            probe_metric=probe_metric,
            probe_split=probe_split,
            lr=lr,
            weight_decay=weight_decay,
            quantiles=quantiles,
            seed=seed,
            prior_backbone=prior_backbone,
            block_size=block_size,
        )
        super().__init__(backbone)
        self.config = config
        #: the resolved settings (sampler, moments, probe score)
        self.convention = config.settings
        self.backbone.requires_grad_(False).eval()
        self.head = make_probe_head(
            self.convention.probe_head,
            config.num_tasks,
            config.task_classes,
            self.backbone.embed_dim,
            generator=torch.Generator().manual_seed(config.seed),
        )
        #: z-score the features before the heads: ``standardize``, else the convention's ``probe_features``
        self.standardize = (
            self.convention.probe_features == "standardized" if standardize is None else bool(standardize)
        )
        self.val_tasks = TaskAccuracies(config.num_tasks, config.quantiles)
        self._prior_spec = prior_backbone
        self._ready = False
        self.moments: dict[str, float] = {}
        self.last_accuracies: Tensor | None = None

    # ------------------------------------------------------------------ frozen backbone
    def train(self, mode: bool = True) -> TaskPriorProbe:
        """The heads follow ``mode``; the backbone stays in eval mode."""
        super().train(mode)
        self.backbone.eval()  # frozen means frozen
        return self

    def trainable_parameters(self):
        return list(self.head.parameters())

    def configure_optimizers(self) -> Any:
        """The base module's optimizer (``optimizer``: Adam by default, ``lr``, ``weight_decay``); with
        ``scheduler=None`` and a convention whose ``probe_schedule`` is ``"cosine"`` (the authors'), torch's
        ``CosineAnnealingLR(T_max=trainer.max_epochs, eta_min=1e-6)`` stepped once per epoch, as their probe."""
        if self.hparams.get("scheduler") is not None or self.convention.probe_schedule != "cosine":
            return super().configure_optimizers()
        epochs = self.trainer.max_epochs
        if epochs is None or epochs < 1:
            raise ValueError(
                f"convention {self.convention.name!r} anneals the lr over the epochs, but trainer.max_epochs={epochs}; "
                "set trainer.max_epochs (the authors': 100)"
            )
        opt = super().configure_optimizers()  # scheduler=None: the optimizer alone
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=int(epochs), eta_min=COSINE_MIN_LR)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "epoch"}}

    # ------------------------------------------------------------------ data, features, tasks
    def _splits(self) -> tuple[Dataset, Dataset]:
        dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        if dm is None:
            raise RuntimeError("TaskPriorProbe needs a LightningDataModule: trainer.fit(model, datamodule=dm)")
        dm.setup("fit")
        train, val = getattr(dm, "train_dataset", None), getattr(dm, "val_dataset", None)
        if train is None or val is None:
            raise AttributeError(
                f"{type(dm).__name__} must expose train_dataset and val_dataset (the fixed train/test split of "
                "every sampled task), with batches (x, y, index)"
            )
        return train, val

    def prepare_tasks(
        self, train_eval: Tensor, val_eval: Tensor, train_prior: Tensor, val_prior: Tensor
    ) -> dict[str, float]:
        """Sample the labelings of train + val, standardize features and compute E, Var (every rank, same values)."""
        cfg, conv = self.config, self.convention
        n_train = train_eval.shape[0]
        eval_all, prior_all = torch.cat([train_eval, val_eval]), torch.cat([train_prior, val_prior])
        if eval_all.shape[0] != prior_all.shape[0]:
            raise ValueError(f"{eval_all.shape[0]} evaluated but {prior_all.shape[0]} prior feature rows")
        labels = cfg.sample_labels(prior_all)
        shard, reduce = process_seams()
        mean, var = task_prior_moments(
            eval_all,
            prior_all,
            block_size=cfg.block_size,
            convention=conv,
            shard=shard,
            reduce=reduce,
        )
        self._eval_all, self._prior_all = eval_all, prior_all  # (n, D) CPU features, kept for inspection
        st = Standardizer.fit(train_eval) if self.standardize else None
        dev = self.device
        self._train_x = (st(train_eval) if st else train_eval).to(dev)
        self._val_x = (st(val_eval) if st else val_eval).to(dev)
        self._train_y, self._val_y = labels[:, :n_train].to(dev), labels[:, n_train:].to(dev)
        self.moments = {"mean": mean, "var": var, "z": mean / math.sqrt(var) if var > 0 else math.inf}
        self._ready = True
        return self.moments

    def setup(self, stage: str) -> None:
        if self._ready or stage not in ("fit", "validate"):
            return
        train, val = self._splits()
        hp = self.hparams
        if hp.max_samples is not None:
            train = Subset(train, range(min(len(train), int(hp.max_samples))))
            val = Subset(val, range(min(len(val), int(hp.max_samples))))
        with eval_mode(self.backbone):
            ext = FeatureExtractor(self.backbone.embed, device=self.device, max_batch=int(hp.max_batch))
            train_eval, val_eval = dataset_features(train, ext, hp.max_batch), dataset_features(val, ext, hp.max_batch)
        prior = build_backbone(self._prior_spec).to(self.device).eval()
        ext = FeatureExtractor(prior.embed, device=self.device, max_batch=int(hp.max_batch))
        train_prior, val_prior = dataset_features(train, ext, hp.max_batch), dataset_features(val, ext, hp.max_batch)
        del prior, ext
        self.prepare_tasks(train_eval, val_eval, train_prior, val_prior)

    def on_fit_start(self) -> None:
        super().on_fit_start()  # train mode; the backbone stays in eval mode (self.train)
        self.val_tasks.reset()  # states created in __init__ are shared between ddp_spawn workers until reset
        for name in ("_train_x", "_val_x", "_train_y", "_val_y"):
            setattr(self, name, getattr(self, name).to(self.device))

    # ------------------------------------------------------------------ steps
    def _lookup(self, batch: Any, split: str) -> tuple[Tensor, Tensor]:
        x, y = getattr(self, f"_{split}_x"), getattr(self, f"_{split}_y")
        if x.device != self.device:  # e.g. trainer.validate on a GPU without on_fit_start
            x, y = x.to(self.device), y.to(self.device)
            setattr(self, f"_{split}_x", x)
            setattr(self, f"_{split}_y", y)
        _, _, index = unpack_batch(batch)
        if index is None:
            raise ValueError(
                "TaskPriorProbe needs batches (x, y, index) with index the position in the split "
                "(wrap the dataset in src.data.common.IndexedDataset)"
            )
        index = index.to(x.device)
        if self.hparams.max_samples is not None:
            index = index[index < x.shape[0]]
        elif index.numel() and int(index.max()) >= x.shape[0]:
            raise IndexError(f"batch index {int(index.max())} outside the split of {x.shape[0]} images")
        return x[index], y[:, index]

    def training_step(self, batch: Any, batch_idx: int) -> Tensor:
        feats, labels = self._lookup(batch, "train")
        loss = self.head.loss(feats, labels)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite probe loss at step {self.global_step}; lower model.lr")
        self.log("train/loss", loss, prog_bar=True, on_step=True, on_epoch=False, batch_size=max(1, labels.shape[1]))
        return loss

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        feats, labels = self._lookup(batch, "val")
        self.val_tasks.update(self.head(feats), labels)

    def on_validation_epoch_end(self) -> None:
        conv = self.convention
        if (conv.probe_metric, conv.probe_split) == ("accuracy", "test"):
            out = {f"val/task_prior/{k}": float(v) for k, v in self.val_tasks.compute().items()}
            self.last_accuracies = self.val_tasks.accuracies().detach().cpu()  # synced inside compute() only
        else:  # every rank caches every feature and label: the same scores everywhere, no sync needed
            x, y = (self._train_x, self._train_y) if conv.probe_split == "train" else (self._val_x, self._val_y)
            scores = task_scores(self.head, x, y, metric=conv.probe_metric)
            out = {f"val/task_prior/{k}": v for k, v in accuracy_summary(scores, self.val_tasks.quantiles).items()}
            self.last_accuracies = scores.detach().cpu()
        out.update({f"val/task_prior/{k}": v for k, v in self.moments.items()})
        self.log_dict(out, sync_dist=False)  # identical on every rank (synced counts, reduced moments)
        self.val_tasks.reset()

    def on_fit_end(self) -> None:
        path = self.hparams.results_file
        if not path or self.global_rank != 0 or self._trainer is None:
            return
        row = self.results_row()
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(json.dumps(row, indent=1))

    def results_row(self) -> dict[str, Any]:
        """One row of the per-backbone table: spec, E, Var, z, accuracy summary and per-task accuracies."""
        metrics = {
            k.rsplit("/", 1)[-1]: float(v)
            for k, v in self.trainer.callback_metrics.items()
            if k.startswith("val/task_prior/")
        }
        hp = self.hparams
        spec = hp.backbone if isinstance(hp.backbone, str) else hp.backbone.get("name")
        prior = self._prior_spec if isinstance(self._prior_spec, str) else dict(self._prior_spec).get("name")
        return {
            "backbone": spec,
            "prior_backbone": prior,
            "num_tasks": int(hp.num_tasks),
            "task_classes": int(hp.task_classes),
            "convention": self.convention.name,
            "sample_temperature": self.convention.sample_temperature,
            "temperature": self.convention.temperature,
            "probe_metric": self.convention.probe_metric,
            "probe_split": self.convention.probe_split,
            "probe_head": self.convention.probe_head,
            "standardize": self.standardize,
            **metrics,
            "accuracies": [] if self.last_accuracies is None else self.last_accuracies.tolist(),
        }
