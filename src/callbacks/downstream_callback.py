"""``DownstreamProbeCallback``: labelled downstream accuracy of ``pl_module.backbone`` every N epochs — the reference
every label-free monitor has to beat.

The two monitors self-supervised pretraining toolkits log (solo-learn's online linear / k-NN evaluation, lightly's
k-NN and linear classifier callbacks), on frozen features of the data module's labelled splits:

* ``linear_acc``: a multinomial logistic-regression probe (standardised features, L2 penalty ``C``; scikit-learn,
  :func:`~src.divergence_radius.downstream.fit_linear_probe`, the project's one linear probe) fitted on the
  ``fit_split`` images and scored on the held-out ``eval_split`` images;
* ``knn_acc``: weighted k-NN (cosine, k = ``k``, votes exp(s / ``knn_temperature``),
  :func:`~src.divergence_radius.downstream.knn_predict`) with the ``fit_split`` features as the memory bank.

Logs ``val/downstream/linear_acc`` and ``val/downstream/knn_acc`` (``val/downstream`` = ``prefix``). The images are
the splits' first items (deterministic, the same on every rank) of the trainer's data module or of ``data=`` (a
labelled set of the probes' own, when the training data has none), read once before training; they follow the
monitors' input contract (``normalize=``, :mod:`src.callbacks._monitor`). DDP: each rank embeds its round-robin
share, the features are summed into one table on every rank (an exact gather) and every rank fits the same probes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import lightning as L
import torch
from torch import Tensor

from ..divergence_radius.downstream import fit_linear_probe, knn_predict
from ..features import FORWARD_BATCH, FeatureExtractor
from ..images.probe_images import pixel_images
from ..utils.checks import check_int
from ..utils.distributed import Shard, all_reduce_sum
from ..utils.modes import eval_mode
from ..utils.normalization import Normalize
from ._monitor import BackboneMonitor, rank_and_world

__all__ = ["DownstreamProbeCallback"]

_NAME = "DownstreamProbeCallback"
SPLITS = ("train", "val", "test")


def _labelled(dataset: Any, n: int | None, split: str) -> tuple[Tensor, Tensor]:
    """The first ``n`` (None: all) items of a labelled dataset as (images (N, C, H, W) float, labels (N,) long).
    Items are ``(x, y, ...)`` tuples or ``{"image", "label"}`` dicts."""
    count = len(dataset) if n is None else min(int(n), len(dataset))
    xs, ys = [], []
    for i in range(count):
        item = dataset[i]
        x, y = (item["image"], item["label"]) if isinstance(item, dict) else (item[0], item[1])
        xs.append(torch.as_tensor(x))
        ys.append(int(y))
    if not xs:
        raise ValueError(f"{_NAME}: the {split} split is empty; a downstream probe needs labelled images there")
    return torch.stack(xs).float(), torch.tensor(ys, dtype=torch.long)


def _has_splits(data: Any) -> bool:
    """Whether ``data`` already holds its labelled splits (``train_dataset`` and ``test_dataset`` not None)."""
    return all(getattr(data, f"{split}_dataset", None) is not None for split in ("train", "test"))


class DownstreamProbeCallback(BackboneMonitor):
    """Args:
    every_n_epochs, at_train_start: when to compute (every N-th epoch and after the last; optionally before training).
    fit_split, eval_split: the data module's splits (``"train"`` | ``"val"`` | ``"test"``) the probes are fitted on
        and scored on (``{split}_dataset``; default train -> test: the test split is held out from everything).
    max_fit_images, max_eval_images: the first N images of each split (None: all).
    k, knn_temperature: the weighted k-NN (k >= 1, temperature > 0).
    C: inverse L2 penalty of the linear probe (0.1: L-BFGS converges about 10x faster than at 1.0 on 512-d
        standardised features of 1,078 digits, 0.15 vs 1.5 s; the probe is a yardstick compared across runs).
    feature_fn: ``(pl_module, x) -> (N, D)``; default ``pl_module.backbone.embed`` (or ``backbone(x)``).
    normalize: the monitors' input contract (None: the backbone takes [0, 1] pixels).
    skip_unchanged, max_batch, prefix, progress: as the other monitors.
    data: a labelled data module of the probes' own (e.g. ``repbench.data.DigitsDataModule``), for a run whose
        training data has no labels (fine-tuning on photo crops, self-supervised pretraining on unlabelled images);
        its ``prepare_data()`` and ``setup("fit")``/``setup("test")`` run once, before training, on every rank.
        None (default): the trainer's data module. Its images follow ``normalize`` like the training data's.

    Two of one kind in one Trainer: give each its own ``prefix=`` (Lightning refuses two with equal arguments as
    "more than one stateful callback"; :func:`~src.callbacks.check_monitor_prefixes` says it before the Trainer).
    """

    def __init__(
        self,
        every_n_epochs: int = 1,
        at_train_start: bool = False,
        fit_split: str = "train",
        eval_split: str = "test",
        max_fit_images: int | None = 2048,
        max_eval_images: int | None = None,
        k: int = 20,
        knn_temperature: float = 0.07,
        C: float = 0.1,
        feature_fn: Callable[[L.LightningModule, Tensor], Tensor] | None = None,
        normalize: Normalize = None,
        skip_unchanged: bool = True,
        max_batch: int = FORWARD_BATCH,
        prefix: str = "val/downstream",
        progress: bool = True,
        data: Any = None,
    ) -> None:
        super().__init__(every_n_epochs, feature_fn, skip_unchanged, prefix, at_train_start, progress, normalize)
        if data is not None and not (callable(getattr(data, "setup", None)) or _has_splits(data)):
            raise TypeError(
                f"{_NAME}: data must be a LightningDataModule (or an object with train_dataset/val_dataset/"
                f"test_dataset), got {type(data).__name__}; None probes the trainer's own data module"
            )
        for name, split in (("fit_split", fit_split), ("eval_split", eval_split)):
            if split not in SPLITS:
                raise ValueError(f"{_NAME}: {name} must be one of {SPLITS}, got {split!r}")
        if fit_split == eval_split:
            raise ValueError(f"{_NAME}: fit_split and eval_split are both {fit_split!r}; score on held-out images")
        max_fit_images, max_eval_images = (
            None if value is None else check_int(value, f"{_NAME}: {name}", 1, meaning="or None (all)")
            for name, value in (("max_fit_images", max_fit_images), ("max_eval_images", max_eval_images))
        )
        k = check_int(k, f"{_NAME}: k", 1, meaning="neighbours")
        if not float(knn_temperature) > 0 or not float(C) > 0:
            raise ValueError(f"{_NAME}: knn_temperature and C must be > 0, got {knn_temperature!r} and {C!r}")
        self.max_batch = check_int(max_batch, f"{_NAME}: max_batch", 1, meaning="images per forward")
        self.fit_split, self.eval_split = fit_split, eval_split
        self.max_fit_images, self.max_eval_images = max_fit_images, max_eval_images
        self.k, self.knn_temperature, self.C = k, float(knn_temperature), float(C)
        self.datamodule = data  # the labelled probe set of its own (None: the trainer's data module)
        self.data: dict[str, tuple[Tensor, Tensor]] = {}  # split -> (pixel images, labels), read before training

    def _identity(self) -> dict[str, Any]:
        own = {} if self.datamodule is None else {"data": type(self.datamodule).__name__}
        return {"fit": self.fit_split, "eval": self.eval_split, "k": self.k, "max_fit": self.max_fit_images, **own}

    def _check_images(self) -> Tensor | None:
        """The first two fit images, for the encoder check before training."""
        return self.data[self.fit_split][0][:2] if self.data else None

    # ------------------------------------------------------------------ pieces
    def _prepare(self, trainer: Any, pl_module: L.LightningModule) -> None:
        """Read both splits once (before training): images mapped to [0, 1] pixels (``normalize``) and checked."""
        if self.data:
            return
        dm = self.datamodule if self.datamodule is not None else getattr(trainer, "datamodule", None)
        if self.datamodule is not None and not _has_splits(dm):
            if callable(getattr(dm, "prepare_data", None)):
                dm.prepare_data()  # every rank: RepBench's data modules read local files only
            for stage in ("fit", "test"):
                dm.setup(stage)
        whose = "the probe data module (data=)" if self.datamodule is not None else "the data module"
        for split, limit in ((self.fit_split, self.max_fit_images), (self.eval_split, self.max_eval_images)):
            dataset = getattr(dm, f"{split}_dataset", None)
            if dataset is None:
                raise ValueError(
                    f"{_NAME}: {whose} has no {split}_dataset (labelled images to "
                    f"{'fit' if split == self.fit_split else 'score'} the probes on); attach a data module with "
                    f"train/val/test splits (data=, e.g. repbench.data.DigitsDataModule, when the training data has "
                    f"no labels) or choose fit_split= / eval_split="
                )
            x, y = _labelled(dataset, limit, split)
            to_pixels = None if self.normalize is None else self.normalize.to_pixels
            self.data[split] = (pixel_images(x, _NAME, f"{split} images", to_pixels), y)

    def _features(self, trainer: Any, pl_module: L.LightningModule, images: Tensor, title: str) -> Tensor:
        """Features of all ``images`` on every rank: each rank embeds its round-robin share, the shares are summed
        into one zero-initialised (N, D) float64 table (one collective per split; ranks without images join with
        zeros after agreeing on D)."""
        rank, world = rank_and_world(trainer)
        idx = list(Shard(rank, world).indices(images.shape[0]))
        module, fn = self._encoder(pl_module)
        progress = self._progress(trainer, title, len(idx))
        with eval_mode(module):
            ext = FeatureExtractor(progress.counted(fn), device=pl_module.device, max_batch=self.max_batch)
            z = ext(images[idx]).to(torch.float64).cpu() if idx else None
        progress.done()
        if z is not None and z.dim() != 2:
            raise ValueError(f"{_NAME}: the encoder returned shape {tuple(z.shape)}, the probes need (N, D) features")
        d = 0 if z is None else z.shape[1]
        agreed = all_reduce_sum(torch.tensor([float(d), 1.0 if d else 0.0], dtype=torch.float64))
        d = int(round(float(agreed[0]) / max(1.0, float(agreed[1]))))
        table = torch.zeros(images.shape[0], d, dtype=torch.float64)
        if z is not None:
            table[idx] = z
        table = all_reduce_sum(table)
        if not bool(torch.isfinite(table).all()):
            raise FloatingPointError(f"{_NAME}: the backbone produced NaN/inf features (a diverged run)")
        return table

    def compute(self, trainer: Any, pl_module: L.LightningModule) -> dict[str, float]:
        """Linear-probe and k-NN accuracy on ``eval_split``; every rank must call it (the features are summed)."""
        self._ready(trainer, pl_module)
        (x_fit, y_fit), (x_eval, y_eval) = self.data[self.fit_split], self.data[self.eval_split]
        z_fit = self._features(trainer, pl_module, x_fit, "Downstream probe features (fit)")
        z_eval = self._features(trainer, pl_module, x_eval, "Downstream probe features (eval)")
        num_classes = int(max(int(y_fit.max()), int(y_eval.max()))) + 1
        head = fit_linear_probe(z_fit, y_fit, C=self.C)
        linear = float((head(z_eval.float()).argmax(1) == y_eval).double().mean())
        knn = knn_predict(z_fit, y_fit, z_eval, k=self.k, temperature=self.knn_temperature, num_classes=num_classes)
        self.computations += 1
        return {"linear_acc": linear, "knn_acc": float((knn == y_eval).double().mean())}
