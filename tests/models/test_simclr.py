"""SimCLRPretraining (Chen et al., arXiv:2002.05709): NT-Xent against a loop reference, its invariances and known
values; the views (reproducible from the seed and step, distinct between views and steps, the crop's geometry); a
tiny fit (the loss falls, BatchNorm statistics update, labels are never read); checkpoint round trip and resume."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

from src.models import SimCLRPretraining
from src.models.simclr import DEFAULT_AUGMENTATIONS, nt_xent, perturb_each, random_resized_crop_flip
from src.perturbations import PERTURBATIONS
from src.utils.checkpoint import load_module
from tests._lightning import quiet_trainer

TINY = {"name": "timm:test_efficientnet", "pretrained": False}
N_TRAIN, BATCH = 16, 8


def _images(n: int = N_TRAIN, size: int = 16, seed: int = 0) -> torch.Tensor:
    """Smooth random images in [0, 1] (low-frequency noise upsampled): blurs and JPEG act on them as on photos."""
    g = torch.Generator().manual_seed(seed)
    low = torch.rand(n, 3, size // 4, size // 4, generator=g)
    return nn.functional.interpolate(low, size=(size, size), mode="bilinear", align_corners=False).clamp(0, 1)


def _model(**kw) -> SimCLRPretraining:
    torch.manual_seed(0)  # the backbone's and the projector's initial weights
    kw.setdefault("scheduler", None)
    kw.setdefault("proj_hidden_dim", 32)
    kw.setdefault("proj_dim", 16)
    return SimCLRPretraining(TINY, **kw)


def _state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _bn(module: nn.Module) -> list[nn.modules.batchnorm._BatchNorm]:
    return [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


# ------------------------------------------------------------------------------------------------------- NT-Xent
def _reference(z1: torch.Tensor, z2: torch.Tensor, tau: float) -> float:
    """Eq. (1) of the paper, written out: explicit loops over the 2N views in Python floats (float64)."""
    rows = [[float(v) for v in r] for r in torch.cat([z1, z2]).double()]
    n2 = len(rows)

    def sim(u: list[float], v: list[float]) -> float:
        return sum(a * b for a, b in zip(u, v)) / (math.sqrt(sum(a * a for a in u)) * math.sqrt(sum(b * b for b in v)))

    total = 0.0
    for i in range(n2):
        j = (i + n2 // 2) % n2  # the other view of the same image
        den = sum(math.exp(sim(rows[i], rows[k]) / tau) for k in range(n2) if k != i)
        total += -math.log(math.exp(sim(rows[i], rows[j]) / tau) / den)
    return total / n2


def _bound(unit: float, n: int, d: int, tau: float) -> float:
    """Round-off bound of nt_xent in a float format of unit round-off ``unit``: a cosine of two normalised rows
    (norms, D products and sums) is off by <= (D + 4)·u; each logit then by <= (D + 5)·u/τ (with the division);
    a row's loss logsumexp(logits) − logit_pos moves by <= 2·max|δlogit|, plus the rounding of the logsumexp and
    of the mean over 2N rows, <= 4N·u·|loss|, |loss| <= log(2N) + 2/τ. Worst-case, so not tight."""
    return 2 * (d + 5) * unit / tau + 4 * n * unit * (math.log(2 * n) + 2 / tau)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize(("n", "d", "tau"), [(1, 3, 0.5), (5, 16, 0.2), (12, 8, 0.07), (7, 128, 1.0)])
def test_nt_xent_matches_the_loop_reference(dtype, n, d, tau) -> None:
    g = torch.Generator().manual_seed(n * 1000 + d)
    z1 = torch.randn(n, d, generator=g, dtype=torch.float64)
    z2 = z1 + 0.5 * torch.randn(n, d, generator=g, dtype=torch.float64)  # positives closer than negatives
    got = float(nt_xent(z1.to(dtype), z2.to(dtype), tau))
    want = _reference(z1, z2, tau)
    unit = 2.0**-24 if dtype == torch.float32 else 2.0**-53
    # the float32 case also rounds the inputs to float32 (relative 2^-24 per entry: within the cosine term's bound);
    # the reference's own float64 round-off is the float64 bound, added
    tol = _bound(unit, n, d, tau) + _bound(2.0**-53, n, d, tau)
    assert got == pytest.approx(want, rel=0, abs=tol), (got, want, tol)


def test_nt_xent_invariances() -> None:
    n, d, tau = 6, 8, 0.2
    g = torch.Generator().manual_seed(1)
    z1, z2 = torch.randn(n, d, generator=g, dtype=torch.float64), torch.randn(n, d, generator=g, dtype=torch.float64)
    base = float(nt_xent(z1, z2, tau))
    perm = torch.randperm(n, generator=g)
    scale1 = torch.rand(n, 1, generator=g, dtype=torch.float64) * 10 + 0.1  # positive, one per row
    scale2 = torch.rand(n, 1, generator=g, dtype=torch.float64) * 10 + 0.1
    # each variant is the same sum in another order or after another rounding of the norms: both results are within
    # _bound(2^-53) of the exact value, so within twice it of each other
    tol = 2 * _bound(2.0**-53, n, d, tau)
    assert float(nt_xent(z1[perm], z2[perm], tau)) == pytest.approx(base, rel=0, abs=tol)  # permuting the images
    assert float(nt_xent(z2, z1, tau)) == pytest.approx(base, rel=0, abs=tol)  # swapping the views
    assert float(nt_xent(z1 * scale1, z2 * scale2, tau)) == pytest.approx(base, rel=0, abs=tol)  # scaling rows
    # ... but not to permuting one view alone (that changes which pairs are positive)
    assert abs(float(nt_xent(z1, z2[torch.roll(torch.arange(n), 1)], tau)) - base) > 1e-3


@pytest.mark.parametrize("tau", [0.1, 0.2, 1.0])
def test_nt_xent_known_values(tau) -> None:
    n = 4
    eye = torch.eye(2 * n)
    # logits are exactly 0 or 1/τ up to one rounding (≤ u/τ, u = 2^-24) and the log of a sum of ≤ 2N terms adds a few
    # more u·|loss|: |error| ≤ 2u/τ + 8N·u·(1 + 1/τ) < 1e-5 for τ ≥ 0.1
    tol = 2 * 2.0**-24 / tau + 8 * n * 2.0**-24 * (1 + 1 / tau)
    identical = float(nt_xent(eye[:n], eye[:n], tau))  # pairs identical, every other pair orthogonal
    assert identical == pytest.approx(math.log(1 + (2 * n - 2) * math.exp(-1 / tau)), rel=0, abs=tol)
    orthogonal = float(nt_xent(eye[:n], eye[n:], tau))  # all 2N views mutually orthogonal: uniform over 2N − 1
    assert orthogonal == pytest.approx(math.log(2 * n - 1), rel=0, abs=tol)
    collapsed = float(nt_xent(torch.ones(n, 5), 3 * torch.ones(n, 5), tau))  # one point: uniform as well
    assert collapsed == pytest.approx(math.log(2 * n - 1), rel=0, abs=tol)
    assert float(nt_xent(eye[:1], eye[1:2], tau)) == 0.0  # N = 1: no negatives, the positive is the only choice


def test_nt_xent_gradient_and_bad_input() -> None:
    z1 = torch.randn(4, 3, requires_grad=True)
    nt_xent(z1, torch.randn(4, 3)).backward()
    assert z1.grad is not None and torch.isfinite(z1.grad).all()
    with pytest.raises(ValueError, match="shape"):
        nt_xent(torch.randn(4, 3), torch.randn(5, 3))
    with pytest.raises(ValueError, match="temperature"):
        nt_xent(torch.randn(4, 3), torch.randn(4, 3), temperature=0.0)
    with pytest.raises(ValueError, match="N = 0"):
        nt_xent(torch.randn(0, 3), torch.randn(0, 3))


# --------------------------------------------------------------------------------------------------------- views
def test_views_are_reproducible_and_distinct() -> None:
    x = _images(8)
    a, b = _model(), _model(seed=0)
    rng = torch.random.get_rng_state()
    v1, v2 = a.views(x, "train", step=3)
    assert torch.equal(torch.random.get_rng_state(), rng), "the views drew from the global RNG"
    w1, w2 = b.views(x, "train", step=3)  # another module, same seed and step: the same views
    assert torch.equal(v1, w1) and torch.equal(v2, w2)
    assert v1.shape == x.shape and 0.0 <= float(v1.min()) and float(v1.max()) <= 1.0
    # each image's two views differ, and differ from the next step's and another seed's (continuous draws: equal
    # images would need equal crops, flips and k, probability 0)
    other_step, other_seed = a.views(x, "train", step=4)[0], _model(seed=1).views(x, "train", step=3)[0]
    for other in (v2, other_step, other_seed):
        assert all(not torch.equal(v1[i], other[i]) for i in range(len(x)))
    # the micro-batches of one step (gradient accumulation) and the stages draw differently
    assert not torch.equal(a.views(x, "train", step=3, micro=1)[0], v1)
    assert not torch.equal(a.views(x, "val", step=3)[0], v1)


def test_each_image_gets_one_of_the_listed_perturbations() -> None:
    assert set(DEFAULT_AUGMENTATIONS) <= set(PERTURBATIONS)
    x = _images(64)
    out, which = perturb_each(x, DEFAULT_AUGMENTATIONS, torch.Generator().manual_seed(0))
    # P(one of 6 names unused among 64 draws) <= 6·(5/6)^64 ≈ 5e-5; the draw is fixed by the seed anyway
    assert sorted(set(which.tolist())) == list(range(len(DEFAULT_AUGMENTATIONS)))
    assert out.shape == x.shape and all(not torch.equal(out[i], x[i]) for i in range(len(x)))
    again, which_again = perturb_each(x, DEFAULT_AUGMENTATIONS, torch.Generator().manual_seed(0))
    assert torch.equal(out, again) and torch.equal(which, which_again)


def test_crop_with_full_area_is_the_image_or_its_mirror() -> None:
    """Area 1 and aspect ratio 1: the crop is the whole image, sampled at its own pixel centres, so the view is the
    image or (flipped) its mirror; bilinear weights at exact centres are 1 and 0 up to the rounding of the grid
    coordinates (a few float32 ulps of 1: |error| <= 8·2^-24·max|x| < 1e-6)."""
    x = _images(16)
    out = random_resized_crop_flip(x, torch.Generator().manual_seed(0), scale=(1.0, 1.0), ratio=(1.0, 1.0))
    flipped = [torch.allclose(out[i], x[i].flip(-1), rtol=0, atol=1e-6) for i in range(len(x))]
    same = [torch.allclose(out[i], x[i], rtol=0, atol=1e-6) for i in range(len(x))]
    assert all(f != s for f, s in zip(flipped, same))  # exactly one of the two (the images are not symmetric)
    assert 0 < sum(flipped) < len(x)  # P(all 16 flips equal) = 2^-15
    no_flip = random_resized_crop_flip(x, torch.Generator().manual_seed(0), (1.0, 1.0), (1.0, 1.0), flip=False)
    torch.testing.assert_close(no_flip, x, rtol=0, atol=1e-6)
    small = random_resized_crop_flip(x, torch.Generator().manual_seed(0), scale=(0.5, 0.5), flip=False)
    assert all(not torch.allclose(small[i], x[i], atol=1e-3) for i in range(len(x)))  # a zoomed-in half


# ----------------------------------------------------------------------------------------------------- training
class _Dicts(Dataset):
    """{"image", "label", "index"} samples whose labels are strings: any use of them would fail."""

    def __init__(self, x: torch.Tensor) -> None:
        self.x = x

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, i: int):
        return {"image": self.x[i], "label": "not a label", "index": i}


def _fit(model: SimCLRPretraining, dataset: Dataset, steps: int) -> None:
    quiet_trainer(max_steps=steps, num_sanity_val_steps=0, limit_val_batches=0).fit(
        model, DataLoader(dataset, batch_size=BATCH)
    )


def test_fit_lowers_the_loss_trains_batchnorm_and_never_reads_labels() -> None:
    x, steps = _images(), 4
    model = _model(lr=1e-2)
    initial = _state(model)
    with torch.no_grad():
        model.eval()  # the same fixed validation views before and after, through the running statistics
        before = float(model.loss(x, "val", 0))
    _fit(model, TensorDataset(x, torch.arange(N_TRAIN) % 3), steps)
    with torch.no_grad():
        model.eval()
        after = float(model.loss(x, "val", 0))
    # at the start the projections are near-uniform: the loss is log(2N − 1) = log 31 = 3.43 (N = 16 images here);
    # 4 AdamW steps at lr 1e-2 lower it to 3.22 (measured; deterministic: seeded weights and views, so no noise
    # to allow for; 0.1 is half the measured fall, room for other CPU kernels' round-off)
    assert after < before - 0.1, (before, after)
    # train mode: one forward of the 2N views per step in every BatchNorm layer, whose statistics moved
    assert all(int(bn.num_batches_tracked) == steps for bn in _bn(model))
    trained = model.state_dict()
    assert all(not torch.equal(initial[k], v) for k, v in trained.items() if k.endswith("running_mean"))
    # labels replaced by garbage (floats of another shape, NaN; strings in dict batches; (x, y, index)): the same fit
    # gives bit-identical weights and statistics
    garbage = [
        TensorDataset(x, torch.full((N_TRAIN, 7), float("nan"))),
        TensorDataset(x, -torch.ones(N_TRAIN, dtype=torch.long), torch.arange(N_TRAIN)),
        _Dicts(x),
    ]
    for dataset in garbage:
        other = _model(lr=1e-2)
        _fit(other, dataset, steps)
        assert all(torch.equal(trained[k], v) for k, v in other.state_dict().items()), type(dataset).__name__


def test_validation_logs_and_checkpoint_round_trip(tmp_path) -> None:
    x = _images()
    model = _model(lr=1e-3, perturbations=["jpeg_compression", "glass_blur"], crop_scale=[0.6, 0.9])
    trainer = quiet_trainer(max_epochs=1, num_sanity_val_steps=0, log_every_n_steps=1)
    val = DataLoader(TensorDataset(x[:8], torch.zeros(8)), batch_size=4)
    trainer.fit(model, DataLoader(TensorDataset(x, x[:, 0, 0, 0]), batch_size=BATCH), val)
    for key in ("train/loss", "val/loss"):
        assert key in trainer.callback_metrics and torch.isfinite(trainer.callback_metrics[key]), key
    path = tmp_path / "simclr.ckpt"
    trainer.save_checkpoint(path)
    loaded = load_module(path, expected=SimCLRPretraining)
    assert type(loaded) is SimCLRPretraining
    assert loaded.hparams.perturbations == ["jpeg_compression", "glass_blur"] and loaded.hparams.crop_scale == [
        0.6,
        0.9,
    ]
    state = model.state_dict()
    assert loaded.state_dict().keys() == state.keys()
    assert all(torch.equal(state[k], v) for k, v in loaded.state_dict().items())  # weights, BatchNorm statistics
    for a, b in zip(model.views(x, "val", 0), loaded.views(x, "val", 0)):  # same seed: same views
        assert torch.equal(a, b)
    model.eval()
    loaded.eval()
    with torch.no_grad():
        assert torch.equal(model.loss(x, "val", 0), loaded.loss(x, "val", 0))  # same weights, same CPU kernels


def test_resume_draws_the_same_views(tmp_path) -> None:
    """2 epochs in one go, or 1 epoch, a checkpoint, and 1 more in a fresh module built under another global RNG
    state: bit-identical weights (the views of epoch 2 come from (seed, step), not from how the run got there)."""
    x, ckpt = _images(), tmp_path / "epoch1.ckpt"
    loader = DataLoader(TensorDataset(x, torch.zeros(N_TRAIN)), batch_size=BATCH)  # fixed order, 2 steps per epoch
    straight = _model(lr=1e-2)
    quiet_trainer(max_epochs=2, num_sanity_val_steps=0, limit_val_batches=0).fit(straight, loader)
    first = _model(lr=1e-2)
    trainer = quiet_trainer(max_epochs=1, num_sanity_val_steps=0, limit_val_batches=0)
    trainer.fit(first, loader)
    trainer.save_checkpoint(ckpt)
    torch.manual_seed(123)  # another global RNG state (and initial weights): neither may matter after loading
    resumed = SimCLRPretraining(TINY, proj_hidden_dim=32, proj_dim=16, scheduler=None, lr=1e-2)
    quiet_trainer(max_epochs=2, num_sanity_val_steps=0, limit_val_batches=0).fit(resumed, loader, ckpt_path=ckpt)
    assert resumed.global_step == straight.global_step == 4
    want = straight.state_dict()
    assert all(torch.equal(want[k], v) for k, v in resumed.state_dict().items())


def test_micro_batches_of_one_step_get_their_own_views() -> None:
    """Under gradient accumulation the micro-batches of an optimizer step share its global_step: the views are keyed
    on (step, position within the step), counted by the module, never on the loader's batch index."""
    model, seen = _model(), []
    loss = model.loss

    def recording(x, stage, step, micro=0):
        seen.append((stage, step, micro))
        return loss(x, stage, step, micro)

    model.loss = recording
    loader = DataLoader(TensorDataset(_images(), torch.zeros(N_TRAIN)), batch_size=4)  # 4 micro-batches
    quiet_trainer(max_epochs=1, accumulate_grad_batches=2, num_sanity_val_steps=0, limit_val_batches=0).fit(
        model, loader
    )
    assert seen == [("train", 0, 0), ("train", 0, 1), ("train", 1, 0), ("train", 1, 1)]


def test_bad_arguments() -> None:
    with pytest.raises(ValueError, match="temperature"):
        _model(temperature=0)
    with pytest.raises(ValueError, match="perturbations must be a non-empty list"):
        _model(perturbations=["snow"])
    with pytest.raises(ValueError, match="crop_scale"):
        _model(crop_scale=[0.0, 1.0])
    with pytest.raises(ValueError, match="proj_dim"):
        _model(proj_dim=0)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        _model().training_step((_images(4) * 3, torch.zeros(4)), 0)
