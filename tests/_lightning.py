"""A quiet single-process CPU ``lightning.Trainer`` for the tests: no logger, checkpoints, progress bar or summary
unless a test asks for them."""

from __future__ import annotations

from typing import Any

import lightning as L

QUIET = {
    "accelerator": "cpu",
    "logger": False,
    "enable_checkpointing": False,
    "enable_progress_bar": False,
    "enable_model_summary": False,
}


def quiet_trainer(**kwargs: Any) -> L.Trainer:
    """``L.Trainer(**QUIET, **kwargs)``; ``kwargs`` override the quiet defaults."""
    return L.Trainer(**{**QUIET, **kwargs})
