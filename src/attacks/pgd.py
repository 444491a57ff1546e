"""Projected gradient descent (Madry et al., 2018) in pixel space, l2 or linf, as one pure function.

Images follow the one convention of RepBench (src/backbones/base.py): float (N, 3, H, W) in [0, 1] pixel space; normalization
lives inside the model, so the threat model ``||delta|| <= eps`` is measured in pixels, per sample.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

__all__ = ["pgd_attack", "random_init", "project"]

NORMS = ("l2", "linf")
_TINY = 1e-12  # keeps zero-norm gradients and zero perturbations finite (no 0/0)


def _per_sample_l2(t: Tensor) -> Tensor:
    """l2 norm of every sample, shaped (N, 1, ..., 1) to broadcast against ``t``."""
    return t.flatten(1).norm(p=2, dim=1).view(-1, *([1] * (t.dim() - 1)))


def project(delta: Tensor, eps: float, norm: str) -> Tensor:
    """Project every sample of ``delta`` onto the ``norm`` ball of radius ``eps`` (closest point)."""
    if norm == "linf":
        return delta.clamp(-eps, eps)
    scale = (eps / _per_sample_l2(delta).clamp_min(_TINY)).clamp(max=1.0)
    return delta * scale


def random_init(x: Tensor, eps: float, norm: str, generator: torch.Generator | None = None) -> Tensor:
    """A random perturbation drawn uniformly from the ``norm`` ball of radius ``eps`` (one per sample).

    linf: uniform in the box [-eps, eps]^d. l2: uniform in the ball, i.e. a Gaussian direction normalised to unit
    length times radius ``eps * U^(1/d)``. All draws come from ``generator`` (on ``x``'s device) when given.
    """
    if norm == "linf":
        u = torch.rand(x.shape, generator=generator, device=x.device, dtype=x.dtype)
        return (2.0 * u - 1.0) * eps
    direction = torch.randn(x.shape, generator=generator, device=x.device, dtype=x.dtype)
    direction = direction / _per_sample_l2(direction).clamp_min(_TINY)
    d = x[0].numel()
    u = torch.rand((x.shape[0],) + (1,) * (x.dim() - 1), generator=generator, device=x.device, dtype=x.dtype)
    return direction * (eps * u.pow(1.0 / d))


def _ascent_direction(grad: Tensor, norm: str) -> Tensor:
    """Steepest ascent direction of unit ``norm`` length: sign(g) for linf, g / ||g||_2 per sample for l2."""
    if norm == "linf":
        return grad.sign()
    return grad / _per_sample_l2(grad).clamp_min(_TINY)


def _clip_delta(x: Tensor, delta: Tensor, clip: tuple[float, float] | None) -> Tensor:
    """The perturbation that keeps ``x + delta`` inside ``clip``; for ``x`` inside the range this only shrinks
    every coordinate of ``delta`` towards 0, so it never leaves the norm ball."""
    if clip is None:
        return delta
    return (x + delta).clamp(clip[0], clip[1]) - x


def _validate(x: Tensor, eps: float, norm: str, steps: int, step_size: float | None, clip) -> None:
    if not isinstance(x, Tensor) or not x.is_floating_point():
        raise TypeError(f"x must be a floating-point tensor, got {type(x).__name__} {getattr(x, 'dtype', '')}")
    if norm not in NORMS:
        raise ValueError(f"unknown norm {norm!r}; expected one of {NORMS}")
    try:
        eps_value = float(eps)
    except (TypeError, ValueError):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}") from None
    if not math.isfinite(eps_value) or eps_value < 0:
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    eps = eps_value
    if eps > 0 and (int(steps) != steps or steps < 1):
        raise ValueError(f"steps must be an integer >= 1 when eps > 0, got {steps!r}")
    if step_size is not None and not (math.isfinite(float(step_size)) and float(step_size) > 0):
        raise ValueError(f"step_size must be a finite number > 0 (or None for 2.5 * eps / steps), got {step_size!r}")
    if clip is not None:
        lo, hi = float(clip[0]), float(clip[1])
        if not lo < hi:
            raise ValueError(f"clip must be (low, high) with low < high, got {clip!r}")
        if x.numel() and (float(x.min()) < lo - 1e-4 or float(x.max()) > hi + 1e-4):
            raise ValueError(
                f"x lies in [{float(x.min()):.3g}, {float(x.max()):.3g}], outside clip={clip}; images are [0, 1] pixel "
                "space (do not normalize them yourself); pass clip=None for synthetic data outside that range"
            )


def pgd_attack(
    forward: Callable[[Tensor], Tensor],
    x: Tensor,
    y: Tensor,
    *,
    eps: float,
    norm: str = "l2",
    steps: int = 10,
    step_size: float | None = None,
    random_start: bool = True,
    clip: tuple[float, float] | None = (0.0, 1.0),
    loss_fn: Callable[[Tensor, Tensor], Tensor] = F.cross_entropy,
    generator: torch.Generator | None = None,
) -> Tensor:
    """Untargeted PGD: approximately maximise ``loss_fn(forward(x + delta), y)`` over ``||delta|| <= eps`` per sample.

    Args:
        forward: maps pixel-space images (N, ...) to logits; put the model in eval mode first (this function never
            changes any train/eval mode and never touches parameter ``.grad``: gradients go to ``delta`` only, through
            ``torch.autograd.grad``).
        x: clean inputs (N, ...), float; in [0, 1] when ``clip`` is given.
        y: targets as ``loss_fn`` expects them (class indices for cross-entropy).
        eps: radius of the threat model in pixel space (``norm`` of the per-sample perturbation). 0 returns a copy of
            ``x`` without calling ``forward``.
        norm: ``"l2"`` (step along the per-sample l2-normalised gradient, project onto the l2 ball) or ``"linf"``
            (sign step, clamp to the box).
        steps: number of ascent steps (>= 1 when eps > 0).
        step_size: defaults to ``2.5 * eps / steps`` (Madry et al.).
        random_start: start from a uniform draw in the ball (linf: box; l2: ball), clipped to the image range.
        clip: value range of valid images; ``x + delta`` is kept inside it. ``None`` for synthetic data.
        loss_fn: ``(logits, y) -> scalar`` loss to maximise; per-sample terms must not interact (any reduction
            scale is fine: the steps are normalised).
        generator: ``torch.Generator`` on ``x``'s device for the random start; pass a seeded one for reproducible,
            resumable runs (default: the global RNG).

    Returns:
        ``x_adv``: detached tensor like ``x`` with ``||x_adv - x|| <= eps`` per sample (and inside ``clip``). The last
        iterate is returned (Madry et al.), not the best one seen.

    Works inside ``torch.no_grad()`` and ``torch.inference_mode()`` (e.g. a Lightning validation step): the attack
    locally re-enables autograd on copies of ``x`` and ``y``.
    """
    _validate(x, eps, norm, steps, step_size, clip)
    eps = float(eps)
    if eps == 0:
        return x.detach().clone()
    alpha = float(step_size) if step_size is not None else 2.5 * eps / steps
    with torch.inference_mode(False), torch.enable_grad():
        # Copies made outside inference mode: tensors created under torch.inference_mode() cannot enter autograd.
        x0 = x.detach().clone()
        y0 = y.detach().clone() if isinstance(y, Tensor) else y
        if random_start:
            delta = _clip_delta(x0, random_init(x0, eps, norm, generator), clip)
        else:
            delta = torch.zeros_like(x0)
        for _ in range(int(steps)):
            delta.requires_grad_(True)
            loss = loss_fn(forward(x0 + delta), y0)
            (grad,) = torch.autograd.grad(loss, delta)
            step = delta.detach() + alpha * _ascent_direction(grad.detach(), norm)
            delta = _clip_delta(x0, project(step, eps, norm), clip)
        x_adv = (x0 + delta).detach()
        if clip is not None:
            x_adv = x_adv.clamp(clip[0], clip[1])
    return x_adv
