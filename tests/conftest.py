"""Test-wide settings: offline hubs, headless matplotlib, small thread pools."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
os.environ.setdefault("PYTHONHASHSEED", "0")

import pytest
import torch

torch.set_num_threads(min(2, os.cpu_count() or 1))


@pytest.fixture(scope="session")
def lite0():
    """The embedded EfficientNet-Lite0 with its real ImageNet weights (loaded once per session)."""
    from src.backbones import create_backbone

    return create_backbone("embedded:efficientnet_lite0").eval()


# ---------------------------------------------------------------- RepBench as a user installs it (slow tests)
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def wheel(tmp_path_factory):
    """RepBench's wheel, built from a copy of the project's files (tracked + new, not ignored) as a fresh clone would:
    an in-tree build reuses setuptools' build/ folder, which still holds modules and configs renamed or deleted
    since."""
    out = tmp_path_factory.mktemp("wheel")
    src = tmp_path_factory.mktemp("source")
    listed = subprocess.run(
        ["git", "ls-files", "-co", "--exclude-standard"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\n")
    for rel in filter(None, listed):
        if (ROOT / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / rel, src / rel)
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(out), str(src)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    (whl,) = out.glob("repbench-*.whl")
    return whl


@pytest.fixture(scope="session")
def installed_repbench(wheel, tmp_path_factory):
    """(python, site-packages, env) of a fresh venv holding the installed wheel, nothing of the repository: the
    dependencies (torch, lightning, ...) come from this test environment through a plain path line (a path line
    does not run that environment's .pth hooks, so the repository's editable install is not visible there)."""
    venv = tmp_path_factory.mktemp("venv") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    py = venv / "bin" / "python"
    site = Path(
        subprocess.run(
            [py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", str(py), "install", "--no-deps", "--no-index", "-q", str(wheel)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    assert not (site / "src").exists() and not (site / "callbacks").exists() and not (site / "configs").exists()
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["HF_HUB_OFFLINE"] = "1"
    return py, site, env


TINY_CLIP = "repbench-test-tiny-clip"


@pytest.fixture(scope="session")
def tiny_clip(tmp_path_factory) -> str:
    """A 1-layer, 32 px ViT open_clip config with the full CLIP vocabulary (open_clip's tokenizer emits ids up to
    49407), registered once; no download (pretrained=None)."""
    import open_clip

    if TINY_CLIP not in open_clip.list_models():
        cfg = {
            "embed_dim": 16,
            "vision_cfg": {"image_size": 32, "layers": 1, "width": 32, "head_width": 16, "patch_size": 16},
            "text_cfg": {"context_length": 12, "vocab_size": 49408, "width": 16, "heads": 1, "layers": 1},
        }
        path = tmp_path_factory.mktemp("clip") / f"{TINY_CLIP}.json"
        path.write_text(json.dumps(cfg))
        open_clip.add_model_config(path)
    return TINY_CLIP
