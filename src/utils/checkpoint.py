"""Loading RepBench checkpoints safely: ``torch.load(weights_only=True)`` and an allow-list of module classes.

A checkpoint records which LightningModule wrote it (``record_module_class``, called from ``on_save_checkpoint``).
:func:`load_module` rebuilds that class **only if it is registered** with :func:`register_module`: a checkpoint can
never make us import or run code outside the project's own LightningModules. Register a new module class with the
decorator::

    @register_module
    class MyModule(RepBenchModule): ...

and export it from ``src/models/__init__.py`` (importing ``src.models`` registers every module class it exports).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TypeVar

import torch

from .. import DISTRIBUTION_NAME, canonical_module_name, running_module_name

__all__ = [
    "MODULE_KEY",
    "CheckpointError",
    "checkpoint_class_name",
    "load_module",
    "module_class",
    "read_checkpoint",
    "record_module_class",
    "register_module",
    "registered_modules",
]

MODULE_KEY = "repbench_module"  # checkpoint entry naming the LightningModule class ("package.module:Class")
_OWN_PACKAGE = (
    f"{DISTRIBUTION_NAME}.models"  # the only package whose modules load_module imports to find a registered class
)
_LEGACY_PREFIX = "src."  # checkpoints written before the package had its installed name recorded "src.models...."

_REGISTRY: dict[str, type] = {}

T = TypeVar("T", bound=type)


class CheckpointError(ValueError):
    """A checkpoint that cannot be used here: unreadable, not written by RepBench, or naming another class."""


def class_key(cls: type) -> str:
    """``"repbench.models.robust_probe:RobustLinearProbe"``: the same whether the package runs as ``repbench``
    (installed) or ``src`` (repository), so a checkpoint loads in both."""
    return f"{canonical_module_name(cls.__module__)}:{cls.__qualname__}"


def canonical_class_key(target: str) -> str:
    """A recorded class key in the canonical ``repbench.`` spelling (older checkpoints recorded ``src.``)."""
    if target.startswith(_LEGACY_PREFIX):
        return DISTRIBUTION_NAME + "." + target[len(_LEGACY_PREFIX) :]
    return target


def register_module(cls: T) -> T:
    """Class decorator: allow :func:`load_module` to rebuild ``cls`` from a checkpoint."""
    _REGISTRY[class_key(cls)] = cls
    return cls


def registered_modules() -> dict[str, type]:
    """``{"package.module:Class": class}`` of every registered module class (after importing ``src.models``)."""
    importlib.import_module(running_module_name(_OWN_PACKAGE))
    return dict(_REGISTRY)


def record_module_class(module: Any, checkpoint: dict[str, Any]) -> None:
    """Store the module's class in the checkpoint (call from ``on_save_checkpoint``) so :func:`load_module` can
    rebuild it without being told the class."""
    checkpoint[MODULE_KEY] = class_key(type(module))


def read_checkpoint(ckpt_path: str | Path) -> dict[str, Any]:
    """``torch.load(ckpt_path, weights_only=True)`` on the CPU, with clear errors for a missing or corrupt file."""
    path = Path(ckpt_path).expanduser()
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint not found: {path}; pass ckpt_path=<run dir>/checkpoints/last.ckpt")
    try:
        ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # truncated zip, pickle of arbitrary objects, wrong format: all say the same to a user
        raise CheckpointError(
            f"{path} is not a readable checkpoint ({type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}); "
            "pass a .ckpt file written by RepBench's training (python -m src.train / repbench-train; weights_only loading refuses "
            "pickled objects)"
        ) from err
    if not isinstance(ckpt, Mapping) or "state_dict" not in ckpt:
        raise CheckpointError(f"{path} holds no Lightning checkpoint (no 'state_dict' entry)")
    return dict(ckpt)


def checkpoint_class_name(ckpt: Mapping[str, Any], path: str | Path = "checkpoint") -> str:
    """The ``"package.module:Class"`` a checkpoint was written by (CheckpointError if it was not RepBench's)."""
    target = ckpt.get(MODULE_KEY)
    if not isinstance(target, str) or ":" not in target:
        raise CheckpointError(
            f"{path} was not written by a RepBench module (no {MODULE_KEY!r} entry); "
            "load it with its own LightningModule class"
        )
    return target


def module_class(ckpt: Mapping[str, Any], path: str | Path = "checkpoint") -> type:
    """The registered LightningModule class that wrote ``ckpt`` (a dict from :func:`read_checkpoint`)."""
    return _resolve(checkpoint_class_name(ckpt, path), path)


def _resolve(target: str, path: str | Path) -> type:
    registry = registered_modules()
    target = canonical_class_key(target)
    module_name, _, _ = target.partition(":")
    if target not in registry and (module_name == _OWN_PACKAGE or module_name.startswith(_OWN_PACKAGE + ".")):
        try:  # one of our own modules that src.models does not export (never anything outside src.models)
            importlib.import_module(running_module_name(module_name))
        except ImportError:
            pass
        registry = dict(_REGISTRY)
    if target not in registry:
        known = ", ".join(sorted(k.rpartition(":")[2] for k in registry)) or "none"
        raise CheckpointError(
            f"{path} names the module class {target!r}, which is not a registered RepBench module (registered: "
            f"{known}); refusing to import it. Register your own class with @register_module from "
            "src.utils.checkpoint"
        )
    return registry[target]


def load_module(
    ckpt_path: str | Path,
    map_location: str | torch.device = "cpu",
    expected: type | tuple[type, ...] | None = None,
    **overrides: Any,
):
    """Rebuild the registered LightningModule stored in ``ckpt_path`` (``weights_only=True``).

    ``expected``: the class (or classes) the caller can use; a checkpoint of another class is a CheckpointError
    instead of a state-dict size mismatch. ``overrides`` replace saved hyperparameters.
    """
    ckpt = read_checkpoint(ckpt_path)
    target = checkpoint_class_name(ckpt, ckpt_path)
    cls = _resolve(target, ckpt_path)
    if expected is not None and not issubclass(cls, expected):
        names = [c.__name__ for c in (expected if isinstance(expected, tuple) else (expected,))]
        raise CheckpointError(
            f"{ckpt_path} holds a {cls.__name__} checkpoint, but a {' or '.join(names)} is needed here; "
            "pass a checkpoint of that class"
        )
    try:
        return cls.load_from_checkpoint(
            Path(ckpt_path).expanduser(), map_location=map_location, weights_only=True, **overrides
        )
    except RuntimeError as err:
        if "size mismatch" in str(err) or "Missing key" in str(err) or "Unexpected key" in str(err):
            raise CheckpointError(
                f"{ckpt_path}: the {cls.__name__} rebuilt from its saved hyperparameters "
                f"{_short(ckpt.get('hyper_parameters'))} does not match the stored weights "
                f"(overrides: {sorted(overrides) or 'none'}). Do not override architecture hyperparameters "
                f"(backbone, num_classes) when loading. Details: {str(err).splitlines()[0][:300]}"
            ) from err
        raise


def _short(hparams: Any) -> str:
    if not isinstance(hparams, Mapping):
        return "{}"
    keys = ("backbone", "num_classes")
    return "{" + ", ".join(f"{k}: {hparams[k]!r}" for k in keys if k in hparams) + ", ...}"
