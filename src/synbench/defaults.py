"""Code defaults read from the YAML configs (configs/ is the single source of defaults; code never copies it)."""

from __future__ import annotations

from functools import cache
from typing import Any

from ..utils.resources import config_dir

CONFIGS = config_dir()

__all__ = ["yaml_defaults", "CONFIGS"]


@cache
def _load(relpath: str) -> dict[str, Any]:
    from omegaconf import OmegaConf

    path = CONFIGS / relpath
    if not path.is_file():
        raise FileNotFoundError(f"default config {path} is missing (configs/ must ship with the code)")
    return OmegaConf.to_container(OmegaConf.load(path), resolve=False)  # type: ignore[return-value]


def yaml_defaults(relpath: str, *keys: str) -> dict[str, Any]:
    """A copy of the mapping at ``keys`` in ``configs/<relpath>`` (e.g. ``("callbacks/synbench.yaml",
    "synbench", "config")``), without interpolation; lists stay lists."""
    node: Any = _load(relpath)
    for k in keys:
        node = node[k]
    if not isinstance(node, dict):
        raise TypeError(f"configs/{relpath}:{'.'.join(keys)} is not a mapping")
    import copy

    return copy.deepcopy(node)
