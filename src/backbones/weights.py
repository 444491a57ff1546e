"""Locating pretrained weights offline-first: local caches, explicit files, and a fast failure when neither exists.

Hub libraries retry for ~46 s when the network is missing; we check the cache and the reachability of the host
first and fail at once with a message naming what was looked for and how to provide it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import torch

from ..utils.network import host_reachable, offline_mode

__all__ = [
    "CorruptCheckpointError",
    "MissingWeightsError",
    "check_state_dict_matches",
    "find_in_hf_cache",
    "host_reachable",
    "load_state_dict",
    "offline_mode",
    "read_checkpoint",
]


class MissingWeightsError(FileNotFoundError):
    """Pretrained weights are neither in a local cache nor downloadable."""


def find_in_hf_cache(repo_id: str, filenames: Iterable[str]) -> str | None:
    """Path of the first of ``filenames`` already in the Hugging Face cache of ``repo_id``, else None."""
    from huggingface_hub import try_to_load_from_cache

    for filename in filenames:
        path = try_to_load_from_cache(repo_id=repo_id, filename=filename)
        if isinstance(path, str) and os.path.isfile(path):
            return path
    return None


class CorruptCheckpointError(ValueError):
    """A checkpoint file exists but cannot be read (truncated, not a checkpoint, or not a safe tensor pickle)."""


def read_checkpoint(path: str | os.PathLike) -> object:
    """``torch.load(path, weights_only=True)`` (safetensors natively) with one clear error for every unreadable file.

    torch raises many different errors for a damaged file (``UnpicklingError``, ``RuntimeError: PytorchStreamReader
    failed``, ``EOFError``, even ``IndexError: pop from empty list``); they all become :class:`CorruptCheckpointError`
    naming the file.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise MissingWeightsError(f"checkpoint file not found: {path}")
    try:
        if path.suffix == ".safetensors":
            from safetensors.torch import load_file

            return load_file(str(path), device="cpu")
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # any failure to read means the same thing to the user
        raise CorruptCheckpointError(
            f"cannot read checkpoint {path} ({path.stat().st_size} bytes): {type(err).__name__}: {err}. "
            "The file is truncated, corrupt or not a PyTorch/safetensors checkpoint (files holding arbitrary "
            "Python objects are refused: only tensors load, weights_only=True); re-download or re-save it."
        ) from err


def check_state_dict_matches(sd: dict, model: torch.nn.Module, what: str) -> None:
    """Strict key and shape check of ``sd`` against ``model``, raising a ValueError that names the differences."""
    own = model.state_dict()
    missing = [k for k in own if k not in sd]
    unexpected = [k for k in sd if k not in own]
    shapes = [
        f"{k}: {tuple(sd[k].shape)} vs {tuple(v.shape)}"
        for k, v in own.items()
        if k in sd and hasattr(sd[k], "shape") and tuple(sd[k].shape) != tuple(v.shape)
    ]
    if missing or unexpected or shapes:
        raise ValueError(
            f"{what} does not match the model: {len(missing)} missing key(s) {missing[:5]}, "
            f"{len(unexpected)} unexpected key(s) {unexpected[:5]}, {len(shapes)} shape mismatch(es) {shapes[:3]}; "
            "pass a checkpoint of this architecture"
        )


def load_state_dict(path: str | os.PathLike, *, key: str | None = None) -> dict[str, torch.Tensor]:
    """Load a checkpoint safely (``weights_only=True`` for pickles; safetensors natively).

    Accepts a plain state dict or a dict wrapping one under ``state_dict``/``model``/``key``.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise MissingWeightsError(f"checkpoint file not found: {path}")
    sd = read_checkpoint(path)
    for k in ([key] if key else []) + ["state_dict", "model", "module"]:
        if isinstance(sd, dict) and k in sd and isinstance(sd[k], dict):
            sd = sd[k]
    if not isinstance(sd, dict):
        raise ValueError(f"{path} does not hold a state dict (got {type(sd).__name__})")
    # strip DDP / Lightning prefixes
    for prefix in ("module.", "model."):
        if sd and all(k.startswith(prefix) for k in sd):
            sd = {k[len(prefix) :]: v for k, v in sd.items()}
    return sd
