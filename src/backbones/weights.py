"""Locating pretrained weights offline-first: local caches, explicit files, and a fast failure when neither exists.

Hub libraries retry for ~46 s when the network is missing; we check the cache and the reachability of the host
first and fail at once with a message naming what was looked for and how to provide it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import torch

from src.utils.network import host_reachable, offline_mode

__all__ = ["MissingWeightsError", "host_reachable", "find_in_hf_cache", "load_state_dict", "offline_mode"]


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


def load_state_dict(path: str | os.PathLike, *, key: str | None = None) -> dict[str, torch.Tensor]:
    """Load a checkpoint safely (``weights_only=True`` for pickles; safetensors natively).

    Accepts a plain state dict or a dict wrapping one under ``state_dict``/``model``/``key``.
    """
    path = Path(path).expanduser()
    if not path.is_file():
        raise MissingWeightsError(f"checkpoint file not found: {path}")
    if path.suffix == ".safetensors":
        from safetensors.torch import load_file

        sd = load_file(str(path), device="cpu")
    else:
        sd = torch.load(path, map_location="cpu", weights_only=True)
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
