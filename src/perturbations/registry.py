"""The nine continuous perturbations of Liu et al., "Robustness of Vision Foundation Models to Common Perturbations"
(arXiv:2604.14973, Table 8), their parameter domains, and the two entry points ``perturb`` and ``parameter_grid``.

Fixed additional parameters follow ImageNet-C (Hendrycks & Dietterich, arXiv:1903.12261) as implemented by the
``imagecorruptions`` module (distribution ``imagecorruptions-imaug``); every choice is listed in docs/perturbations.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import torch
from torch import Tensor

from .blur import defocus_blur, glass_blur
from .elastic import elastic_transform
from .jpeg import jpeg_compression
from .photometric import brightness, contrast, gaussian_noise
from .weather import fog, frost

__all__ = ["PerturbationSpec", "PERTURBATIONS", "perturb", "parameter_grid", "sample_parameters", "MIN_SIZE"]

PerturbationFn = Callable[[Tensor, Tensor, "torch.Generator | None"], Tensor]

MIN_SIZE = 16  # smallest image side accepted (defocus pads 6 px by reflection; glass and elastic need a margin)
DOMAIN_SLACK = 1e-6  # relative slack at the domain's ends (float32 round-off of an endpoint is ~6e-8 relative)


@dataclass(frozen=True)
class PerturbationSpec:
    """One perturbation ``P(x, k)``: ``k`` in ``domain = (a, b)``.

    ``deterministic``: whether P(x, k) is a function of (x, k) alone; random ones draw from a ``torch.Generator``.
    ``fixed``: the fixed additional parameters (ImageNet-C values). ``severities``: imagecorruptions severity -> k for
    the severities whose parameter lies in the domain AND whose other parameters equal ``fixed`` (the tests compare
    against ``imagecorruptions.corrupt`` there).
    """

    name: str
    parameter: str
    domain: tuple[float, float]
    deterministic: bool
    fn: PerturbationFn
    fixed: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    severities: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))


def _spec(name, parameter, domain, deterministic, fn, fixed=None, severities=None) -> PerturbationSpec:
    return PerturbationSpec(
        name, parameter, domain, deterministic, fn, MappingProxyType(fixed or {}), MappingProxyType(severities or {})
    )


PERTURBATIONS: MappingProxyType[str, PerturbationSpec] = MappingProxyType(
    {
        s.name: s
        for s in (
            _spec(
                "jpeg_compression", "quality factor (rounded to an integer)", (30.0, 70.0), True, jpeg_compression,
                {"codec": "libjpeg, 4:2:0 chroma subsampling"},
            ),
            _spec(
                "brightness", "shift of the HSV value channel", (0.1, 0.5), True, brightness,
                {}, {1: 0.1, 2: 0.2, 3: 0.3, 4: 0.4, 5: 0.5},
            ),
            _spec(
                "contrast", "factor on deviations from the per-channel mean", (0.3, 0.7), True, contrast,
                {}, {1: 0.4, 2: 0.3},
            ),
            _spec(
                "defocus_blur", "disk kernel radius (px)", (1.0, 5.0), True, defocus_blur,
                {"alias_blur": 0.5, "border": "reflect101"}, {2: 4.0},
            ),
            _spec(
                "elastic_transform", "displacement scale alpha/250", (0.01, 0.05), False, elastic_transform,
                {"sigma": "0.01 x (H, W)", "max_displacement": "0.005 x H", "truncate": 3.0}, {1: 0.05},
            ),
            _spec(
                "fog", "fog density", (0.5, 2.5), False, fog,
                {"wibble_decay": 2.0}, {1: 1.5, 2: 2.0},
            ),
            _spec(
                "frost", "weight of the frost photo", (0.2, 0.6), False, frost,
                {"image_weight": 1.0}, {1: 0.4},
            ),
            _spec(
                "gaussian_noise", "noise standard deviation", (0.02, 0.10), False, gaussian_noise,
                {}, {1: 0.08},
            ),
            _spec(
                "glass_blur", "Gaussian blur standard deviation (px)", (0.2, 1.0), False, glass_blur,
                {"max_delta": 1, "iterations": 2, "truncate": 4.0, "border": "nearest"}, {1: 0.7},
            ),
        )
    }
)  # fmt: skip


def _get(name: str) -> PerturbationSpec:
    if not isinstance(name, str) or name not in PERTURBATIONS:
        raise ValueError(f"unknown perturbation {name!r}; known: {', '.join(PERTURBATIONS)}")
    return PERTURBATIONS[name]


def _check_images(x: Tensor) -> None:
    if not isinstance(x, Tensor):
        raise TypeError(f"images must be a torch.Tensor (N, 3, H, W) in [0, 1], got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"images must be a float tensor in [0, 1], got dtype {x.dtype}; convert uint8 with x / 255")
    if x.ndim != 4 or x.shape[1] != 3:
        raise ValueError(f"images must have shape (N, 3, H, W), got {tuple(x.shape)}")
    if min(x.shape[2:]) < MIN_SIZE:
        raise ValueError(f"images must be at least {MIN_SIZE}x{MIN_SIZE} px, got {x.shape[2]}x{x.shape[3]}")
    if x.numel() == 0:
        return
    lo, hi = torch.aminmax(x)
    lo, hi = float(lo), float(hi)
    if not (lo >= 0.0 and hi <= 1.0):  # also catches NaN
        raise ValueError(
            f"images must be finite and in [0, 1] pixel space, got values in [{lo}, {hi}]; "
            "pass unnormalized images (normalization happens inside the backbone)"
        )


def _check_k(spec: PerturbationSpec, k, n: int) -> Tensor:
    """``k`` as a float64 CPU tensor of shape (N,) inside the domain (ends clamped within DOMAIN_SLACK)."""
    kt = torch.as_tensor(k.detach().cpu() if isinstance(k, Tensor) else k, dtype=torch.float64)
    if kt.ndim == 0:
        kt = kt.expand(n)
    if kt.ndim != 1 or kt.shape[0] != n:
        raise ValueError(
            f"k must be a number or a 1-D tensor with one value per image ({n}), got shape {tuple(kt.shape)}"
        )
    a, b = spec.domain
    slack = DOMAIN_SLACK * max(abs(a), abs(b))
    if n and not bool(torch.isfinite(kt).all() and (kt >= a - slack).all() and (kt <= b + slack).all()):
        bad = kt[~(torch.isfinite(kt) & (kt >= a - slack) & (kt <= b + slack))][0].item()
        raise ValueError(f"{spec.name}: k = {bad} is outside the domain [{a}, {b}] ({spec.parameter})")
    return kt.clamp(a, b).contiguous()


def perturb(
    x: Tensor, name: str, k: float | Sequence[float] | Tensor, generator: torch.Generator | None = None
) -> Tensor:
    """Apply perturbation ``name`` with parameter ``k`` to images ``x`` (N, 3, H, W) float in [0, 1].

    ``k``: one number for the batch or one per image (N,), inside ``PERTURBATIONS[name].domain``. Random perturbations
    draw from ``generator`` (torch's default generator when None). Returns a new tensor of x's shape, dtype and device,
    in [0, 1]; gradients do not flow through the perturbation (it is data augmentation, applied under no_grad).
    Half-precision images are processed in float32 and cast back.
    """
    spec = _get(name)
    _check_images(x)
    kt = _check_k(spec, k, x.shape[0])
    if x.shape[0] == 0:
        return x.detach().clone()
    work = x.detach()
    if work.dtype not in (torch.float32, torch.float64):
        work = work.to(torch.float32)
    with torch.no_grad():
        y = spec.fn(work, kt.to(device=x.device, dtype=work.dtype), generator)
    return y.to(x.dtype)


def parameter_grid(name: str, m: int, mode: str = "equal", generator: torch.Generator | None = None) -> Tensor:
    """``m`` parameter values from the domain [a, b] of ``name`` as a float64 tensor (m,).

    ``mode="equal"``: a, a + (b − a)/(m − 1), …, b (m >= 2; m = 1 gives the midpoint).
    ``mode="random"``: m independent uniform draws from [a, b] (sorted), from ``generator``.
    (Equally spaced vs random sampling: Liu et al., arXiv:2604.14973, §4 and Fig. 3.)
    """
    spec = _get(name)
    if isinstance(m, bool) or not isinstance(m, int) or m < 1:
        raise ValueError(f"m must be a positive integer, got {m!r}")
    a, b = spec.domain
    if mode == "equal":
        if m == 1:
            return torch.tensor([(a + b) / 2], dtype=torch.float64)
        return torch.linspace(a, b, m, dtype=torch.float64)
    if mode == "random":
        return sample_parameters(name, m, generator).sort().values
    raise ValueError(f"mode must be 'equal' or 'random', got {mode!r}")


def sample_parameters(name: str, n: int, generator: torch.Generator | None = None) -> Tensor:
    """``n`` draws uniform on the domain of ``name`` (float64, CPU; unsorted)."""
    a, b = _get(name).domain
    gen_device = generator.device if generator is not None else "cpu"
    u = torch.rand(n, generator=generator, dtype=torch.float64, device=gen_device).cpu()
    return a + (b - a) * u
