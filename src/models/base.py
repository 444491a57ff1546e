"""``RepBenchModule``: what every RepBench LightningModule shares.

* one ``save_hyperparameters`` call holding every ``__init__`` argument, the backbone as a plain spec (name and
  options), so that a checkpoint rebuilds the same architecture (``load_module`` / ``load_from_checkpoint``);
* the backbone built from that spec (:func:`build_backbone`) and exposed as ``self.backbone`` (what the monitoring
  callbacks look for);
* batch unpacking (:func:`unpack_batch`: ``(x, y)``, ``(x, y, index)`` or ``{"image", "label", "index"}``);
* label validation against ``num_classes``;
* the optimizer (``adam`` | ``adamw`` | ``sgd``) and the per-step cosine schedule, from ``hparams``;
* the checkpoint class record that the allow-list of :mod:`src.utils.checkpoint` checks;
* checkpoints without the frozen weights that the module rebuilds from its backbone spec (the submodules named in
  :attr:`RepBenchModule.rebuilt_from_spec`, e.g. a probe's backbone): at the first save the spec is rebuilt once and
  compared bit for bit (sha256) with the live weights; when equal the checkpoint keeps only their fingerprint
  (:func:`~src.backbones.weights.omit_rebuilt_state`) and loading rebuilds them and checks the fingerprint
  (:func:`~src.backbones.weights.restore_rebuilt_state`: a changed weights file is refused); when not (random
  initialisation, weights changed after building, a cast to another dtype) the checkpoint stores them as before.
  Cost: one extra backbone build on the CPU at the first save (0.25 s for the embedded Lite0; for hub models the
  time to read their weights file again) and a sha256 of the frozen weights at every save and load (~15 ms for
  Lite0's 19 MB).
* train mode for fitting: Lightning >= 2.2 no longer calls ``model.train()`` when a fit starts (it keeps the modes the
  modules have) and :func:`build_backbone` returns backbones in eval mode, so without this rule a backbone would
  train with frozen BatchNorm statistics and without dropout. :meth:`RepBenchModule.on_fit_start`,
  :meth:`~RepBenchModule.on_train_start` and :meth:`~RepBenchModule.on_train_epoch_start` call ``self.train()``;
  each subclass's ``train(mode)`` override keeps its deliberately frozen parts (a probe's backbone, the fine-tune
  teacher, ``freeze_bn_stats`` BatchNorm layers) in eval mode. Lightning then warns "Found N module(s) in eval mode
  at the start of training" for exactly those parts: truthful, and silenced only around the fit of RepBench's own
  ``python -m src.train``.

Subclasses call ``super().__init__(backbone)`` first thing in ``__init__`` (before changing any argument), override
:meth:`trainable_parameters`, call ``super().on_fit_start()`` / ``super().on_train_start()`` /
``super().on_train_epoch_start()`` first when they override those hooks, keep frozen parts in eval mode by
overriding ``train(mode)``, and are decorated with ``@register_module``.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import lightning as L
import torch
from lightning.pytorch.utilities.parsing import collect_init_args
from torch import Tensor, nn

from ..backbones import Backbone
from ..backbones.spec import backbone_spec, build_backbone, plain
from ..backbones.weights import omit_rebuilt_state, restore_rebuilt_state, state_fingerprint
from ..utils.checkpoint import record_module_class

__all__ = ["OPTIMIZERS", "SCHEDULERS", "RepBenchModule", "backbone_spec", "build_backbone", "unpack_batch"]

log = logging.getLogger("repbench")

OPTIMIZERS = ("adam", "adamw", "sgd")
SCHEDULERS = ("cosine", "none", None)


def unpack_batch(batch: Any) -> tuple[Tensor, Tensor, Tensor | None]:
    """``(x, y, index or None)`` from ``(x, y)``, ``(x, y, index)`` or a mapping with image/label(/index)."""
    if isinstance(batch, Mapping):
        return batch["image"], batch["label"], batch.get("index")
    if isinstance(batch, Sequence) and len(batch) in (2, 3):
        return batch[0], batch[1], batch[2] if len(batch) == 3 else None
    raise TypeError(
        "a batch must be (images, labels), (images, labels, index) or {'image', 'label'[, 'index']}, "
        f"got {type(batch).__name__}" + (f" of length {len(batch)}" if isinstance(batch, Sequence) else "")
    )


def check_optimizer_hparams(hparams: Mapping[str, Any]) -> None:
    """``lr``, ``weight_decay`` and ``momentum`` (those present) as finite numbers >= 0 (what torch's optimizers
    accept); a ValueError naming the config key ``model.<name>`` otherwise. They are read only when the fit starts
    (:meth:`RepBenchModule.configure_optimizers`), so without this check ``model.lr=abc`` failed there with
    float()'s message, after the data, model, callbacks and trainer were built."""
    for key in ("lr", "weight_decay", "momentum"):
        if key not in hparams:
            continue
        value = hparams[key]
        try:
            number = math.nan if isinstance(value, bool) else float(value)
        except (TypeError, ValueError):
            number = math.nan
        if not (math.isfinite(number) and number >= 0.0):
            raise ValueError(f"model.{key} must be a finite number >= 0, got {value!r}; e.g. model.{key}=0.001")


class RepBenchModule(L.LightningModule):
    """Base of RepBench's LightningModules (see the module docstring).

    Hyperparameters the shared parts read (when the subclass has them): ``num_classes``, ``optimizer``, ``lr``,
    ``weight_decay``, ``momentum`` (SGD; 0.9 when absent), ``scheduler`` (``"cosine"`` per step, or ``None``).

    ``rebuilt_from_spec``: names of frozen submodules whose weights are those of ``build_backbone(hparams.backbone)``
    (never trained); checkpoints leave them out when the spec rebuilds them bit for bit (module docstring).
    """

    rebuilt_from_spec: tuple[str, ...] = ()

    def __init__(self, backbone: Backbone | str | Mapping[str, Any]) -> None:
        super().__init__()
        frame = inspect.currentframe()
        caller = frame.f_back if frame is not None else None
        hparams: dict[str, Any] = {}
        if caller is not None:  # the subclasses' __init__ arguments, outermost class last (as Lightning does)
            for level in collect_init_args(caller, [], classes=(RepBenchModule,)):
                hparams.update(level)
        hparams = {k: plain(v) for k, v in hparams.items()}
        hparams["backbone"] = backbone_spec(backbone)
        optimizer, scheduler = hparams.get("optimizer", "adam"), hparams.get("scheduler", None)
        if optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be one of {OPTIMIZERS}, got {optimizer!r}")
        if scheduler not in SCHEDULERS:
            raise ValueError(f"scheduler must be 'cosine' or None, got {scheduler!r}")
        if "num_classes" in hparams and int(hparams["num_classes"]) < 2:
            raise ValueError(f"num_classes must be >= 2, got {hparams['num_classes']}")
        check_optimizer_hparams(hparams)
        self.save_hyperparameters(hparams)
        self.backbone = build_backbone(backbone)
        self._spec_fingerprint: str | None = None  # sha256 of build_backbone(hparams.backbone), at the first save
        self._spec_checked = False
        self._rebuilt_logged = False

    # ------------------------------------------------------------------ data
    unpack_batch = staticmethod(unpack_batch)

    def check_labels(self, y: Tensor, stage: str) -> None:
        """Integer labels in ``[0, num_classes)``, with the config key to fix named."""
        if y.dtype not in (torch.int64, torch.int32, torch.int16, torch.uint8):
            raise TypeError(f"{stage} labels must be integer class indices, got dtype {y.dtype}")
        n = int(self.hparams.num_classes)
        if y.numel() and (int(y.min()) < 0 or int(y.max()) >= n):
            raise ValueError(
                f"{stage} labels lie in [{int(y.min())}, {int(y.max())}] but model.num_classes={n}; "
                "set model.num_classes to the data's number of classes"
            )

    def check_datamodule_classes(self) -> None:
        """The attached datamodule's ``num_classes`` (when it has one) must equal ``model.num_classes``."""
        dm = getattr(self.trainer, "datamodule", None) if self._trainer is not None else None
        n = getattr(dm, "num_classes", None)
        if n is not None and "num_classes" in self.hparams and int(n) != int(self.hparams.num_classes):
            raise ValueError(
                f"the data has {n} classes but model.num_classes={self.hparams.num_classes}; set model.num_classes={n}"
            )

    # ------------------------------------------------------------ optimisation
    def trainable_parameters(self) -> Iterable[nn.Parameter]:
        """What the optimizer updates (default: every parameter that requires a gradient)."""
        return [p for p in self.parameters() if p.requires_grad]

    def configure_optimizers(self) -> Any:
        hp = self.hparams
        params = list(self.trainable_parameters())
        name, lr, wd = hp.get("optimizer", "adam"), float(hp.lr), float(hp.get("weight_decay", 0.0))
        if name == "sgd":
            opt: torch.optim.Optimizer = torch.optim.SGD(
                params, lr=lr, momentum=float(hp.get("momentum", 0.9)), weight_decay=wd
            )
        elif name == "adamw":
            opt = torch.optim.AdamW(params, lr=lr, weight_decay=wd)
        else:
            opt = torch.optim.Adam(params, lr=lr, weight_decay=wd)
        if hp.get("scheduler") in (None, "none"):
            return opt
        total = max(1, int(self.trainer.estimated_stepping_batches))
        sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=total)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}

    # ------------------------------------------------------------------ modes
    # Three hooks, each one line, because no single Lightning hook precedes every first training step:
    # on_fit_start runs before Lightning's "module(s) in eval mode at the start of training" check (which runs after
    # the sanity check, before on_train_start), so that warning lists only the deliberately frozen parts, and the
    # sanity-check validation captures and restores these modes; on_train_start is the last hook before the first
    # step of every fit, a mid-epoch resume included (where on_train_epoch_start is skipped), and runs after the
    # callbacks' on_train_start; on_train_epoch_start covers every later epoch (after the previous epoch's validation
    # and on_train_epoch_end hooks). A validation inside an epoch restores the modes it captured (train). Setting the
    # mode in on_validation_end would do nothing: Lightning's restore runs after it.
    def on_fit_start(self) -> None:
        """Train mode (frozen parts: see ``train``). Subclasses that override this hook call it first."""
        self.train()

    def on_train_start(self) -> None:
        """Train mode (frozen parts: see ``train``). Subclasses that override this hook call it first."""
        self.train()

    def on_train_epoch_start(self) -> None:
        """Train mode (frozen parts: see ``train``). Subclasses that override this hook call it first."""
        self.train()

    # ------------------------------------------------------------ checkpoints
    def spec_fingerprint(self) -> str | None:
        """sha256 of the weights ``build_backbone(hparams.backbone)`` gives, built once on the CPU (global RNG state
        preserved); None when the spec cannot be rebuilt here (the checkpoint then stores the frozen weights)."""
        if not self._spec_checked:
            self._spec_checked = True
            try:
                with torch.random.fork_rng(devices=[]):
                    self._spec_fingerprint = state_fingerprint(build_backbone(self.hparams.backbone).state_dict())
            except Exception as err:  # any failure only means: keep the weights in the checkpoint
                log.warning(
                    "backbone=%r could not be rebuilt to check it (%s: %s); checkpoints store the frozen weights",
                    self.hparams.backbone,
                    type(err).__name__,
                    err,
                )
        return self._spec_fingerprint

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        record_module_class(self, checkpoint)
        for name in self.rebuilt_from_spec:
            state = getattr(self, name).state_dict()
            live, spec = state_fingerprint(state), self.spec_fingerprint()
            first, self._rebuilt_logged = not self._rebuilt_logged, True
            size_mb = sum(t.numel() * t.element_size() for t in state.values()) / 1e6
            if live == spec:
                checkpoint["state_dict"] = omit_rebuilt_state(checkpoint["state_dict"], f"{name}.", live)
                if first:
                    log.info(
                        "checkpoints leave out the frozen %s (%.1f MB): rebuilt from backbone=%r on load and checked "
                        "against its sha256",
                        name,
                        size_mb,
                        self.hparams.backbone,
                    )
            elif first and spec is not None:
                log.info(
                    "the frozen %s is not what backbone=%r rebuilds (random initialisation, or weights changed after "
                    "building): checkpoints store its weights (%.1f MB)",
                    name,
                    self.hparams.backbone,
                    size_mb,
                )

    def on_load_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Put back the frozen weights a checkpoint left out (rebuilt from the spec in ``__init__``), refusing them
        if they differ from those the checkpoint was trained with."""
        if "state_dict" in checkpoint:
            what = f"the {type(self).__name__} checkpoint (backbone={self.hparams.get('backbone')!r})"
            checkpoint["state_dict"] = restore_rebuilt_state(checkpoint["state_dict"], self, what)
