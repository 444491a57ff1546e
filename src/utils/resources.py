"""Where the package's data lives: the Hydra configs (``configs/`` in the repository, ``repbench/configs`` when
installed from a wheel). The one place that knows both layouts."""

from __future__ import annotations

from functools import cache
from pathlib import Path

__all__ = ["config_dir"]

_PACKAGE_DIR = Path(__file__).resolve().parents[1]  # src/ in the repository, site-packages/repbench/ installed


@cache
def config_dir() -> Path:
    """The directory holding ``train.yaml`` and the config groups (FileNotFoundError naming both places)."""
    candidates = (_PACKAGE_DIR / "configs", _PACKAGE_DIR.parent / "configs")
    for cand in candidates:
        if (cand / "train.yaml").is_file():
            return cand
    raise FileNotFoundError(
        f"RepBench's configs are missing: looked for train.yaml in {' and '.join(map(str, candidates))}. "
        "Reinstall the package (the wheel ships them as repbench/configs) or run from a full repository checkout"
    )
