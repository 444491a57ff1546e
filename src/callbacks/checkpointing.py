"""``ExceptionCheckpoint``: keep the training state when a fit dies (exception, SIGTERM, Ctrl-C), and only then.

Lightning's ``OnExceptionCheckpoint`` saves on *every* exception -- also when a resume fails before anything was
trained, writing a checkpoint of the untrained model that looks like a real one -- and deletes its file in
``teardown``. This one saves only while fitting and only after at least one optimizer step (a state worth resuming
from), never deletes it, and records what happened (``exception``, ``saved_path``) so the entry point can report the
exit status and print how to resume.
"""

from __future__ import annotations

import logging
import os

import lightning as L
from lightning.pytorch.callbacks import Checkpoint
from lightning.pytorch.trainer.states import TrainerFn

__all__ = ["ExceptionCheckpoint"]

log = logging.getLogger("repbench")


class ExceptionCheckpoint(Checkpoint):
    """Save ``<dirpath>/<filename>.ckpt`` when ``trainer.fit`` raises after >= 1 optimizer step.

    The checkpoint holds the loops' progress (and the training loader's position, see
    ``src.data.common.ResumableDataLoader``), so ``ckpt_path=<that file>`` resumes exactly where the run stopped,
    also in the middle of an epoch.

    Attributes set on an exception: ``exception`` (what was raised), ``saved_path`` (the file, or None when nothing
    was worth saving).
    """

    FILE_EXTENSION = ".ckpt"

    def __init__(self, dirpath: str | os.PathLike, filename: str = "on_exception") -> None:
        super().__init__()
        if not filename:
            raise ValueError("filename must not be empty, e.g. filename: on_exception")
        self.dirpath = os.fspath(dirpath)
        self.filename = filename
        self.exception: BaseException | None = None
        self.saved_path: str | None = None
        self._saving = False

    @property
    def ckpt_path(self) -> str:
        return os.path.join(self.dirpath, self.filename + self.FILE_EXTENSION)

    def on_exception(self, trainer: L.Trainer, pl_module: L.LightningModule, exception: BaseException) -> None:
        self.exception = exception
        self.saved_path = None
        if trainer.state.fn != TrainerFn.FITTING:
            return
        if trainer.global_step < 1:
            log.warning("fit stopped before the first optimizer step: no exception checkpoint written")
            return
        self._saving = True
        try:
            trainer.save_checkpoint(self.ckpt_path)
        finally:
            self._saving = False
        self.saved_path = self.ckpt_path
        log.warning(
            "fit stopped at step %d (%s): saved %s", trainer.global_step, type(exception).__name__, self.ckpt_path
        )

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        """A run that dies in ``on_train_epoch_start`` (the new epoch is "ready" but not "started") still holds the
        previous epoch's batch counters; Lightning would restore them and skip the whole new epoch. Zero them so
        the resumed run trains that epoch from its first batch."""
        if not self._saving:
            return
        epochs = trainer.fit_loop.epoch_progress.current
        if epochs.ready > epochs.started:
            progress = checkpoint["loops"]["fit_loop"]["epoch_loop.batch_progress"]
            progress["current"] = dict.fromkeys(progress["current"], 0)
            progress["is_last_batch"] = False
