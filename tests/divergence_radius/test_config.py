"""DivergenceRadiusConfig (issue 14): the one owner of the sweep's defaults, validated by the registry's validators,
and how every entry point combines ``config=`` with its keyword arguments."""

from __future__ import annotations

import dataclasses
import inspect

import pytest
import torch
from omegaconf import OmegaConf

from src.callbacks.divergence_radius_callback import DivergenceRadiusCallback
from src.divergence_radius import DivergenceRadiusConfig, robustness_sweep, sweep_parameters
from src.divergence_radius.report import robustness_report
from src.metrics.divergence_radius import robustness_metrics
from src.perturbations import PERTURBATIONS

SWEEP_FIELDS = ("perturbations", "m", "mode", "seed", "chunk_size")


def _feats(x: torch.Tensor) -> torch.Tensor:
    """A fixed feature map (no backbone): 4x4 average pooling, (N, 48), shifted off zero."""
    return torch.nn.functional.avg_pool2d(x, 4).flatten(1) + 0.1


def _images(n: int, seed: int = 0) -> torch.Tensor:
    return torch.rand(n, 3, 16, 16, generator=torch.Generator().manual_seed(seed))


def test_issue14_defaults_are_the_papers_and_stated_once() -> None:
    cfg = DivergenceRadiusConfig()
    assert cfg == DivergenceRadiusConfig(tuple(PERTURBATIONS), 5, "equal", 0, 16)
    assert isinstance(cfg.perturbations, tuple) and len(cfg.perturbations) == 9
    assert cfg.to_dict() == {"perturbations": list(PERTURBATIONS), "m": 5, "mode": "equal", "seed": 0, "chunk_size": 16}
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.m = 3  # type: ignore[misc]
    # no entry point repeats a default: each says None = "the config's value"
    for fn in (robustness_sweep, robustness_metrics, robustness_report, DivergenceRadiusCallback, sweep_parameters):
        params = inspect.signature(fn).parameters
        for name in ("perturbations", "m", "mode", "seed", "chunk_size"):
            if name in params:
                assert params[name].default is None, (fn.__name__, name)
        assert params.get("config", params.get("names")).default is None, fn.__name__


@pytest.mark.parametrize(
    "fields,match",
    [
        ({"m": 0}, r"^m must be a positive integer \(perturbed versions per image and perturbation\), got 0"),
        ({"m": 2.5}, r"^m must be a positive integer .*got 2.5 \(float\)"),
        ({"mode": "grid"}, r"^mode must be 'equal' or 'random'"),
        (
            {"perturbations": ["sepia"]},
            r"^perturbations must be a non-empty list .*unknown perturbation\(s\) \['sepia'\]",
        ),
        ({"perturbations": []}, r"^perturbations must be a non-empty list .*got an empty list"),
        ({"seed": -1}, r"^seed must be an integer >= 0 \(the seed of the random perturbations\), got -1"),
        ({"seed": 2**63}, r"^seed must be an integer below 2\^63"),
        ({"seed": 1.5}, r"^seed must be an integer >= 0 .*got 1.5 \(float\)"),
        ({"chunk_size": 0}, r"^chunk_size must be an integer >= 1 \(images per chunk of the sweep\), got 0"),
        ({"chunk_size": True}, r"^chunk_size must be an integer >= 1 .*got True \(bool\)"),
    ],
)
def test_issue14_every_field_is_validated_naming_it(fields, match) -> None:
    with pytest.raises(ValueError, match=match):
        DivergenceRadiusConfig(**fields)


def test_issue14_merged() -> None:
    base = DivergenceRadiusConfig(m=3, perturbations="fog")
    assert base.perturbations == ("fog",)
    assert DivergenceRadiusConfig.coerce(None) == DivergenceRadiusConfig()
    assert DivergenceRadiusConfig.coerce(base) is base
    assert DivergenceRadiusConfig.coerce(base, m=None, seed=None) is base  # None overrides are ignored
    assert DivergenceRadiusConfig.coerce(base, seed=4) == DivergenceRadiusConfig(("fog",), 3, "equal", 4, 16)
    assert DivergenceRadiusConfig.coerce({"m": 2, "mode": "random"}, chunk_size=8) == DivergenceRadiusConfig(
        None, 2, "random", 0, 8
    )
    hydra = OmegaConf.create({"perturbations": ["fog", "frost"], "m": 2})  # a Hydra block is a mapping
    assert DivergenceRadiusConfig.coerce(hydra).perturbations == ("fog", "frost")
    with pytest.raises(
        ValueError, match=r"unknown DivergenceRadiusConfig option\(s\) \['k'\]; the options .* are perturbations, m, "
    ):
        DivergenceRadiusConfig.coerce({"k": 3})
    with pytest.raises(TypeError, match=r"config must be a DivergenceRadiusConfig, a mapping of its fields"):
        DivergenceRadiusConfig.coerce(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^m must be a positive integer"):
        DivergenceRadiusConfig.coerce(base, m=0)  # an override is validated too


def test_issue14_config_and_keywords_give_the_same_sweep() -> None:
    """robustness_sweep(config=...) equals the same sweep through keywords and through robustness_metrics (the
    same float64 computation in the same order: bit for bit)."""
    x = _images(5)
    spec = {"perturbations": ["gaussian_noise", "brightness"], "m": 2, "mode": "random", "seed": 3, "chunk_size": 2}
    a = robustness_sweep(x, _feats, DivergenceRadiusConfig(**spec))
    b = robustness_sweep(x, _feats, **spec)
    c = robustness_sweep(x, _feats, {"m": 4, "seed": 1}, **{**spec, "m": 2, "seed": 3})  # keywords override
    for other in (b, c):
        assert other.names == a.names and torch.equal(other.r_dr, a.r_dr) and torch.equal(other.r_cs, a.r_cs)
    metrics = robustness_metrics(x, _feats, spec)
    # torchmetrics mean of 5 float64 values: a few ulps from the tensor's mean (1e-15 >> 5 * 2^-53)
    assert abs(metrics["divergence_radius/gaussian_noise"] - float(a.r_dr[:, 0].mean())) <= 1e-15
    assert sweep_parameters(config=spec)["brightness"].tolist() == a.parameters["brightness"].tolist()


def test_issue14_report_and_sweep_share_the_chunk_default() -> None:
    """Once robustness_report chunked by 32 and robustness_sweep by 16 (two stated defaults): the random
    perturbations of images 16.. were drawn from another chunk's generator, so the report's per-image values differed
    from the sweep's under 'the defaults'. Both read DivergenceRadiusConfig now."""
    x, y = _images(18), torch.arange(18) % 2
    head = lambda z: torch.stack([z[:, 0], z[:, 1]], 1)  # noqa: E731  (a fixed 2-class head, no probe)
    report = robustness_report(_feats, None, None, x, y, classifier=head, perturbations=["gaussian_noise"], m=2)
    sweep = robustness_sweep(x, _feats, perturbations=["gaussian_noise"], m=2)
    assert torch.equal(report.sweep.r_dr, sweep.r_dr) and torch.equal(report.sweep.r_cs, sweep.r_cs)
    assert report.config == DivergenceRadiusConfig(perturbations=("gaussian_noise",), m=2)
    assert report.to_dict()["config"]["chunk_size"] == DivergenceRadiusConfig().chunk_size


def test_issue14_entry_points_refuse_bad_settings_with_the_registry_message() -> None:
    x = _images(2)
    unknown = r"perturbations must be a non-empty list .*unknown perturbation\(s\) \['sepia'\]; known: jpeg_compression"
    with pytest.raises(ValueError, match=unknown):
        robustness_sweep(x, _feats, perturbations=["sepia"])
    with pytest.raises(ValueError, match=unknown):
        robustness_metrics(x, _feats, perturbations=["sepia"])
    with pytest.raises(ValueError, match=unknown):
        DivergenceRadiusCallback(perturbations=["sepia"])
    with pytest.raises(ValueError, match=unknown):
        robustness_report(_feats, None, None, x, torch.zeros(2, dtype=torch.long), perturbations=["sepia"])
    from src.models import PerturbationRobustFineTune

    with pytest.raises(ValueError, match=unknown):  # refused before the backbone is built
        PerturbationRobustFineTune("no-such:backbone", perturbations=["sepia"])
    with pytest.raises(ValueError, match=r"m must be a positive integer \(perturbed versions"):
        robustness_metrics(x, _feats, m=0)
    with pytest.raises(ValueError, match=r"chunk_size must be an integer >= 1"):
        robustness_sweep(x, _feats, chunk_size=0)
