"""Locating pretrained weights offline-first: local caches, explicit files, and a fast failure when neither exists.

Hub libraries retry for ~46 s when the network is missing; we check the cache and the reachability of the host
first and fail at once with a message naming what was looked for and how to provide it.
"""

from __future__ import annotations

import hashlib
import os
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from pathlib import Path

import torch

from ..utils.network import host_reachable, offline_mode

__all__ = [
    "REBUILT_MARKER",
    "CorruptCheckpointError",
    "MissingWeightsError",
    "RebuiltWeightsMismatchError",
    "check_state_dict_matches",
    "find_in_hf_cache",
    "host_reachable",
    "load_state_dict",
    "offline_mode",
    "omit_rebuilt_state",
    "read_checkpoint",
    "restore_rebuilt_state",
    "state_fingerprint",
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


# A state dict may leave out the weights of a frozen submodule that its model rebuilds from a spec (e.g. a probe's
# backbone, rebuilt from ``hparams.backbone``): ``<prefix>_rebuilt_from_spec_sha256`` (32 uint8) then stands in for
# every key under ``<prefix>`` and holds the sha256 of those weights (:func:`state_fingerprint`).
REBUILT_MARKER = "_rebuilt_from_spec_sha256"


class RebuiltWeightsMismatchError(ValueError):
    """A state dict left out frozen weights to be rebuilt from a spec, but the rebuilt weights are not those."""


def state_fingerprint(state: Mapping[str, torch.Tensor]) -> str:
    """sha256 (hex) of a state dict: every entry's name, dtype, shape and bytes, in sorted name order.

    Equal fingerprints mean bit-identical weights (whatever device they live on); a different dtype (e.g. a module
    cast to bfloat16) is a different fingerprint.
    """
    digest = hashlib.sha256()
    for key in sorted(state):
        value = state[key]
        if not isinstance(value, torch.Tensor):
            raise TypeError(f"state_fingerprint: entry {key!r} is a {type(value).__name__}, not a tensor")
        t = value.detach().to("cpu").contiguous().reshape(-1)
        digest.update(f"{key}|{t.dtype}|{tuple(value.shape)}|".encode())
        digest.update(t.view(torch.uint8).numpy())
    return digest.hexdigest()


def _fingerprint_tensor(fingerprint: str) -> torch.Tensor:
    return torch.tensor(list(bytes.fromhex(fingerprint)), dtype=torch.uint8)


def _fingerprint_hex(marker: torch.Tensor) -> str:
    return bytes(marker.to("cpu", torch.uint8).tolist()).hex()


def _like(sd: Mapping, items: Iterable[tuple[str, object]]) -> OrderedDict:
    """A new state dict holding ``items`` that keeps ``sd``'s ``_metadata`` (module versions that loading reads)."""
    out = OrderedDict(items)
    metadata = getattr(sd, "_metadata", None)
    if metadata is not None:
        out._metadata = metadata  # type: ignore[attr-defined]
    return out


def omit_rebuilt_state(sd: Mapping[str, torch.Tensor], prefix: str, fingerprint: str) -> OrderedDict:
    """``sd`` without the entries under ``prefix`` (e.g. ``"backbone."``), replaced by one marker holding
    ``fingerprint`` (the :func:`state_fingerprint` of those entries, prefix stripped). Nothing under ``prefix``:
    ``sd`` unchanged (no marker)."""
    if not prefix.endswith("."):
        raise ValueError(f"prefix must name a submodule and end with '.', got {prefix!r}")
    if not any(k.startswith(prefix) for k in sd):
        return _like(sd, sd.items())
    kept = [(k, v) for k, v in sd.items() if not k.startswith(prefix)]
    return _like(sd, kept + [(prefix + REBUILT_MARKER, _fingerprint_tensor(fingerprint))])


def restore_rebuilt_state(sd: Mapping[str, torch.Tensor], model: torch.nn.Module, what: str) -> OrderedDict:
    """``sd`` with every rebuilt-weights marker (:func:`omit_rebuilt_state`) replaced by ``model``'s own entries
    under that prefix, after checking that they have the recorded fingerprint.

    Raises :class:`RebuiltWeightsMismatchError` naming the submodule and the fix when ``model``'s weights there are
    not the ones the state dict was written with (a weights file replaced since, another package version, another
    backbone spec), and ValueError when ``model`` has nothing under the prefix or ``sd`` holds both the marker and
    weights under it.
    """
    markers = [k for k in sd if k.endswith(REBUILT_MARKER)]
    if not markers:
        return _like(sd, sd.items())
    own = model.state_dict()
    out = _like(sd, ((k, v) for k, v in sd.items() if k not in markers))
    for marker in markers:
        prefix = marker[: -len(REBUILT_MARKER)]
        name = prefix.rstrip(".") or "the model"
        group = {k[len(prefix) :]: v for k, v in own.items() if k.startswith(prefix)}
        if not group:
            raise ValueError(
                f"{what} leaves out the weights of {name!r} (to be rebuilt from its spec), but this model has no "
                f"{name!r}; pass a checkpoint of this model class"
            )
        stored = [k for k in sd if k.startswith(prefix) and k != marker]
        if stored:
            raise ValueError(
                f"{what} holds both weights under {prefix!r} ({stored[:3]}) and the marker {marker!r} that says they "
                "were left out; the file was edited or corrupted: use the original checkpoint"
            )
        saved, rebuilt = _fingerprint_hex(sd[marker]), state_fingerprint(group)
        if saved != rebuilt:
            raise RebuiltWeightsMismatchError(
                f"{what} does not store the frozen weights of {name!r}: they are rebuilt from the backbone spec, but "
                f"the rebuilt weights differ from those it was trained with (sha256 {saved[:16]}... saved, "
                f"{rebuilt[:16]}... rebuilt). The weights the spec names changed since the checkpoint was written "
                "(a local weights file replaced, another package/hub version of the weights) or this model was "
                "built from another spec: restore the original weights (same file, tag and package version) or "
                "use the backbone spec the checkpoint was trained with (its hyper_parameters.backbone)"
            )
        out.update((prefix + k, v) for k, v in group.items())
    return out


def check_state_dict_matches(sd: dict, model: torch.nn.Module, what: str) -> None:
    """Strict key and shape check of ``sd`` against ``model``, raising a ValueError that names the differences.

    Weights that ``sd`` leaves out to be rebuilt from a spec (:func:`omit_rebuilt_state`) count as present when
    ``model``'s own weights there have the recorded fingerprint (else :class:`RebuiltWeightsMismatchError`).
    """
    sd = restore_rebuilt_state(sd, model, what)
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
