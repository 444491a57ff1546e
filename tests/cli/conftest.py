"""Compose Hydra configs in-process (no subprocess, no chdir) for the entry-point tests."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, open_dict

CONFIG_DIR = str(Path(__file__).resolve().parents[2] / "configs")


def compose_cfg(config_name: str, overrides: list[str], output_dir: Path) -> DictConfig:
    """A composed config whose ``paths`` point into ``output_dir`` (hydra: interpolations resolved by hand)."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=CONFIG_DIR):
        cfg = compose(config_name=config_name, overrides=overrides, return_hydra_config=False)
    with open_dict(cfg):
        cfg.paths.root_dir = str(output_dir)
        cfg.paths.output_dir = str(output_dir)
        cfg.paths.log_dir = str(output_dir / "logs")
        cfg.paths.data_dir = str(output_dir / "data")
    return cfg


@pytest.fixture
def make_cfg(tmp_path):
    def _make(overrides: list[str] | None = None, config_name: str = "train.yaml") -> DictConfig:
        return compose_cfg(config_name, list(overrides or []), tmp_path)

    return _make
