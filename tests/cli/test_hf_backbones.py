"""``hf:`` backbones (Hugging Face ``transformers``) through every report CLI and the audit report, in-process, on
tiny random models built offline: a config given on the command line (``{name: hf:..., config: {model_type: ...}}``)
and a folder written by ``save_pretrained`` (``hf:<folder>``), the same way as any other source."""

from __future__ import annotations

import csv
import importlib
import json
import math

import pytest
import torch

from tests.backbones.test_hf import TINY_HF

from .conftest import compose_cfg
from .test_report_clis import SYNBENCH_TINY


def _override(value: object) -> str:
    """A Hydra override value: a dict or list in Hydra's grammar (keys bare, strings quoted)."""
    if isinstance(value, dict):
        return "{" + ",".join(f"{k}:{_override(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(_override(v) for v in value) + "]"
    return json.dumps(value) if isinstance(value, str) else str(value)


def _from_config(kind: str) -> str:
    """A tiny random hf model given entirely on the command line."""
    return _override({"name": f"hf:tiny-{kind}", "config": TINY_HF[kind]})


@pytest.fixture(scope="module")
def clip_folder(tmp_path_factory) -> str:
    """A tiny random CLIP model and its image processor (mean/std of its own), as save_pretrained writes them."""
    from transformers import CLIPImageProcessor, CLIPModel

    from src.backbones.hf_backbone import _as_config

    folder = tmp_path_factory.mktemp("hf") / "tiny-clip"
    torch.manual_seed(0)
    CLIPModel(_as_config(TINY_HF["clip"])).save_pretrained(folder)
    CLIPImageProcessor(
        size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}, image_mean=[0.5] * 3, image_std=[0.25] * 3
    ).save_pretrained(folder)
    return str(folder)


def _run(module: str, config: str, overrides: list[str], tmp_path):
    cfg = compose_cfg(config, overrides, tmp_path)
    return importlib.import_module(f"src.{module}.__main__").run(cfg)


def test_synbench_cli(tmp_path, clip_folder) -> None:
    nets = [_from_config("dinov2"), _override({"name": f"hf:{clip_folder}"})]
    table = _run(
        "synbench",
        "synbench.yaml",
        [f"backbones=[{','.join(nets)}]", *SYNBENCH_TINY[1:]],  # the tiny protocol of the SynBench CLI's tests
        tmp_path,
    )
    assert "hf:tiny-dinov2" in table and f"hf:{clip_folder}" in table
    rows = list(csv.DictReader(open(tmp_path / "synbench.csv")))
    assert {r["backbone"] for r in rows} == {"hf:tiny-dinov2", f"hf:{clip_folder}"}
    assert all(math.isfinite(float(r["score"])) for r in rows)


def test_divergence_radius_cli(tmp_path, clip_folder) -> None:
    _run(
        "divergence_radius",
        "divergence_radius.yaml",
        [
            f"backbones=[{_from_config('vit')},{_override({'name': f'hf:{clip_folder}', 'projection': False})}]",
            "image_size=16",
            "divergence_radius.m=1",
            "divergence_radius.perturbations=[brightness]",
            "divergence_radius.chunk_size=4",
        ],
        tmp_path,
    )
    text = "".join(p.read_text() for p in tmp_path.glob("*.md"))
    assert "hf:tiny-vit" in text and f"hf:{clip_folder}" in text


def test_task_prior_cli(tmp_path, clip_folder) -> None:
    table = _run(
        "task_prior",
        "task_prior.yaml",
        [
            f"backbones=[{_from_config('siglip_vision')}]",
            # merged into the YAML's {name, pretrained} mapping (Hydra adds no new key there): the folder route
            f"task_prior.prior_backbone={_override({'name': f'hf:{clip_folder}', 'pretrained': True})}",
            "data.num_images=40",
            "data.image_size=16",
            "task_prior.epochs=5",
            "task_prior.num_tasks=4",
            "progress=false",
        ],
        tmp_path,
    )
    assert "| hf:tiny-siglip_vision |" in table


@pytest.mark.timeout(600)
def test_report(tmp_path, clip_folder) -> None:
    from src.report.__main__ import run

    from ..report.test_report_cli import TINY

    nets = [_from_config("vit"), _override({"name": f"hf:{clip_folder}"})]
    cfg = compose_cfg("report.yaml", [f"backbones=[{','.join(nets)}]", *TINY, "cache_dir=null"], tmp_path)
    run(cfg)
    rows = list(csv.DictReader(open(tmp_path / "report.csv")))
    assert [r["backbone"] for r in rows] == ["hf:tiny-vit", f"hf:{clip_folder}"]
    for col in ("synbench", "logme", "r_dr_mean", "tp_mean", "digits/clean_acc"):
        assert all(r[col] != "" and math.isfinite(float(r[col])) for r in rows), col
