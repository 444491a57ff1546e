"""The downstream report end to end (python -m src.divergence_radius) on a tiny random backbone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_report_cli_writes_tables_and_figures(tmp_path: Path) -> None:
    from src.divergence_radius.__main__ import run

    overrides = [
        'backbones=[{name: "timm:test_efficientnet", pretrained: false}]',
        f"paths.output_dir={tmp_path}",
        "image_size=32",
        "n_train=60",
        "n_test=8",
        "divergence_radius.m=2",
        "divergence_radius.perturbations=[brightness,gaussian_noise]",
        "divergence_radius.chunk_size=4",
    ]
    with initialize_config_dir(str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("divergence_radius.yaml", overrides=overrides)
    out = run(cfg)
    summary = json.loads((out / "divergence_radius.json").read_text())["timm:test_efficientnet"]
    assert [r["perturbation"] for r in summary["rows"]] == ["brightness", "gaussian_noise"]
    assert summary["config"] == {
        "perturbations": ["brightness", "gaussian_noise"],
        "m": 2,
        "mode": "equal",
        "seed": 0,
        "chunk_size": 4,
    }
    for r in summary["rows"]:
        assert 0 <= r["mean_r_dr"] <= 1 and 0 <= r["mean_acc_p"] <= 1 and r["mse_r_dr"] >= 0
    for name in (
        "divergence_radius.md", "divergence_radius.csv", "per_image.csv", "acc_p_vs_divergence_radius.png",
        "acc_p_vs_cosine_robustness.png", "regression_mse.png", "r_dr_by_perturbation.png",
    ):  # fmt: skip
        assert (out / name).stat().st_size > 0, name
    assert len((out / "per_image.csv").read_text().splitlines()) == 1 + 8 * 2
    assert len((out / "divergence_radius.csv").read_text().splitlines()) == 1 + 2


def test_config_defaults_are_the_papers() -> None:
    from src.divergence_radius import DivergenceRadiusConfig

    with initialize_config_dir(str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("divergence_radius.yaml", overrides=["paths.output_dir=."])
    assert cfg.divergence_radius.m == 5 and cfg.divergence_radius.mode == "equal"
    assert list(cfg.templates) == ["a photo of a {c}."]
    assert DivergenceRadiusConfig().m == 5 and DivergenceRadiusConfig().mode == "equal"


def test_table7_drop_correlation_equals_numpy_and_is_undefined_below_three():
    """Pearson's r across perturbations between mean R_dr / R_cs and ACC − mean ACC_p, against numpy's corrcoef
    (float64; the two differ by rounding only: |Δ| <= 1e-12 for 4 values of order 1)."""
    import numpy as np

    from src.divergence_radius.report import drop_correlations

    rows = [
        {"mean_r_dr": a, "mean_r_cs": b, "mean_acc_p": c}
        for a, b, c in ((0.2, 0.05, 0.9), (0.4, 0.1, 0.7), (0.6, 0.3, 0.65), (0.5, 0.2, 0.8))
    ]
    got = drop_correlations(rows, clean_accuracy=0.95)
    drops = [0.95 - r["mean_acc_p"] for r in rows]
    for key, col in (("pearson_r_dr_vs_drop", "mean_r_dr"), ("pearson_r_cs_vs_drop", "mean_r_cs")):
        assert abs(got[key] - np.corrcoef([r[col] for r in rows], drops)[0, 1]) <= 1e-12
    assert drop_correlations(rows[:2], 0.95) == {"pearson_r_dr_vs_drop": None, "pearson_r_cs_vs_drop": None}
