"""AutoAttack on a trained probe's test samples, as ``python -m src.eval eval.autoattack=true`` and
``python -m src.train autoattack=true`` report it (one owner for both entry points): torchattacks' port of
AutoAttack (Croce & Hein, ICML 2020, arXiv:2003.01690) at every ``model.eval_epsilons``."""

from __future__ import annotations

import logging
from typing import Any

import lightning as L
import torch

from ..attacks.naming import adv_metric_name, autoattack_label
from .base import unpack_batch

log = logging.getLogger("repbench")

__all__ = ["autoattack_metrics"]


def _first_samples(loader: Any, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys, have = [], [], 0
    for batch in loader:
        x, y, _ = unpack_batch(batch)
        xs.append(x)
        ys.append(y)
        have += len(y)
        if have >= n:
            break
    return torch.cat(xs)[:n], torch.cat(ys)[:n]


def autoattack_metrics(
    model: L.LightningModule, datamodule: L.LightningDataModule, *, version: str, samples: int, seed: int
) -> dict[str, float]:
    """torchattacks' port of AutoAttack on the first ``samples`` test samples at every ``model.eval_epsilons``, in the
    norm of ``model.eval_attack_cfg``: ``{test/adv/acc_autoattack_torchattacks_<version>_<norm>_<eps>: accuracy}``
    (``python -m src.eval eval.autoattack=true``; ``python -m src.train autoattack=true`` after its test)."""
    from ..attacks.autoattack import autoattack_accuracy

    attack = dict(getattr(model, "eval_attack_cfg", {}) or {})
    datamodule.setup("test")
    x, y = _first_samples(datamodule.test_dataloader(), samples)
    model.eval()
    norm = attack["norm"]
    log.info("AutoAttack (torchattacks' port, version %r, %s) on the first %d test samples", version, norm, len(y))
    return {
        adv_metric_name("test", autoattack_label(version), norm, eps): float(
            autoattack_accuracy(model, x, y, eps=eps, norm=norm, version=version, seed=seed)
        )
        for eps in model.eval_epsilons
    }
