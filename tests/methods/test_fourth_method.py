"""A fourth method registered as one ``METHODS`` row (no shared file edited) is picked up by the report (run, cache,
table, direction, figure), by model selection (its logged score's direction and metric) and by ``python -m src.report``
(its options from a YAML block named after it)."""

from __future__ import annotations

import json
from dataclasses import dataclass

import pytest
import torch
from torchmetrics import MeanMetric

from src.methods import METHODS, AuditPart, MethodSpec, PartContext, Score
from src.utils.options import Options

NET = {"name": "timm:resnet10t", "pretrained": False}


@dataclass(frozen=True)
class ToyOptions(Options):
    """The toy method's one option."""

    scale: float = 1.0

    OPTIONS_BLOCK = "the toy_norm: block"

    def __post_init__(self) -> None:
        if not self.scale > 0:
            raise ValueError(f"scale must be > 0, got {self.scale}")


class ToyNorm(MeanMetric):
    """Mean feature norm (a torchmetric; lower is "better" for this toy)."""

    higher_is_better = False


def toy_run(bb, ctx: PartContext) -> dict:
    g = torch.Generator().manual_seed(0)
    x = torch.rand(4, 3, 32, 32, generator=g)
    with torch.no_grad():
        return {"norm": float(bb.embed(x).norm(dim=1).mean()) * ctx.options.scale}


def toy_figure(values):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(3, 2))
    fig.add_subplot().bar(range(len(values)), [v["norm"] for v in values.values()])
    return fig


TOY = MethodSpec(
    name="toy_norm",
    options=ToyOptions,
    compare_backbones=__name__ + ":toy_run",
    metric=__name__ + ":ToyNorm",
    callback=__name__ + ":ToyNorm",
    scores=(Score("norm", False, column="toy_norm", doc="mean feature norm"),),
    audit_parts=(
        AuditPart(
            "toy_norm",
            run=toy_run,
            settings=lambda ctx: {"scale": ctx.options.scale},
            columns=lambda v: {"toy_norm": v["norm"]},
            check=lambda v: float(v["norm"]),
            figure=toy_figure,
            figure_name="toy_norm.png",
            caption="Toy: mean feature norm",
        ),
    ),
)


@pytest.fixture
def toy(monkeypatch):
    monkeypatch.setitem(METHODS, "toy_norm", TOY)
    return TOY


def _digits():
    g = torch.Generator().manual_seed(1)
    x, y = torch.rand(24, 3, 32, 32, generator=g), torch.arange(24) % 2
    return {"toy": ((x[:16], y[:16]), (x[16:], y[16:]))}


def test_the_report_runs_caches_tabulates_and_draws_a_registered_method(toy, tmp_path) -> None:
    from src.report.audit import AuditConfig, all_parts, run_audit
    from src.report.render import audit_report, direction

    assert "toy_norm" in all_parts()
    cfg = AuditConfig(parts=("toy_norm", "downstream"), methods={"toy_norm": {"scale": 2.0}},
                      downstream={"steps": 1})  # fmt: skip
    assert cfg.options("toy_norm") == ToyOptions(scale=2.0)
    res = run_audit([NET], cfg, downstream=_digits(), cache_dir=str(tmp_path))
    one = run_audit([NET], AuditConfig(parts=("toy_norm",)), cache_dir=str(tmp_path))
    assert res.values["timm:resnet10t"]["toy_norm"]["norm"] == pytest.approx(
        2.0 * one.values["timm:resnet10t"]["toy_norm"]["norm"], rel=1e-12
    )  # the options reach the part; scale is in the cache key (two entries, not one reused)
    again = run_audit([NET], cfg, downstream=_digits(), cache_dir=str(tmp_path))
    assert again.cached["timm:resnet10t"]["toy_norm"] is True
    assert direction("toy_norm") is False
    report, html = audit_report(res, n_boot=20)
    assert report.rows[0]["toy_norm"] == res.values["timm:resnet10t"]["toy_norm"]["norm"]
    assert "toy_norm" in report.markdown and "Toy: mean feature norm" in html
    assert "toy_norm.png" in report.figures()
    with pytest.raises(ValueError, match=r"unknown ToyOptions option\(s\) \['size'\]"):
        AuditConfig(methods={"toy_norm": {"size": 3}})
    with pytest.raises(ValueError, match=r"methods \['nope'\]"):
        AuditConfig(methods={"nope": {}})


def test_model_selection_reads_the_registered_direction_and_metric(toy) -> None:
    from src.callbacks import ScoreCheckpoint, metric_direction, metric_producer

    assert metric_direction("val/toy_norm/norm") == "min"
    assert metric_producer("probe/toy_norm/norm") is ToyNorm
    assert ScoreCheckpoint(monitor="val/toy_norm/norm").mode == "min"


def test_the_report_cli_takes_the_method_block(toy, tmp_path) -> None:
    from src.report.__main__ import run
    from tests.cli.conftest import compose_cfg

    over = ["backbones=[{name:timm:resnet10t,pretrained:false}]", "parts=[toy_norm,downstream]",
            "+toy_norm={scale:3.0}", "downstream.image_size=32", "downstream.steps=1", "downstream.max_items=200",
            "agreement.n_boot=20", "progress=false"]  # fmt: skip
    cfg = compose_cfg("report.yaml", over, tmp_path)
    cfg.paths.output_dir = str(tmp_path / "out")
    cfg.cache_dir = None
    run(cfg)
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert data["config"]["methods"] == {"toy_norm": {"scale": 3.0}}
    assert "toy_norm" in data["rows"][0] and (tmp_path / "out" / "toy_norm.png").exists()
