"""RepresentationSpectrumCallback: RankMe and α-ReQ of the probe features equal the functional scores (one process
and two gloo processes), collapse and undefined α-ReQ give warnings (never a NaN), a tiny Trainer run logs both,
bad arguments are refused, and the code defaults equal configs/callbacks/spectrum.yaml."""

from __future__ import annotations

import inspect
import math
import warnings
from pathlib import Path
from types import SimpleNamespace

import lightning as L
import pytest
import torch
import yaml
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from src.baselines import alpha_req, rankme
from src.baselines.spectral import DEFAULT_FIT_RANGE
from src.callbacks import RepresentationCollapseWarning, RepresentationSpectrumCallback
from src.utils.tensorboard import read_scalars
from tests._lightning import quiet_trainer
from tests._multiprocess import run_in_processes

ROOT = Path(__file__).resolve().parents[2]
F64_EPS = torch.finfo(torch.float64).eps  # u = 2.2e-16
N_IMAGES, SIDE, DIM = 150, 8, 128  # 150 photos at 8 px; D = 128 <= n: α-ReQ's fit (ranks 11..100) is defined


class SliceBackbone(nn.Module):
    """Exact features: the first 128 of the 192 pixel values (no arithmetic, so every process, thread count and
    batch split gives bitwise the same features); ``scale`` 0 and ``shift`` make collapsed ones. Records them."""

    def __init__(self, scale: float = 1.0, shift: float = 0.0) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.tensor(float(scale)))  # something to train and fingerprint
        self.shift = shift
        self.seen: list[torch.Tensor] = []

    def embed(self, x: torch.Tensor) -> torch.Tensor:
        z = x.flatten(1)[:, :DIM] * self.weight + self.shift
        self.seen.append(z.detach().clone())
        return z


class Module(L.LightningModule):
    def __init__(self, backbone: nn.Module | None = None) -> None:
        super().__init__()
        self.backbone = backbone if backbone is not None else SliceBackbone()

    def training_step(self, batch, _):
        return (self.backbone.embed(batch[0]).mean() - 1.0) ** 2

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)


def _cb(**kw) -> RepresentationSpectrumCallback:
    opts = dict(images="photos", num_images=N_IMAGES, image_size=SIDE, progress=False)
    return RepresentationSpectrumCallback(**{**opts, **kw})


def _trainer_stub(rank: int = 0, world_size: int = 1) -> SimpleNamespace:
    return SimpleNamespace(global_rank=rank, world_size=world_size, datamodule=None, current_epoch=0)


def _eigen_error(z: torch.Tensor) -> float:
    """Absolute error bound δ of every eigenvalue between two float64 computations of the spectra of the same
    features ``z`` that differ in summation order (moments summed per batch / per rank vs one product, ZᵀZ vs ZZᵀ,
    centred features vs Σzzᵀ − ΣzΣzᵀ/n): δ <= 4·D·u·(λ_max(ZᵀZ) + ‖Σz‖²/n) -- the sums of n products (<= n·u
    relative per entry, ‖·‖₂ <= D·max entry), the moment form's cancellation of ‖Σz‖²/n, and eigvalsh's backward
    error (a few u·‖G‖); the factor 4 covers the three terms."""
    z = z.double()
    lam_max = float(torch.linalg.eigvalsh(z.T @ z)[-1])
    return 4 * z.shape[1] * F64_EPS * (lam_max + float(z.sum(0).pow(2).sum()) / z.shape[0])


def _rankme_tolerance(z: torch.Tensor) -> float:
    """|ΔRankMe| bound: σ_k = √λ_k moves by Δσ_k <= min(√δ, δ / (2σ_k)); p_k = σ_k/‖σ‖₁ + ε by <= 2Δσ_k/‖σ‖₁
    (numerator and norm); RankMe = exp(H) with |∂H/∂p_k| = |log p_k + 1| <= 1 − log ε ≈ 17.1 (p_k >= ε = 1e-7),
    so |ΔRankMe| <= RankMe·17.1·Σ_k 2Δσ_k/‖σ‖₁."""
    delta, z = _eigen_error(z), z.double()
    sigma = torch.linalg.eigvalsh(z.T @ z).flip(0).clamp_min(0)[: min(z.shape)].sqrt()
    d_sigma = torch.minimum(torch.full_like(sigma, math.sqrt(delta)), delta / (2 * sigma.clamp_min(1e-300)))
    return rankme(z) * (1 - math.log(1e-7)) * float(2 * d_sigma.sum() / sigma.sum())


def _alpha_tolerance(z: torch.Tensor, fit_range: tuple[int, int] = DEFAULT_FIT_RANGE) -> float:
    """|Δα| bound: α is the weighted least-squares slope Σ c_i log λ_i over the ranks of ``fit_range`` (c from the
    design below), and |Δ log λ_i| <= δ/λ_i, so |Δα| <= Σ|c_i|·δ/λ_i."""
    delta, z = _eigen_error(z), z.double()
    zc = z - z.mean(0)
    lam = torch.linalg.eigvalsh(zc.T @ zc).flip(0)
    lo, hi = fit_range
    ranks = torch.arange(lo, hi + 1, dtype=torch.float64)
    design = torch.stack([-ranks.log(), torch.ones_like(ranks)], 1)
    w = 1.0 / ranks
    c = torch.linalg.solve(design.T @ (design * w[:, None]), design.T * w)[0]
    return float((c.abs() * delta / lam[lo - 1 : hi]).sum())


# ---------------------------------------------------------------- values
def test_values_equal_the_functional_scores() -> None:
    """One process: the logged RankMe and α-ReQ equal src.baselines.rankme / alpha_req of the probe features."""
    cb, module = _cb(), Module()
    out = cb.compute(_trainer_stub(), module)
    z = torch.cat(module.backbone.seen)
    assert z.shape == (N_IMAGES, DIM) and torch.equal(z, cb.images.flatten(1)[:, :DIM])
    tol_rankme, tol_alpha = _rankme_tolerance(z), _alpha_tolerance(z)  # derived in their docstrings
    assert abs(out["rankme"] - rankme(z)) <= tol_rankme
    assert abs(out["alpha_req"] - alpha_req(z)) <= tol_alpha
    assert set(out) == {"rankme", "alpha_req"} and 1.0 < out["rankme"] <= DIM


def _compute_on_rank(rank: int, world_size: int) -> dict[str, float]:
    return _cb().compute(_trainer_stub(rank, world_size), Module())


@pytest.mark.slow
def test_ddp_equals_one_process() -> None:
    """Two gloo processes, each embedding every other probe image (75 each), give the one-process values and the
    functional scores of all 150 features (exact features: SliceBackbone; tolerances: _rankme_tolerance, _alpha_tolerance)."""
    ref_cb, module = _cb(), Module()
    ref = ref_cb.compute(_trainer_stub(), module)
    z = torch.cat(module.backbone.seen)
    tol_rankme, tol_alpha = _rankme_tolerance(z), _alpha_tolerance(z)
    for res in run_in_processes(_compute_on_rank, 2):
        assert "__error__" not in res, res
        assert res.keys() == ref.keys() == {"rankme", "alpha_req"}
        assert abs(res["rankme"] - rankme(z)) <= tol_rankme and abs(res["rankme"] - ref["rankme"]) <= 2 * tol_rankme
        assert abs(res["alpha_req"] - alpha_req(z)) <= tol_alpha
        assert abs(res["alpha_req"] - ref["alpha_req"]) <= 2 * tol_alpha


# ---------------------------------------------------------------- collapse and undefined α-ReQ
def test_collapsed_backbone_gives_rankme_one_and_the_warning() -> None:
    """Constant features (every image -> the all-ones vector): rank 1. RankMe = exp(H) with p = (1 + ε, ε, …) over
    m = min(n, D) = 128 singular values; the ε terms give H <= m·ε·(1 − log ε) ≈ 128·1e-7·17.1 = 2.2e-4 and the
    rounding-level singular values (σ_k <= √(D·u)·σ_1 ≈ 1.7e-7·σ_1, see _eigen_error) add at most
    127·(1.7e-7 + 1e-7)·(1 − log 1e-7) ≈ 5.9e-4: RankMe ∈ [1, 1 + 1e-3]. α-ReQ: the covariance is exactly 0
    (Σzzᵀ − ΣzΣzᵀ/n of integer-valued sums), so it is not logged, with a warning."""
    cb = _cb()
    cb._x = 3  # as after the third epoch
    with pytest.warns(RepresentationCollapseWarning, match=r"RankMe = 1 after 3 epoch\(s\).*collapse_threshold=2"):
        with pytest.warns(UserWarning, match=r"after 3 epoch\(s\), α-ReQ is undefined and not logged.*is zero"):
            out = cb.compute(_trainer_stub(), Module(SliceBackbone(scale=0.0, shift=1.0)))
    assert set(out) == {"rankme"} and 1.0 <= out["rankme"] <= 1.0 + 1e-3


def test_all_zero_features_log_rankme_zero_with_the_warning() -> None:
    """All-zero features: RankMe's entropy is undefined; the callback logs 0 (the rank of the zero matrix) and warns,
    even with collapse_threshold=None; α-ReQ is not logged. No NaN."""
    cb = _cb(collapse_threshold=None)
    with pytest.warns(RepresentationCollapseWarning, match="every feature of every probe image is zero"):
        out = cb.compute(_trainer_stub(), Module(SliceBackbone(scale=0.0)))
    assert out == {"rankme": 0.0}


def test_healthy_features_do_not_warn() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = _cb().compute(_trainer_stub(), Module())
    assert out["rankme"] > 2.0 and math.isfinite(out["alpha_req"])


def test_alpha_req_is_skipped_with_one_warning_when_undefined() -> None:
    """50 probe images give 49 covariance eigenvalues, the fit needs 100: RankMe only, and one warning naming
    num_images and fit_range (not repeated at the next computation)."""
    cb, module = _cb(num_images=50), Module()
    with pytest.warns(UserWarning, match=r"needs 100 covariance eigenvalues.*num_images >= 101.*fit_range=\(11, 49\)"):
        first = cb.compute(_trainer_stub(), module)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        second = cb.compute(_trainer_stub(), module)
    assert set(first) == set(second) == {"rankme"}
    z = module.backbone.seen[0]
    assert abs(first["rankme"] - rankme(z)) <= _rankme_tolerance(z)  # derived in its docstring
    short = _cb(num_images=50, fit_range=(2, 40)).compute(_trainer_stub(), module)
    assert abs(short["alpha_req"] - alpha_req(z, (2, 40))) <= _alpha_tolerance(z, (2, 40))


def test_narrow_features_name_the_feature_dimension() -> None:
    module = Module(SliceBackbone())
    with pytest.warns(UserWarning, match=r"a backbone with >= 100 feature dimensions"):
        _cb(feature_fn=lambda m, x: m.backbone.embed(x)[:, :64]).compute(_trainer_stub(), module)


# ---------------------------------------------------------------- in a Trainer
def _loader() -> DataLoader:
    g = torch.Generator().manual_seed(0)
    return DataLoader(TensorDataset(torch.rand(8, 3, SIDE, SIDE, generator=g)), batch_size=4)


def test_tiny_trainer_run_logs_both_scores(tmp_path: Path) -> None:
    """Two epochs of a tiny net: both names on the logger at Lightning's steps (0 before training, then the step
    of each epoch's last batch, where Lightning logs epoch-end metrics), in callback_metrics."""
    cb = _cb(at_train_start=True)
    logger = L.pytorch.loggers.TensorBoardLogger(str(tmp_path))
    trainer = quiet_trainer(max_epochs=2, logger=logger, callbacks=[cb], log_every_n_steps=1)
    trainer.fit(Module(), train_dataloaders=_loader())
    scalars = read_scalars(tmp_path)
    k = trainer.global_step // 2  # optimizer steps per epoch
    for name in ("val/spectrum/rankme", "val/spectrum/alpha_req"):
        assert [s for s, _ in scalars[name]] == [0, k - 1, 2 * k - 1]
        assert all(math.isfinite(v) for _, v in scalars[name])
        assert name in trainer.callback_metrics
    assert cb.computations == 3  # the weights change every epoch (SGD on `weight`)
    # Lightning keeps logged scalars as float32: |relative rounding| <= 2^-24 ≈ 6e-8 < 1e-6
    assert float(trainer.callback_metrics["val/spectrum/rankme"]) == pytest.approx(cb.last["rankme"], rel=1e-6)


def test_collapse_warning_in_a_trainer_names_the_epoch() -> None:
    cb = _cb()
    trainer = quiet_trainer(max_epochs=1, callbacks=[cb])
    with pytest.warns(RepresentationCollapseWarning, match=r"after 1 epoch\(s\)"):
        trainer.fit(Module(SliceBackbone(scale=0.0, shift=1.0)), train_dataloaders=_loader())


# ---------------------------------------------------------------- arguments
@pytest.mark.parametrize(
    "kw, err, match",
    [
        ({"images": "imagenet"}, ValueError, r"images='imagenet' is not a probe-image source"),
        ({"num_images": 1}, ValueError, r"num_images must be >= 2"),
        ({"fit_range": (100, 11)}, ValueError, r"fit_range=\(100, 11\) must be \(first, last\) ranks"),
        ({"fit_range": 100}, TypeError, r"fit_range must be \(first, last\) ranks.*fit_range=\(11, 100\)"),
        ({"collapse_threshold": -1.0}, ValueError, r"collapse_threshold \(None = no collapse warning\) must be"),
        ({"max_batch": 0}, ValueError, r"max_batch must be an integer >= 1"),
        ({"images": torch.rand(1, 3, 8, 8)}, ValueError, r"the probe set has 1 image\(s\), it needs >= 2"),
    ],
)
def test_bad_arguments_are_refused(kw: dict, err: type, match: str) -> None:
    with pytest.raises(err, match=match):
        _cb(**kw)


def test_feature_maps_and_nan_features_are_refused() -> None:
    with pytest.raises(ValueError, match=r"returned shape \(150, 3, 8, 8\).*feature_fn=lambda module, x"):
        _cb(feature_fn=lambda m, x: x).compute(_trainer_stub(), Module())
    with pytest.raises(FloatingPointError, match=r"NaN/inf features for 150 of 150 probe images"):
        _cb(feature_fn=lambda m, x: x.flatten(1) * math.nan).compute(_trainer_stub(), Module())


def test_code_defaults_equal_yaml() -> None:
    cfg = yaml.safe_load((ROOT / "configs/callbacks/spectrum.yaml").read_text())["spectrum"]
    params = inspect.signature(RepresentationSpectrumCallback).parameters
    assert cfg.pop("_target_") == "repbench.callbacks.RepresentationSpectrumCallback"
    for key, value in cfg.items():
        default = params[key].default
        assert (list(default) if isinstance(default, tuple) else default) == value, key


def test_opt_in_config_instantiates() -> None:
    """callbacks=[default,spectrum] adds it; the default callbacks do not include it."""
    from hydra import compose, initialize_config_dir
    from hydra.utils import instantiate

    with initialize_config_dir(str(ROOT / "configs"), version_base="1.3"):
        default = compose("train.yaml", overrides=[])
        opted = compose("train.yaml", overrides=["callbacks=[default,spectrum]"])
    assert "spectrum" not in default.callbacks
    cb = instantiate(opted.callbacks.spectrum)
    assert isinstance(cb, RepresentationSpectrumCallback) and cb.fit_range == DEFAULT_FIT_RANGE
