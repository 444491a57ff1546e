"""The extractor's precision policy: ``precision="fp32" | "tf32" | "bf16" | "fp16"`` (default ``"tf32"``).

=========  ==================================================================================================
``fp32``   IEEE float32 everywhere: TF32 is switched OFF for CUDA matmuls and cuDNN convolutions/RNNs during the
           forward (torch's own default leaves cuDNN convolutions in TF32: "fp32" is stricter than the default).
``tf32``   float32 tensors, but CUDA matmuls and cuDNN convolutions may use TF32 tensor cores (inputs rounded to a
           10-bit mantissa, u = 2⁻¹¹, float32 accumulation; NVIDIA Ampere and later). On the CPU it is plain fp32.
``bf16``   ``torch.autocast(dtype=bfloat16)``: matmuls and convolutions in bfloat16 (8-bit mantissa, u = 2⁻⁹),
           float32 accumulation; what autocast leaves in float32 runs with TF32 off, as ``fp32``.
``fp16``   the same with float16 (11-bit mantissa, narrow range: large activations may overflow).
=========  ==================================================================================================

The TF32 switches are process-wide settings; they are set ONLY inside the extractor's forward and the caller's
settings are restored afterwards, also when the forward raises (:func:`tf32_mode`). The forward must therefore not
race with other threads that run CUDA matmuls with other wishes. Features always come back as float32 (the
extractor's ``output_dtype``). TF32: NVIDIA, "TensorFloat-32 in the A100 GPU" (2020); bfloat16: Kalamkar et al.,
"A Study of BFLOAT16 for Deep Learning Training", arXiv:1905.12322.

``autocast=None | "bf16" | "fp16"`` (the earlier option) is a deprecated alias: None = the default, else the same
name. Measured effects (speed, features, SynBench-Score): docs/speed.md.

Why ``"tf32"`` is the default (:data:`DEFAULT_PRECISION`): on the CPU it is exactly fp32 (the same features); on an
NVIDIA H200 the official SynBench protocol on ViT-B/16 (200,704 forwards at 224 px, same Philox samples) took 164 s
in fp32 and 48 s in TF32 with the SAME scores to three decimals (0.473 / 0.563 / 0.525 at ε = 0 / 0.2 / 0.4,
a_T = 0.7), while two seeds differ by up to 0.010: TF32's effect is far below the Monte Carlo noise, its speed-up
3.4×. torch itself already runs cuDNN convolutions in TF32 by default. ``"fp32"`` stays one word away for audits
that want IEEE float32 arithmetic.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator

import torch

__all__ = [
    "AUTOCAST_DTYPES",
    "DEFAULT_PRECISION",
    "PRECISIONS",
    "autocast_context",
    "check_autocast",
    "check_precision",
    "precision_context",
    "tf32_mode",
    "tf32_settings",
]

#: the policies, in order of decreasing precision
PRECISIONS = ("fp32", "tf32", "bf16", "fp16")
#: the policy of an extractor built without ``precision`` (and without the deprecated ``autocast``)
DEFAULT_PRECISION = "tf32"
AUTOCAST_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


# torch (>= 2.9) keeps two views of the TF32 switches: the legacy ones (``torch.set_float32_matmul_precision``,
# ``torch.backends.{cuda.matmul, cudnn}.allow_tf32``) and per-operator ``fp32_precision`` strings; its legacy getters
# raise when the two disagree (torch.compile's inductor reads them). The policy therefore SETS through the legacy
# setters, which write both views consistently, and RESTORES both views exactly as the caller left them.


def _fp32_precision_switches() -> tuple[object, ...]:
    """Every per-operator setting the legacy setters touch: CUDA matmul, cuDNN (parent, conv, RNN), and oneDNN
    matmul (``set_float32_matmul_precision`` writes it)."""
    b = torch.backends
    return (b.cuda.matmul, b.cudnn, b.cudnn.conv, b.cudnn.rnn, b.mkldnn.matmul)


def _legacy(getter):
    """A legacy getter's answer, or None where torch refuses to answer for a mix of the two views."""
    try:
        return getter()
    except RuntimeError:
        return None


def check_precision(precision: object = None, autocast: object = None) -> str:
    """The one validator of the precision policy: ``precision`` in :data:`PRECISIONS` (None: the deprecated
    ``autocast`` alias if given, else :data:`DEFAULT_PRECISION`), with ``autocast`` (None | "bf16" | "fp16") mapped
    onto it (a DeprecationWarning; an error if both are given and disagree). Returns the policy's name."""
    if precision is not None and (not isinstance(precision, str) or precision not in PRECISIONS):
        raise ValueError(
            f"unknown precision {precision!r}; use one of {list(PRECISIONS)} ('fp32': IEEE float32, 'tf32': TF32 "
            "tensor cores for CUDA matmuls/convolutions, 'bf16'/'fp16': autocast) or None for the default "
            f"{DEFAULT_PRECISION!r}"
        )
    if autocast is None:
        return DEFAULT_PRECISION if precision is None else precision
    if not isinstance(autocast, str) or autocast not in AUTOCAST_DTYPES:
        raise ValueError(f"unknown autocast {autocast!r}; use None (float32), 'bf16' or 'fp16' (better: precision=)")
    warnings.warn(
        f"FeatureExtractor(autocast={autocast!r}) is deprecated; use precision={autocast!r}",
        DeprecationWarning,
        stacklevel=3,
    )
    if precision not in (None, autocast):
        raise ValueError(
            f"precision={precision!r} and the deprecated autocast={autocast!r} disagree; pass only precision="
        )
    return autocast


def check_autocast(choice: str | None) -> str | None:
    """Deprecated validator of the old ``autocast`` option (None | "bf16" | "fp16"); kept for callers of the old
    API. Use :func:`check_precision`."""
    if choice is not None and choice not in AUTOCAST_DTYPES:
        raise ValueError(f"unknown autocast {choice!r}; use None (float32), 'bf16' or 'fp16' (better: precision=)")
    return choice


def tf32_settings() -> tuple:
    """The process's TF32 state that :func:`tf32_mode` changes and restores: the legacy matmul precision
    ("highest" | "high" | "medium"), the legacy cuDNN switch (None where torch refuses to answer for a mix of
    settings), and the ``fp32_precision`` strings of CUDA matmul, cuDNN, its conv and RNN, and oneDNN matmul."""
    return (
        _legacy(torch.get_float32_matmul_precision),
        _legacy(torch._C._get_cudnn_allow_tf32),
        *(s.fp32_precision for s in _fp32_precision_switches()),
    )


def _restore(state: tuple) -> None:
    matmul, cudnn, *strings = state
    if matmul is not None:
        torch.set_float32_matmul_precision(matmul)
    if cudnn is not None:
        torch.backends.cudnn.allow_tf32 = cudnn
    for switch, value in zip(_fp32_precision_switches(), strings):
        switch.fp32_precision = value


@contextlib.contextmanager
def tf32_mode(enabled: bool) -> Iterator[None]:
    """TF32 on (``enabled``) or off for CUDA matmuls and cuDNN convolutions/RNNs inside the block, through torch's
    legacy setters (both views consistent, so torch.compile can read them; where the caller left the two views
    disagreeing, through the per-operator strings, leaving the legacy view as it was); the caller's state
    (:func:`tf32_settings`) is restored on exit, also on an exception. No effect on CPU kernels (oneDNN's matmul
    setting is left as it is)."""
    before = tf32_settings()
    b, mode = torch.backends, "tf32" if enabled else "ieee"
    try:
        if before[0] is not None:
            b.cuda.matmul.allow_tf32 = enabled
        else:  # the caller mixed the two views: leave the legacy one (unreadable) alone
            b.cuda.matmul.fp32_precision = mode
        if before[1] is not None:
            b.cudnn.allow_tf32 = enabled
        else:
            b.cudnn.conv.fp32_precision = b.cudnn.rnn.fp32_precision = mode
        yield
    finally:
        _restore(before)


def autocast_context(choice: str | None, device: torch.device) -> contextlib.AbstractContextManager:
    """``torch.autocast`` for the device type with the dtype of ``choice`` ("bf16" | "fp16"); a no-op for None,
    "fp32" and "tf32"."""
    if choice not in AUTOCAST_DTYPES:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=AUTOCAST_DTYPES[choice])


@contextlib.contextmanager
def precision_context(precision: str, device: torch.device) -> Iterator[None]:
    """The policy ``precision`` for a forward on ``device``: TF32 switched on only for "tf32" (off otherwise), and
    autocast for "bf16" / "fp16"."""
    with tf32_mode(precision == "tf32"), autocast_context(precision, device):
        yield
