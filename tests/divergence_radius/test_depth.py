"""Depth estimation under perturbation (Liu et al., arXiv:2604.14973, App. D–F; issue 28): RMSE and RMSE_p (eq. 16)
against closed forms, the head's readouts, the losses, the regression halves and quartile groups on constructed
data, and the depth report end to end on synthetic scenes with a tiny random backbone."""

from __future__ import annotations

import math

import pytest
import torch

from src.backbones import create_backbone
from src.divergence_radius.depth import (
    SILOG_LAMBDA,
    DepthHead,
    DepthHeadConfig,
    DepthModel,
    depth_loss,
    fit_depth_head,
    image_rmse,
    silog_loss,
)
from src.divergence_radius.downstream import quartile_means
from src.divergence_radius.protocol import DepthTargets, SweepOutput, robustness_sweep
from src.divergence_radius.report import RMSE_P, depth_report, drop_correlations, regression_rows
from src.images.depth_scenes import depth_scenes
from src.perturbations import parameter_grid, perturb

F64 = torch.float64


def test_rmse_of_a_known_map_is_its_closed_form() -> None:
    """Image 0: error +a on half its pixels and −b on the other half → sqrt((a² + b²) / 2); image 1: a constant error
    c on its valid pixels and garbage on the invalid ones (ground truth 0, NaN) → |c| (invalid pixels ignored).
    float64 maps and arithmetic: equal to 1e-12."""
    target = torch.full((2, 1, 4, 4), 3.0, dtype=F64)
    pred = target.clone()
    a, b, c = 0.5, 1.25, -0.7
    pred[0, 0, :2] += a
    pred[0, 0, 2:] -= b
    pred[1] += c
    target[1, 0, 0, 0], target[1, 0, 0, 1] = 0.0, float("nan")  # no ground truth there
    pred[1, 0, 0, :2] = 1e6
    got = image_rmse(pred, target)
    assert got.dtype == F64
    assert torch.allclose(got, torch.tensor([math.sqrt((a * a + b * b) / 2), abs(c)], dtype=F64), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="no valid ground-truth pixel"):
        image_rmse(pred[:1], torch.zeros_like(pred[:1]))


def test_losses_closed_forms() -> None:
    """pred = k·y gives g = log k everywhere: silog = sqrt(k'² − λ k'²) = sqrt(1 − λ)·|log k| (λ = 0.85: the
    DINOv2 weighting); the MSE of a constant offset c is c²."""
    y = torch.rand(3, 1, 5, 5) * 5 + 0.5
    k = 1.7
    expect = math.sqrt(1 - SILOG_LAMBDA) * abs(math.log(k))
    assert silog_loss(k * y, y).item() == pytest.approx(expect, rel=1e-5)  # float32 logs: ~1e-7 relative
    assert depth_loss(y + 0.3, y, "mse").item() == pytest.approx(0.09, rel=1e-5)
    assert silog_loss(y, y).item() == pytest.approx(0.0, abs=1e-6)
    with pytest.raises(ValueError, match="loss must be one of"):
        depth_loss(y, y, "l1")


@pytest.mark.parametrize("readout", ["bins", "sigmoid"])
def test_head_readout_of_zero_logits(readout: str) -> None:
    """Zero conv weights and bias: every bin weight is (0 + 0.1)/(n·0.1) = 1/n → depth = the mean bin centre
    (min + max)/2 (equally spaced bins); sigmoid(0) = 1/2 → max/2. The map is resized to the requested size."""
    head = DepthHead(8, 4, readout=readout, n_bins=16, min_depth=1.0, max_depth=9.0)
    torch.nn.init.zeros_(head.conv.weight)
    torch.nn.init.zeros_(head.conv.bias)
    head.eval()
    out = head(torch.randn(2, 8, 3, 3), torch.randn(2, 4), (20, 24))
    assert out.shape == (2, 1, 20, 24)
    expect = 5.0 if readout == "bins" else 4.5
    assert torch.allclose(out, torch.full_like(out, expect), atol=1e-5)
    assert head.conv.in_channels == 12  # map + embedding (with_embedding, DINOv2's class token)
    with pytest.raises(ValueError, match="embedding"):
        head(torch.randn(2, 8, 3, 3), None)


def test_config_refuses_bad_values() -> None:
    with pytest.raises(ValueError, match="readout"):
        DepthHeadConfig(readout="softmax")
    with pytest.raises(ValueError, match="min_depth must be < max_depth"):
        DepthHeadConfig(min_depth=5.0, max_depth=1.0)
    with pytest.raises(TypeError, match="unknown DepthHeadConfig option"):
        DepthHeadConfig.coerce({"bins": 3})


def test_quartile_means_closed_form() -> None:
    """x = 0..9 (shuffled), y = 2x + 1: groups of sizes 3, 3, 2, 2 (numpy.array_split) by rank of x hold
    {0,1,2}, {3,4,5}, {6,7}, {8,9}: mean x 1, 4, 6.5, 8.5 and mean y = 2·mean x + 1."""
    x = torch.tensor([7.0, 2, 9, 0, 4, 1, 8, 3, 6, 5])
    qx, qy = quartile_means(x, 2 * x + 1)
    assert qx.tolist() == [1.0, 4.0, 6.5, 8.5] and qy.tolist() == [3.0, 9.0, 14.0, 18.0]


def test_regression_halves_on_constructed_data() -> None:
    """RMSE_p = 2·R_dr + 1 on the first half (fit: slope 2, intercept 1 exactly) and + δ on the second: the test MSE is
    δ² (to float64 rounding, 1e-12). The constant predictor is the first half's mean; its MSE is the mean squared
    deviation of the second half from it. R_cs holds a constant column: the line is the constant (slope 0)."""
    n, delta = 10, 0.3
    order = torch.arange(n)
    r_dr = torch.linspace(0.1, 0.9, n, dtype=F64)[:, None]
    rmse = 2 * r_dr + 1
    rmse[n // 2 :] += delta
    sweep = SweepOutput(("fog",), {"fog": torch.zeros(1)}, order, r_dr, torch.full((n, 1), 0.5, dtype=F64))
    (row,) = regression_rows(sweep, rmse, order, RMSE_P.key)
    assert row["slope_r_dr"] == pytest.approx(2.0, abs=1e-12) and row["intercept_r_dr"] == pytest.approx(1.0, abs=1e-12)
    assert row["mse_r_dr"] == pytest.approx(delta**2, abs=1e-12)
    first, second = rmse[: n // 2, 0], rmse[n // 2 :, 0]
    assert row["mse_constant"] == pytest.approx(float(((second - first.mean()) ** 2).mean()), abs=1e-12)
    assert row["slope_r_cs"] == 0.0 and row["mse_r_cs"] == pytest.approx(row["mse_constant"], abs=1e-12)
    assert row["mean_rmse_p"] == pytest.approx(float(rmse.mean()), abs=1e-12)


def test_increase_correlation_is_pearson_of_the_rmse_increase() -> None:
    """App. F's reading of Table 6 with Fig. 15: across perturbations, mean R_dr against mean RMSE_p − RMSE; an
    increase exactly linear in R_dr correlates 1."""
    rows = [{"mean_r_dr": r, "mean_r_cs": r * r, "mean_rmse_p": 0.35 + 0.5 * r} for r in (0.1, 0.2, 0.4, 0.7)]
    got = drop_correlations(rows, 0.35, RMSE_P)
    assert got["pearson_r_dr_vs_increase"] == pytest.approx(1.0, abs=1e-12)
    assert 0.9 < got["pearson_r_cs_vs_increase"] < 1.0


def _known_depth_features(x: torch.Tensor) -> torch.Tensor:
    """A feature function with a known prediction: embedding = the channel means (3 values), depth map = 10 × the
    red channel (so every RMSE is computable by hand)."""
    return torch.cat([x.mean((2, 3)), 10.0 * x[:, 0].flatten(1)], 1)


def test_sweep_rmse_p_is_eq16() -> None:
    """RMSE_p(x, P) = 1/m Σ_k RMSE(y, g∘f(P(x, k))) with the sweep's own parameters (deterministic perturbations:
    P(x, k) is a function of (x, k)), and the clean RMSE is the clean prediction's; recomputed by hand to 1e-6
    (float32 forwards of the same images)."""
    torch.manual_seed(0)
    images, depth = depth_scenes(5, 32, seed=3)
    cfg = {"perturbations": ["brightness", "defocus_blur"], "m": 3, "chunk_size": 2}
    out = robustness_sweep(images, _known_depth_features, cfg, depth=DepthTargets(depth, 3))
    assert out.rmse_p.shape == (5, 2) and out.clean_rmse.shape == (5,) and out.acc_p is None
    pred = lambda x: 10.0 * x[:, :1]  # noqa: E731
    assert torch.allclose(out.clean_rmse, image_rmse(pred(images), depth), atol=1e-6)
    for j, name in enumerate(cfg["perturbations"]):
        ks = parameter_grid(name, 3)
        by_hand = torch.stack([image_rmse(pred(perturb(images, name, float(k))), depth) for k in ks]).mean(0)
        assert torch.allclose(out.rmse_p[:, j], by_hand, atol=1e-6)
    with pytest.raises(ValueError, match="embed_dim"):
        robustness_sweep(images, _known_depth_features, cfg, depth=DepthTargets(depth, 4))


def test_fitting_lowers_the_training_loss() -> None:
    """A head on a map that holds the (downsampled) depth itself, sigmoid readout, MSE: 30 epochs of Adam lower the
    training loss well below its initial value (a fit, not a closed form; the bound leaves a 2x margin)."""
    torch.manual_seed(0)
    _, depth = depth_scenes(16, 16, seed=1)
    fmap = torch.nn.functional.avg_pool2d(depth, 4)  # (16, 1, 4, 4)
    cfg = DepthHeadConfig(readout="sigmoid", with_embedding=False, loss="mse", epochs=1, lr=1e-2, upsample=1)
    first = fit_depth_head(fmap, None, depth, cfg, seed=0)
    later = fit_depth_head(fmap, None, depth, DepthHeadConfig.coerce(cfg, epochs=60), seed=0)
    with torch.no_grad():
        losses = [float(depth_loss(h(fmap, None, (16, 16)), depth, "mse")) for h in (first, later)]
    assert losses[1] < 0.5 * losses[0]


def test_depth_report_end_to_end_on_scenes() -> None:
    """A tiny random ViT on 32-px scenes: RMSE_p for every image and perturbation, the clean RMSE equal to the
    model's own predictions' (the report's head in a DepthModel, 1e-5: float32 forwards), rows and files."""
    torch.manual_seed(0)
    x, y = depth_scenes(14, 32, seed=0)
    bb = create_backbone("timm:test_vit", pretrained=False).eval()
    cfg = {"perturbations": ["brightness", "fog"], "m": 2, "chunk_size": 4}
    rep = depth_report(bb, x[:8], y[:8], x[8:], y[8:], cfg, depth_head={"epochs": 2, "n_bins": 8}, backbone_name="t")
    assert rep.sweep.rmse_p.shape == (6, 2) and [r["perturbation"] for r in rep.rows] == ["brightness", "fog"]
    head = fit_depth_head(*reversed(_maps(bb, x[:8])), y[:8], {"epochs": 2, "n_bins": 8}, seed=0)
    with torch.no_grad():
        clean = image_rmse(DepthModel(bb, head).eval()(x[8:]), y[8:])
    assert rep.clean_rmse == pytest.approx(float(clean.mean()), abs=1e-5)
    data = rep.to_dict()
    assert {"head", "clean_rmse", "rows", "increase_correlations"} <= set(data)
    assert set(rep.per_image()[0]) == {"image", "perturbation", "r_dr", "r_cs", "rmse_p"}
    assert set(rep.figures()) == {"rmse_p_vs_divergence_radius.png", "rmse_p_vs_cosine_robustness.png",
                                  "regression_mse.png"}  # fmt: skip


def _maps(bb, x):
    with torch.no_grad():
        return bb.embed_with_map(x)
