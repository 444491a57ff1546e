"""The nine continuous perturbations of Liu et al., "Robustness of Vision Foundation Models to Common Perturbations"
(arXiv:2604.14973, Table 8), their parameter domains, and the two entry points ``perturb`` and ``parameter_grid``.

Fixed additional parameters follow ImageNet-C (Hendrycks & Dietterich, arXiv:1903.12261) as implemented by the
``imagecorruptions`` module (distribution ``imagecorruptions-imaug``); every choice is listed in docs/perturbations.md.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType

import torch
from torch import Tensor

from ..utils.checks import check_int
from ..utils.numerics import check_generator
from .blur import defocus_blur, glass_blur
from .elastic import elastic_transform
from .jpeg import jpeg_compression
from .photometric import brightness, contrast, gaussian_noise
from .weather import fog, frost

__all__ = [
    "PerturbationSpec",
    "PERTURBATIONS",
    "SAMPLING_MODES",
    "SEVERITY_LEVELS",
    "check_m",
    "check_mode",
    "check_perturbable_images",
    "check_perturbation_names",
    "perturb",
    "parameter_grid",
    "sample_parameters",
    "severity_parameter",
    "MIN_SIZE",
]

PerturbationFn = Callable[[Tensor, Tensor, "torch.Generator | None"], Tensor]

MIN_SIZE = 16  # smallest image side accepted (defocus pads 6 px by reflection; glass and elastic need a margin)
DOMAIN_SLACK = 1e-6  # relative slack at the domain's ends (float32 round-off of an endpoint is ~6e-8 relative)


@dataclass(frozen=True)
class PerturbationSpec:
    """One perturbation ``P(x, k)``: ``k`` in ``domain = (a, b)``.

    ``deterministic``: whether P(x, k) is a function of (x, k) alone; random ones draw from a ``torch.Generator``.
    ``fixed``: the fixed additional parameters (ImageNet-C values). ``imagenet_c``: ImageNet-C's value of k at
    severities 1..5 (``imagecorruptions``' per-severity tables in our units); ``imagenet_c_other``: the severities at
    which ImageNet-C ALSO changes a parameter that we keep fixed (what it uses there). ``severities``: severity -> k
    for the severities that ``k`` reproduces exactly: k inside the domain and every other parameter equal to
    ``fixed`` (derived from the two fields above; ``perturb(..., severity=s)`` accepts exactly these).
    """

    name: str
    parameter: str
    domain: tuple[float, float]
    deterministic: bool
    fn: PerturbationFn
    fixed: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    imagenet_c: tuple[float, ...] = ()
    imagenet_c_other: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))
    severities: MappingProxyType = field(default_factory=lambda: MappingProxyType({}))


def _spec(name, parameter, domain, deterministic, fn, fixed, imagenet_c, other=None) -> PerturbationSpec:
    a, b = domain
    other = other or {}
    exact = {s: k for s, k in enumerate(imagenet_c, 1) if a <= k <= b and s not in other}
    return PerturbationSpec(
        name,
        parameter,
        domain,
        deterministic,
        fn,
        MappingProxyType(fixed),
        tuple(imagenet_c),
        MappingProxyType(other),
        MappingProxyType(exact),
    )


#: ImageNet-C's severity levels (``imagecorruptions.corrupt(severity=1..5)``)
SEVERITY_LEVELS = (1, 2, 3, 4, 5)

PERTURBATIONS: MappingProxyType[str, PerturbationSpec] = MappingProxyType(
    {
        s.name: s
        for s in (
            _spec(
                "jpeg_compression", "quality factor (rounded to an integer)", (30.0, 70.0), True, jpeg_compression,
                {"codec": "libjpeg, 4:2:0 chroma subsampling"}, (25, 18, 15, 10, 7),
            ),
            _spec(
                "brightness", "shift of the HSV value channel", (0.1, 0.5), True, brightness,
                {}, (0.1, 0.2, 0.3, 0.4, 0.5),
            ),
            _spec(
                "contrast", "factor on deviations from the per-channel mean", (0.3, 0.7), True, contrast,
                {}, (0.4, 0.3, 0.2, 0.1, 0.05),
            ),
            _spec(
                "defocus_blur", "disk kernel radius (px)", (1.0, 5.0), True, defocus_blur,
                {"alias_blur": 0.5, "border": "reflect101"}, (3, 4, 6, 8, 10), {1: "alias_blur 0.1"},
            ),
            _spec(
                "elastic_transform", "displacement scale alpha/250", (0.01, 0.05), False, elastic_transform,
                {"sigma": "0.01 x (H, W)", "max_displacement": "0.005 x H", "truncate": 3.0},
                (0.05, 0.065, 0.085, 0.1, 0.12),
            ),
            _spec(
                "fog", "fog density", (0.5, 2.5), False, fog,
                {"wibble_decay": 2.0}, (1.5, 2.0, 2.5, 2.5, 3.0),
                {3: "wibble_decay 1.7", 4: "wibble_decay 1.5", 5: "wibble_decay 1.4"},
            ),
            _spec(
                "frost", "weight of the frost photo", (0.2, 0.6), False, frost,
                {"image_weight": 1.0}, (0.4, 0.6, 0.7, 0.7, 0.75),
                {2: "image_weight 0.8", 3: "image_weight 0.7", 4: "image_weight 0.65", 5: "image_weight 0.6"},
            ),
            _spec(
                "gaussian_noise", "noise standard deviation", (0.02, 0.10), False, gaussian_noise,
                {}, (0.08, 0.12, 0.18, 0.26, 0.38),
            ),
            _spec(
                "glass_blur", "Gaussian blur standard deviation (px)", (0.2, 1.0), False, glass_blur,
                {"max_delta": 1, "iterations": 2, "truncate": 4.0, "border": "nearest"}, (0.7, 0.9, 1.0, 1.1, 1.5),
                {2: "max_delta 2, 1 iteration", 3: "max_delta 2, 3 iterations", 4: "max_delta 3, 2 iterations",
                 5: "max_delta 4, 2 iterations"},
            ),
        )
    }
)  # fmt: skip


#: how the m parameters of a perturbation are chosen: equally spaced over the domain (the paper's), or uniform draws
SAMPLING_MODES = ("equal", "random")


def _unknown(names: Iterable[object]) -> str:
    """The one wording of unknown perturbation names: which ones, and the known list."""
    return f"unknown perturbation(s) {list(names)}; known: {', '.join(PERTURBATIONS)}"


def _get(name: str) -> PerturbationSpec:
    if not isinstance(name, str) or name not in PERTURBATIONS:
        raise ValueError(_unknown([name]))
    return PERTURBATIONS[name]


def check_perturbation_names(names: str | Iterable[str] | None, key: str = "perturbations") -> tuple[str, ...]:
    """The one validator of a list of perturbation names: ``None`` = all nine of Table 8 (registry order); a single
    name stands for a list of one; else a non-empty list of distinct known names, returned as a tuple in the given
    order. A ValueError naming ``key``, the offending names and the known list otherwise."""
    if names is None:
        return tuple(PERTURBATIONS)
    want = f"{key} must be a non-empty list of distinct perturbation names (or null / None for all nine of Table 8)"
    if isinstance(names, str):
        names = (names,)
    if isinstance(names, (bytes, Mapping)) or not isinstance(names, Iterable):
        raise ValueError(f"{want}, got {names!r} ({type(names).__name__}); known: {', '.join(PERTURBATIONS)}")
    out = tuple(names)
    if not out:
        raise ValueError(f"{want}, got an empty list; known: {', '.join(PERTURBATIONS)}")
    unknown = [n for n in out if not isinstance(n, str) or n not in PERTURBATIONS]
    if unknown:
        raise ValueError(f"{want}: {_unknown(unknown)}")
    repeated = sorted({n for n in out if out.count(n) > 1})
    if repeated:
        raise ValueError(f"{want}, got {list(out)}: {repeated} listed more than once; list each perturbation once")
    return out


def check_m(m: object, key: str = "m") -> int:
    """``m``, the number of perturbed versions per image and perturbation (parameters of its grid), as an int >= 1;
    else a ValueError naming ``key``."""
    if isinstance(m, bool) or not isinstance(m, numbers.Integral) or m < 1:
        raise ValueError(
            f"{key} must be a positive integer (perturbed versions per image and perturbation), got {m!r} "
            f"({type(m).__name__}); set {key} to an integer >= 1"
        )
    return int(m)


def check_mode(mode: object, key: str = "mode") -> str:
    """``mode``, how the m parameters are chosen: one of :data:`SAMPLING_MODES`; else a ValueError naming ``key``."""
    if not isinstance(mode, str) or mode not in SAMPLING_MODES:
        raise ValueError(
            f"{key} must be 'equal' or 'random' ('equal': m equally spaced parameters, the paper's; 'random': m "
            f"uniform draws), got {mode!r}"
        )
    return mode


def check_perturbable_images(x: object, name: str = "images") -> None:
    """What ``perturb`` accepts: a float tensor (N, 3, H, W), H and W >= MIN_SIZE, finite pixels in [0, 1] (not a
    meta tensor); else a TypeError / ValueError naming ``name`` and the fix."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor (N, 3, H, W) in [0, 1], got {type(x).__name__}")
    if not x.is_floating_point():
        raise TypeError(f"{name} must be a float tensor in [0, 1], got dtype {x.dtype}; convert uint8 with x / 255")
    if x.ndim != 4 or x.shape[1] != 3:
        raise ValueError(f"{name} must have shape (N, 3, H, W), got {tuple(x.shape)}")
    if min(x.shape[2:]) < MIN_SIZE:
        raise ValueError(f"{name} must be at least {MIN_SIZE}x{MIN_SIZE} px, got {x.shape[2]}x{x.shape[3]}")
    if x.is_meta:
        raise ValueError(
            f"{name} are a meta tensor (shape only, no pixel values), which cannot be perturbed; pass real images "
            "(e.g. materialise them with torch.empty_like(x, device='cpu') and fill them)"
        )
    if x.numel() == 0:
        return
    lo, hi = torch.aminmax(x)
    lo, hi = float(lo), float(hi)
    if not (lo >= 0.0 and hi <= 1.0):  # also catches NaN
        raise ValueError(
            f"{name} must be finite and in [0, 1] pixel space, got values in [{lo}, {hi}]; "
            "pass unnormalized images (normalization happens inside the backbone)"
        )


def _k_tensor(spec: PerturbationSpec, k: object) -> Tensor:
    """``k`` (a number, a sequence of numbers or a tensor) as a float64 CPU tensor, else a clear error naming k."""
    a, b = spec.domain
    want = f"a number in [{a}, {b}] ({spec.parameter}), a sequence of them or a tensor (one per image)"
    if isinstance(k, Tensor):
        if k.is_meta:
            raise ValueError(f"{spec.name}: k is a meta tensor (shape only, no values); pass {want}")
        if k.is_complex() or k.dtype == torch.bool:
            raise TypeError(f"{spec.name}: k must be real numbers, got a {k.dtype} tensor; pass {want}")
        return k.detach().cpu().to(torch.float64)
    if isinstance(k, (str, bytes, bool)) or k is None:
        raise TypeError(f"{spec.name}: k must be {want}, got {k!r} ({type(k).__name__})")
    try:
        return torch.as_tensor(k, dtype=torch.float64)
    except (TypeError, ValueError, RuntimeError):
        raise TypeError(f"{spec.name}: k must be {want}, got {k!r} ({type(k).__name__})") from None


def severity_parameter(name: str, severity: int) -> float:
    """The k that reproduces ImageNet-C's ``severity`` (1..5) of ``name`` exactly, or a ValueError saying why none
    does (ImageNet-C's value lies outside the paper's domain, or it changes a parameter we keep fixed)."""
    spec = _get(name)
    if isinstance(severity, bool) or not isinstance(severity, int) or severity not in SEVERITY_LEVELS:
        raise ValueError(
            f"severity must be one of ImageNet-C's levels {list(SEVERITY_LEVELS)}, got {severity!r} "
            f"({type(severity).__name__})"
        )
    if severity in spec.severities:
        return float(spec.severities[severity])
    a, b = spec.domain
    k = spec.imagenet_c[severity - 1]
    if severity in spec.imagenet_c_other:
        why = (
            f"it uses {spec.imagenet_c_other[severity]} where ours is fixed at "
            f"{', '.join(f'{key} {v}' for key, v in spec.fixed.items())}"
        )
    else:
        why = f"its {spec.parameter} is {k}, outside the domain [{a}, {b}] (Table 8 of Liu et al., arXiv:2604.14973)"
    exact = ", ".join(f"{s} (k = {v})" for s, v in spec.severities.items()) or "none"
    raise ValueError(
        f"{name}: ImageNet-C severity {severity} is not reproduced exactly by k: {why}. Severities of {name} that "
        f"are exact: {exact}; otherwise pass k in [{a}, {b}]"
    )


def _check_k(spec: PerturbationSpec, k, n: int) -> Tensor:
    """``k`` as a float64 CPU tensor of shape (N,) inside the domain (ends clamped within DOMAIN_SLACK)."""
    kt = _k_tensor(spec, k)
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
    x: Tensor,
    name: str,
    k: float | Sequence[float] | Tensor | None = None,
    generator: torch.Generator | None = None,
    *,
    severity: int | None = None,
) -> Tensor:
    """Apply perturbation ``name`` with parameter ``k`` to images ``x`` (N, 3, H, W) float in [0, 1].

    ``k``: one number for the batch or one per image (N,), inside ``PERTURBATIONS[name].domain``. Or, instead of k,
    ``severity`` in 1..5: ImageNet-C's severity, accepted only where k reproduces it exactly
    (``PERTURBATIONS[name].severities``; :func:`severity_parameter` says why the others are not). Random
    perturbations draw from ``generator`` (torch's default generator when None). Returns a new tensor of x's shape,
    dtype and device, in [0, 1]; gradients do not flow through the perturbation (it is data augmentation, applied
    under no_grad). Half-precision images are processed in float32 and cast back.
    """
    spec = _get(name)
    if (k is None) == (severity is None):
        raise ValueError(
            f"{name}: pass exactly one of k (the continuous parameter, {spec.parameter} in {list(spec.domain)}) and "
            f"severity (ImageNet-C level; exact for {name}: {sorted(spec.severities) or 'none'})"
        )
    if severity is not None:
        k = severity_parameter(name, severity)
    check_generator(generator)
    check_perturbable_images(x)
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
    m, mode = check_m(m), check_mode(mode)
    a, b = spec.domain
    if mode == "equal":
        if m == 1:
            return torch.tensor([(a + b) / 2], dtype=torch.float64)
        return torch.linspace(a, b, m, dtype=torch.float64)
    return sample_parameters(name, m, generator).sort().values


def sample_parameters(name: str, n: int, generator: torch.Generator | None = None) -> Tensor:
    """``n`` >= 0 draws uniform on the domain of ``name`` (float64, CPU; unsorted)."""
    a, b = _get(name).domain
    n = check_int(n, "n", 0, meaning="the number of parameters to draw")
    check_generator(generator)
    gen_device = generator.device if generator is not None else "cpu"
    u = torch.rand(n, generator=generator, dtype=torch.float64, device=gen_device).cpu()
    return a + (b - a) * u
