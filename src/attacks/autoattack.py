"""Robust accuracy under torchattacks' port of AutoAttack (``torchattacks.AutoAttack``), for final numbers.

AutoAttack is Croce & Hein, "Reliable evaluation of adversarial robustness with an ensemble of diverse
parameter-free attacks" (ICML 2020, arXiv:2003.01690). What runs here is torchattacks' re-implementation of it, not
the authors' reference code (github.com/fra31/auto-attack, which RobustBench uses); its numbers are not guaranteed
to equal the reference's, so metric names and log lines say ``autoattack_torchattacks`` (:mod:`src.attacks.naming`).

torchattacks expects its inputs in [0, 1] pixel space and normalization inside the model (checked in torchattacks
3.5.1: ``Attack`` documents "It must have a range [0, 1]"; APGD, APGD-T, FAB and Square clamp their iterates to
[0, 1]; ``get_logits`` normalizes only after ``set_normalization_used``, which we never call). That is RepBench's
image convention (src/backbones/base.py): pass the model that maps pixel images to logits (e.g. a probe whose backbone adapter
normalizes inside), never pre-normalized images.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from torch import Tensor, nn

__all__ = ["autoattack_accuracy", "autoattack_correct"]

from ..utils.modes import preserved_modes

_TORCHATTACKS_NORMS = {"l2": "L2", "linf": "Linf"}
_MIN_CLASSES = {"standard": 4, "plus": 4, "rand": 3}  # targeted DLR sorts 4 logits; untargeted DLR 3


@contextmanager
def _preserved_model_state(model: nn.Module) -> Iterator[None]:
    """Freeze parameters for the duration (FAB calls ``.backward``, which would accumulate into ``param.grad``) and
    restore every module's train/eval mode (torchattacks calls ``model.eval()`` and then ``model.train()`` on the
    whole model, which would un-freeze submodules that were in eval mode) and every ``requires_grad`` flag."""
    flags = [(p, p.requires_grad) for p in model.parameters()]
    with preserved_modes(model):
        try:
            for p, _ in flags:
                p.requires_grad_(False)
            yield
        finally:
            for p, flag in flags:
                p.requires_grad_(flag)


def _validate(x: Tensor, y: Tensor, eps: float, norm: str, version: str, batch_size: int) -> None:
    if norm not in _TORCHATTACKS_NORMS:
        raise ValueError(f"unknown norm {norm!r}; expected one of {tuple(_TORCHATTACKS_NORMS)}")
    if version not in _MIN_CLASSES:
        raise ValueError(f"unknown AutoAttack version {version!r}; expected one of {tuple(_MIN_CLASSES)}")
    if not math.isfinite(float(eps)) or float(eps) < 0:
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    if int(batch_size) < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size!r}")
    if x.shape[0] != y.shape[0]:
        raise ValueError(f"x and y hold different numbers of samples: {x.shape[0]} vs {y.shape[0]}")
    if version != "rand" and norm == "l2" and x.dim() == 4 and min(x.shape[-2:]) < 5:
        raise ValueError(f"torchattacks' l2 Square attack needs images of at least 5x5 pixels, got {tuple(x.shape)}")
    if x.numel() and (float(x.min()) < 0.0 or float(x.max()) > 1.0):
        raise ValueError(
            f"AutoAttack needs images in [0, 1] pixel space, got values in [{float(x.min()):.3g}, "
            f"{float(x.max()):.3g}]; do not normalize images yourself (normalization belongs inside the model)"
        )


def autoattack_correct(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    *,
    eps: float,
    norm: str = "l2",
    version: str = "standard",
    seed: int = 0,
    batch_size: int = 256,
) -> Tensor:
    """Per-sample robust correctness (bool, shape (N,)) of ``model`` under torchattacks' port of AutoAttack with
    radius ``eps``.

    Summing these (a sufficient statistic) is how callers combine results across batches and DDP ranks.

    Args:
        model: ``nn.Module`` mapping pixel-space images in [0, 1] to logits (N, C), on ``x``'s device, in eval mode
            (torchattacks switches it to eval for the attack; every module's mode, ``requires_grad`` flag and
            ``.grad`` are restored/untouched afterwards).
        x: images (N, 3, H, W) float in [0, 1]. y: class indices (N,).
        eps: l2 or linf radius in pixel space; 0 gives clean correctness.
        norm: ``"l2"`` or ``"linf"`` (torchattacks' ``"L2"`` / ``"Linf"``).
        version: ``"standard"`` (APGD-CE, APGD-T, FAB-T, Square; needs >= 4 classes), ``"plus"`` or ``"rand"``.
        seed: seed of the attacks' random starts. torchattacks seeds torch's global RNG with it; the caller's global
            RNG state is saved and restored around the call.
        batch_size: images attacked at once.
    """
    import torchattacks

    _validate(x, y, eps, norm, version, batch_size)
    if x.shape[0] == 0:
        return torch.zeros(0, dtype=torch.bool, device=x.device)
    rng_devices = [x.device] if x.device.type == "cuda" else []
    with torch.inference_mode(False), _preserved_model_state(model), torch.random.fork_rng(devices=rng_devices):
        x, y = x.detach().clone(), y.detach().clone()  # normal tensors even when called under inference_mode
        with torch.no_grad():
            num_classes = int(model(x[:1]).shape[-1])
        if float(eps) > 0 and num_classes < _MIN_CLASSES[version]:
            raise ValueError(
                f"AutoAttack version {version!r} needs at least {_MIN_CLASSES[version]} classes (its DLR losses sort "
                f"that many logits), the model has {num_classes}; use src.attacks.pgd_attack for this model"
            )
        attack = None
        if float(eps) > 0:
            attack = torchattacks.AutoAttack(
                model,
                norm=_TORCHATTACKS_NORMS[norm],
                eps=float(eps),
                version=version,
                n_classes=num_classes,
                seed=int(seed),
                verbose=False,
            )
            attack.set_device(x.device)
        correct = []
        for start in range(0, x.shape[0], int(batch_size)):
            xb, yb = x[start : start + int(batch_size)], y[start : start + int(batch_size)]
            x_adv = attack(xb, yb) if attack is not None else xb
            with torch.no_grad():
                correct.append(model(x_adv).argmax(dim=-1) == yb)
    return torch.cat(correct)


def autoattack_accuracy(
    model: nn.Module,
    x: Tensor,
    y: Tensor,
    *,
    eps: float,
    norm: str = "l2",
    version: str = "standard",
    seed: int = 0,
    batch_size: int = 256,
) -> float:
    """Robust accuracy in [0, 1] of ``model`` on (x, y) under torchattacks' port of AutoAttack (see
    :func:`autoattack_correct`).

    Under DDP each rank should attack its own shard and sum-reduce ``autoattack_correct(...).sum()`` and the sample
    count; this function reports the local shard only.
    """
    correct = autoattack_correct(model, x, y, eps=eps, norm=norm, version=version, seed=seed, batch_size=batch_size)
    return float(correct.float().mean()) if correct.numel() else float("nan")  # no samples: nan
