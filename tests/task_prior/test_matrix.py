"""The prior × evaluated-backbone matrix of E/Var (Task Priors, arXiv:2507.09871, Fig. 6): each entry is
task_prior_moments of (evaluated, prior) under the config's convention; compare_backbones exposes it when asked."""

from __future__ import annotations

import json

import pytest
import torch

from src.backbones.spec import build_backbone
from src.features import FeatureExtractor
from src.task_prior import TaskPriorConfig, compare_backbones, prior_matrix, task_prior_moments
from src.task_prior.matrix import PRIOR_MATRIX_FIGURE
from src.task_prior.report import FIGURE, digits_images


def _features(n: int = 24, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "a": torch.randn(n, 5, generator=g),
        "b": torch.randn(n, 8, generator=g),
        "c": torch.randn(n, 3, generator=g),
    }


@pytest.mark.parametrize("convention", ["repbench", "paper", "authors"])
def test_fig6_entries_are_task_prior_moments_of_evaluated_under_prior(convention):
    feats = _features()
    m = prior_matrix(feats, convention=convention, block_size=7)  # tiles smaller than n: the blocked path
    assert m["names"] == ["a", "b", "c"] and m["mean"].shape == (3, 3) and m["var"].shape == (3, 3)
    for p, prior in enumerate(feats.values()):
        for e, evaluated in enumerate(feats.values()):
            mean, var = task_prior_moments(evaluated, prior, convention=convention)
            # the same float64 sums in other tiles (block_size 7 vs the default): round-off only, ~1e-15 relative
            assert float(m["mean"][p, e]) == pytest.approx(mean, rel=1e-10, abs=1e-12)
            assert float(m["var"][p, e]) == pytest.approx(var, rel=1e-10, abs=1e-12)


def test_fig6_same_features_twice_give_equal_rows_and_columns():
    x, y = _features()["a"], _features()["b"]
    m = prior_matrix({"x": x, "y": y, "x again": x.clone()})
    for key in ("mean", "var"):
        t = m[key]
        # identical inputs through identical code: bit-for-bit equal
        assert torch.equal(t[0], t[2]) and torch.equal(t[:, 0], t[:, 2])
    same = prior_matrix({"x": x, "x again": x.clone()})
    assert torch.equal(same["mean"], same["mean"][0, 0].expand(2, 2))


def test_fig6_bad_features_are_refused():
    with pytest.raises(ValueError, match="non-empty mapping"):
        prior_matrix({})
    with pytest.raises(ValueError, match=r"features\['b'\] has 10 rows but features\['a'\] has 24.*same images"):
        prior_matrix({"a": torch.randn(24, 3), "b": torch.randn(10, 3)})


def test_fig6_in_the_compare_backbones_report_only_when_asked(tmp_path):
    eff = {"name": "timm:test_efficientnet", "pretrained": False}
    vit = {"name": "timm:test_vit", "pretrained": False}
    small = {"num_tasks": 2, "epochs": 2, "prior_backbone": eff}
    images = digits_images(20, 16)
    plain = compare_backbones([vit, eff], small, images=images)
    assert "prior_matrix" not in plain.data and PRIOR_MATRIX_FIGURE not in plain.figures()
    with pytest.raises(TypeError, match="prior_matrix must be true or false"):
        compare_backbones([vit, eff], small, images=images, prior_matrix="yes")
    report = compare_backbones([vit, eff], small, images=images, prior_matrix=True)
    assert report.rows == plain.rows  # the probe study itself is unchanged
    data = report.data["prior_matrix"]
    assert data["names"] == ["timm:test_vit", "timm:test_efficientnet"]
    with torch.random.fork_rng(devices=[]):  # the features compare_backbones computed: prior first, then in order
        torch.manual_seed(0)
        _, zv, ze = [FeatureExtractor(build_backbone(b).eval().embed)(images).float() for b in (eff, vit, eff)]
    want = prior_matrix({"timm:test_vit": zv, "timm:test_efficientnet": ze}, TaskPriorConfig(**small))
    # the same float32 features and the same float64 code: exactly equal
    assert data["mean"] == want["mean"].tolist() and data["var"] == want["var"].tolist()
    assert "prior (row) × evaluated backbone (column)" in report.markdown
    paths = report.write(tmp_path)
    assert {p.name for p in paths.values()} >= {FIGURE, PRIOR_MATRIX_FIGURE}
    assert json.loads(paths["json"].read_text())["prior_matrix"]["mean"] == data["mean"]


def test_fig6_config_object_and_mapping_agree():
    feats = _features(12)
    a = prior_matrix(feats, TaskPriorConfig(convention="paper"))
    b = prior_matrix(feats, {"convention": "paper"})
    assert torch.equal(a["mean"], b["mean"]) and torch.equal(a["var"], b["var"])
