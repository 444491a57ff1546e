"""ACC_p heads and the robustness → ACC_p regression (§5), and the sweep loop."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from src.divergence_radius import divergence_radius, fit_linear_probe, robustness_sweep, sweep_means, sweep_sums
from src.divergence_radius.downstream import ZeroShotClassifier, fit_line, regression_mse, zero_shot_weights
from src.utils.distributed import Shard

F64 = torch.float64
U = torch.finfo(F64).eps


def test_fit_line_matches_numpy_polyfit() -> None:
    g = np.random.default_rng(0)
    x = g.uniform(0, 0.5, 200)
    y = 0.9 - 1.3 * x + 0.05 * g.standard_normal(200)
    a, b = fit_line(torch.from_numpy(x), torch.from_numpy(y))
    a_ref, b_ref = np.polyfit(x, y, 1)
    # the normal equations of a 2-parameter fit have condition ~ (1 + x̄²/var x) ≈ 10 here: 1e3·κ·u is generous
    assert abs(a - a_ref) <= 1e4 * U * abs(a_ref) and abs(b - b_ref) <= 1e4 * U


def test_fit_line_constant_x_and_regression_halves() -> None:
    assert fit_line(torch.ones(5), torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0])) == (0.0, 3.0)
    x = torch.tensor([0.0, 1.0, 2.0, 3.0, 0.5, 1.5], dtype=F64)
    y = 2.0 * x + 1.0
    y[3:] += torch.tensor([0.1, -0.1, 0.2], dtype=F64)  # test half off the line by known amounts
    mse, a, b = regression_mse(x, y)
    # fitted exactly on the first half (a line): a = 2, b = 1; test MSE = mean of the squared offsets
    assert abs(a - 2.0) <= 1e3 * U and abs(b - 1.0) <= 1e3 * U
    assert abs(mse - (0.01 + 0.01 + 0.04) / 3) <= 1e3 * U
    with pytest.raises(ValueError, match="at least 2"):
        regression_mse(torch.ones(1), torch.ones(1))
    with pytest.raises(ValueError, match="finite"):
        fit_line(torch.tensor([0.0, float("nan")]), torch.ones(2))


def test_linear_probe_separates_separable_classes() -> None:
    g = torch.Generator().manual_seed(0)
    y = torch.arange(60) % 3
    z = torch.randn(60, 5, generator=g) * 0.1 + 3.0 * torch.nn.functional.one_hot(y, 5).float() + 7.0
    head = fit_linear_probe(z, y)
    assert bool((head(z).argmax(-1) == y).all())
    with pytest.raises(ValueError, match="two classes"):
        fit_linear_probe(z, torch.zeros(60, dtype=torch.long))


def test_zero_shot_weights_with_a_fake_text_encoder() -> None:
    """Prompts go through the tokenizer and encoder; class weights are normalised means over templates."""
    seen: list[str] = []
    vocab = {"cat": torch.tensor([1.0, 0.0, 0.0]), "dog": torch.tensor([0.0, 2.0, 0.0])}

    def tokenize(texts: list[str]) -> list[str]:
        seen.extend(texts)
        return texts

    def encode(texts: list[str]) -> torch.Tensor:
        return torch.stack([vocab[t.split()[-1].rstrip(".")] + (0.5 if "sketch" in t else 0.0) for t in texts])

    w = zero_shot_weights(encode, tokenize, ["cat", "dog"], templates=("a photo of a {c}.", "a sketch of a {c}."))
    assert seen == ["a photo of a cat.", "a sketch of a cat.", "a photo of a dog.", "a sketch of a dog."]
    assert torch.allclose(w.norm(dim=-1), torch.ones(2), atol=1e-6)
    clf = ZeroShotClassifier(w)
    assert clf(torch.tensor([[5.0, 0.1, 0.0], [0.1, 5.0, 0.0]])).argmax(-1).tolist() == [0, 1]
    with pytest.raises(ValueError, match="placeholder"):
        zero_shot_weights(encode, tokenize, ["cat"], templates=("a photo",))


@pytest.mark.slow
def test_open_clip_zero_shot_tiny_random_model() -> None:
    """A tiny randomly initialised open_clip CLIP (built offline from a config) through open_clip_zero_shot."""
    import open_clip

    from src.divergence_radius import open_clip_zero_shot

    model = open_clip.CLIP(
        embed_dim=16,
        vision_cfg={"image_size": 32, "layers": 1, "width": 32, "patch_size": 8, "head_width": 16},
        text_cfg={"context_length": 77, "vocab_size": 49408, "width": 32, "heads": 2, "layers": 1},
    )
    clf = open_clip_zero_shot("ViT-B-32", ["cat", "dog", "car"], model=model)
    assert clf.text_weights.shape == (3, 16)
    z = model.encode_image(torch.rand(4, 3, 32, 32))
    assert clf(z).shape == (4, 3) and torch.isfinite(clf(z)).all()


# ---------------------------------------------------------------- the sweep
def feats(x: torch.Tensor) -> torch.Tensor:
    w = torch.randn(48, 6, generator=torch.Generator().manual_seed(0))
    return torch.tanh(torch.nn.functional.adaptive_avg_pool2d(x, 4).flatten(1) @ w)


def _images(n: int) -> torch.Tensor:
    return torch.rand(n, 3, 16, 16, generator=torch.Generator().manual_seed(1))


def test_sweep_values_equal_the_functional_on_the_same_embeddings() -> None:
    x = _images(3)
    out = robustness_sweep(x, feats, perturbations=["brightness", "contrast"], m=3, chunk_size=2)
    from src.perturbations import parameter_grid, perturb

    for j, name in enumerate(out.names):
        ks = parameter_grid(name, 3)
        assert torch.equal(out.parameters[name], ks)
        pts = torch.stack([feats(x)] + [feats(perturb(x, name, float(k))) for k in ks], 1)
        # the same float32 features (identical ops on identical inputs), one float64 MEB: equal to rounding
        assert torch.allclose(out.r_dr[:, j], divergence_radius(pts), atol=1e-6, rtol=0)
    assert out.index.tolist() == [0, 1, 2] and out.acc_p is None


def test_sweep_shards_cover_every_image_once_and_sums_add_up() -> None:
    x = _images(5)
    names = ["gaussian_noise", "jpeg_compression"]
    full = robustness_sweep(x, feats, perturbations=names, m=2, chunk_size=2)
    parts = [robustness_sweep(x, feats, perturbations=names, m=2, chunk_size=2, shard=Shard(r, 3)) for r in range(3)]
    assert sorted(torch.cat([p.index for p in parts]).tolist()) == list(range(5))
    for p in parts:  # same chunk, same seeded noise: the same values whichever process computes it
        assert torch.allclose(p.r_dr, full.r_dr[p.index], atol=1e-6, rtol=0)
    total = sum(sweep_sums(p)["sum_dr"] for p in parts)
    assert torch.allclose(total, full.r_dr.sum(0), atol=1e-5, rtol=0)
    means = sweep_means(sweep_sums(full), names)
    assert set(means) == {f"{f}/{n}" for f in ("divergence_radius", "cosine_robustness") for n in [*names, "mean"]}


def test_sweep_acc_p_counts_perturbed_versions() -> None:
    x = _images(4)
    y = torch.tensor([0, 1, 0, 1])

    def always_zero(z: torch.Tensor) -> torch.Tensor:
        return torch.stack([torch.ones(len(z)), torch.zeros(len(z))], 1)

    out = robustness_sweep(x, feats, perturbations=["contrast"], m=3, labels=y, classifier=always_zero)
    assert out.acc_p[:, 0].tolist() == [1.0, 0.0, 1.0, 0.0] and out.clean_correct.tolist() == [1.0, 0.0, 1.0, 0.0]
    means = sweep_means(sweep_sums(out), out.names, accuracy=True)
    assert means["acc_p/contrast"] == 0.5 and means["acc/clean"] == 0.5


def test_sweep_bad_input() -> None:
    x = _images(2)
    with pytest.raises(ValueError, match="unknown perturbation"):
        robustness_sweep(x, feats, perturbations=["sepia"])
    with pytest.raises(ValueError, match="positive integer"):
        robustness_sweep(x, feats, m=0)
    with pytest.raises(ValueError, match=r"\(N, 3, H, W\)"):
        robustness_sweep(x[0], feats)
    with pytest.raises(ValueError, match="both labels and classifier"):
        robustness_sweep(x, feats, labels=torch.zeros(2))
    with pytest.raises(FloatingPointError, match="NaN"):
        robustness_sweep(x, lambda t: feats(t) * float("nan"), perturbations=["contrast"], m=1)
