"""PGD against closed forms on linear models; AutoAttack on a tiny linear model."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from src.attacks import autoattack_accuracy, autoattack_correct, pgd_attack, random_init

SHAPE = (3, 8, 8)


@pytest.fixture(autouse=True)
def _one_thread():
    """Tiny models: one intra-op thread. With 2 threads on a 2-core machine that is busy elsewhere, every tiny op
    waits for a thread to be scheduled (measured: a 6x192 @ 192x4 matmul 2 us -> 8 ms; AutoAttack 2.6 s -> 175 s)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


D = math.prod(SHAPE)


class Linear(nn.Module):
    """logits = flatten(x) @ W (+ a dropout that is the identity in eval mode, to observe train/eval)."""

    def __init__(self, num_classes: int, seed: int = 0, dtype=torch.float64) -> None:
        super().__init__()
        g = torch.Generator().manual_seed(seed)
        self.weight = nn.Parameter(torch.randn(D, num_classes, generator=g, dtype=dtype))
        self.drop = nn.Dropout(0.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.drop(x.flatten(1)) @ self.weight


def _data(n: int = 16, seed: int = 1, low: float = 0.0, high: float = 1.0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    x = low + (high - low) * torch.rand((n,) + SHAPE, generator=g, dtype=dtype)
    y = torch.arange(n) % 2
    return x, y


def _margin(model: Linear, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """logit of the true class minus logit of the other class (2 classes)."""
    z = model(x)
    return z.gather(1, y[:, None])[:, 0] - z.gather(1, (1 - y)[:, None])[:, 0]


def _norms(delta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    flat = delta.flatten(1)
    return flat.norm(dim=1), flat.abs().amax(dim=1)


@pytest.mark.parametrize("norm", ["l2", "linf"])
@pytest.mark.parametrize("start", [False, True])
def test_linear_closed_form_optimum(norm, start):
    """2-class linear model: the optimal attack moves along (w_other - w_y) (l2) or its sign (linf) by eps, and the
    margin drops by exactly eps * ||w1 - w0||_2 (l2) or eps * ||w1 - w0||_1 (linf)."""
    model = Linear(2).eval()
    x, y = _data()
    eps = 0.3
    # l2 from a random start needs a large step for the off-optimum component to die out (it shrinks by
    # eps / (eps + step) per step); linf and l2 without a random start reach the optimum with the default step.
    step = eps if (norm == "l2" and start) else None
    g = torch.Generator().manual_seed(0)
    x_adv = pgd_attack(
        model,
        x,
        y,
        eps=eps,
        norm=norm,
        steps=30 if step else 10,
        step_size=step,
        random_start=start,
        clip=None,
        generator=g,
    )
    w = model.weight.detach()[:, 1] - model.weight.detach()[:, 0]
    expected_drop = eps * (w.norm(p=2) if norm == "l2" else w.norm(p=1))
    drop = _margin(model, x, y) - _margin(model, x_adv, y)
    torch.testing.assert_close(drop, expected_drop.expand_as(drop), rtol=1e-4, atol=0)


@pytest.mark.parametrize("norm", ["l2", "linf"])
def test_stays_in_ball_and_image_range(norm):
    model = Linear(2, dtype=torch.float32).eval()
    x, y = _data(dtype=torch.float32)
    x[0] = 0.0  # corners of the image box: clipping must bite
    x[1] = 1.0
    eps = 0.5 if norm == "l2" else 0.1
    for seed in range(3):
        g = torch.Generator().manual_seed(seed)
        x_adv = pgd_attack(model, x, y, eps=eps, norm=norm, steps=5, generator=g)
        l2, linf = _norms(x_adv - x)
        assert float((l2 if norm == "l2" else linf).max()) <= eps + 1e-6
        assert float(x_adv.min()) >= 0.0 and float(x_adv.max()) <= 1.0
        assert x_adv.dtype == x.dtype and x_adv.shape == x.shape and not x_adv.requires_grad


@pytest.mark.parametrize("norm", ["l2", "linf"])
def test_random_init_uniform_in_ball(norm):
    x = torch.zeros(4000, 2)
    delta = random_init(x, 1.0, norm, torch.Generator().manual_seed(0))
    l2, linf = _norms(delta)
    if norm == "l2":  # uniform in the 2-d unit disc: radius^2 ~ U(0, 1)
        assert float(l2.max()) <= 1.0 + 1e-6
        assert abs(float((l2**2).mean()) - 0.5) < 0.02
    else:  # uniform in the square: coordinates ~ U(-1, 1), variance 1/3
        assert float(linf.max()) <= 1.0
        assert abs(float(delta.var()) - 1 / 3) < 0.02


def test_generator_determinism():
    model = Linear(2, dtype=torch.float32).eval()
    x, y = _data(dtype=torch.float32)

    def run(seed: int, steps: int = 3) -> torch.Tensor:
        return pgd_attack(model, x, y, eps=0.5, steps=steps, generator=torch.Generator().manual_seed(seed))

    assert torch.equal(run(0), run(0))
    assert not torch.allclose(run(0, steps=1), run(1, steps=1))


def test_no_side_effects_on_model():
    """Gradients go to delta only; parameter .grad, requires_grad flags and train/eval modes stay as they were."""
    model = Linear(2, dtype=torch.float32)
    model.train()
    model.drop.eval()
    marker = torch.full_like(model.weight, 7.0)
    model.weight.grad = marker.clone()
    x, y = _data(dtype=torch.float32)
    pgd_attack(model, x, y, eps=0.5, steps=2)
    assert torch.equal(model.weight.grad, marker)
    assert model.weight.requires_grad
    assert model.training and not model.drop.training
    model.weight.grad = None
    model.weight.requires_grad_(False)  # a frozen model still has input gradients
    x_adv = pgd_attack(model, x, y, eps=0.5, steps=2)
    assert model.weight.grad is None and not model.weight.requires_grad
    assert not torch.equal(x_adv, x)


def test_works_under_inference_mode_and_no_grad():
    model = Linear(2, dtype=torch.float32).eval()
    x, y = _data(dtype=torch.float32)
    reference = pgd_attack(model, x, y, eps=0.5, steps=2, generator=torch.Generator().manual_seed(0))
    with torch.inference_mode():
        xi, yi = x.clone(), y.clone()
        inside = pgd_attack(model, xi, yi, eps=0.5, steps=2, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        inside_no_grad = pgd_attack(model, x, y, eps=0.5, steps=2, generator=torch.Generator().manual_seed(0))
    assert torch.equal(inside, reference) and torch.equal(inside_no_grad, reference)


def test_zero_gradient_gives_no_nan():
    x, y = _data(dtype=torch.float32)

    def constant(inp: torch.Tensor) -> torch.Tensor:  # logits independent of the input: gradient exactly 0
        return inp.flatten(1)[:, :2] * 0.0

    for norm in ("l2", "linf"):
        x_adv = pgd_attack(constant, x, y, eps=0.5, norm=norm, steps=3, random_start=False)
        assert torch.isfinite(x_adv).all() and torch.equal(x_adv, x)


def test_eps_zero_is_identity_without_forward():
    x, y = _data(dtype=torch.float32)

    def forbidden(inp: torch.Tensor) -> torch.Tensor:
        raise AssertionError("forward must not be called for eps = 0")

    out = pgd_attack(forbidden, x, y, eps=0.0, steps=0)
    assert torch.equal(out, x) and out is not x


@pytest.mark.parametrize(
    "kwargs",
    [
        {"eps": -0.1},
        {"eps": float("nan")},
        {"eps": float("inf")},
        {"eps": 0.1, "norm": "l1"},
        {"eps": 0.0, "norm": "L2"},
        {"eps": 0.1, "steps": 0},
        {"eps": 0.1, "step_size": 0.0},
        {"eps": 0.1, "clip": (1.0, 0.0)},
    ],
)
def test_bad_inputs_raise(kwargs):
    model = Linear(2, dtype=torch.float32).eval()
    x, y = _data(dtype=torch.float32)
    with pytest.raises(ValueError):
        pgd_attack(model, x, y, **kwargs)


def test_unclipped_input_with_clip_raises():
    model = Linear(2, dtype=torch.float32).eval()
    x, y = _data(dtype=torch.float32, low=-1.0, high=2.0)
    with pytest.raises(ValueError, match="clip=None"):
        pgd_attack(model, x, y, eps=0.1)
    pgd_attack(model, x, y, eps=0.1, clip=None, steps=1)  # synthetic data: allowed


def test_autoattack_matches_closed_form_on_linear_model():
    """4-class linear model, images in the middle of the box and a small l2 eps (the box never binds): a sample is
    robust iff for every other class c, logit_y - logit_c > eps * ||w_y - w_c||. AutoAttack must find exactly that."""
    torch.manual_seed(123)
    model = Linear(4, seed=3, dtype=torch.float32)
    model.train()
    model.drop.eval()  # torchattacks calls model.eval() then model.train(): modes must come back per module
    g = torch.Generator().manual_seed(5)
    x = 0.4 + 0.2 * torch.rand((12,) + SHAPE, generator=g)
    with torch.no_grad():
        y = model(x).argmax(1)  # all clean-correct
    y[:2] = (y[:2] + 1) % 4  # two clean errors
    w = model.weight.detach()
    z = model(x).detach()
    gaps = z.gather(1, y[:, None]) - z  # (N, C): logit_y - logit_c
    dists = (w.T[y][:, None, :] - w.T[None, :, :]).norm(dim=-1)  # (N, C): ||w_y - w_c||
    radius = torch.where(torch.arange(4) == y[:, None], torch.inf, gaps / dists).amin(dim=1)  # robust radius
    r = radius[2:].sort().values
    eps = float(r[4] + r[5]) / 2  # between two critical radii: half robust, half not
    assert eps < 0.35 and float(r[5] - r[4]) > 0.01 * eps  # the box [0, 1] never binds; no near-ties
    robust = radius > eps
    state = torch.random.get_rng_state()
    correct = autoattack_correct(model, x, y, eps=eps, norm="l2", seed=0)  # Square: ~2 s per batch
    assert torch.equal(torch.random.get_rng_state(), state)  # caller's global RNG untouched
    assert torch.equal(correct, robust)
    assert model.weight.grad is None and model.weight.requires_grad
    assert model.training and not model.drop.training
    assert autoattack_accuracy(model, x, y, eps=0.0, batch_size=5) == pytest.approx(10 / 12)


def test_autoattack_validates():
    model = Linear(2, dtype=torch.float32).eval()
    x, y = _data(dtype=torch.float32, n=4)
    with pytest.raises(ValueError, match="at least 4 classes"):
        autoattack_accuracy(model, x, y, eps=0.1)
    with pytest.raises(ValueError):
        autoattack_accuracy(model, x, y, eps=0.1, norm="l1")
    with pytest.raises(ValueError):
        autoattack_accuracy(model, x * 2 - 0.5, y, eps=0.1)
