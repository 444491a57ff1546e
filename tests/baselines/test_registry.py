"""Every baseline is one row of BASELINES: the proxy task, the listing, the report's directions and the torchmetrics
read it, and a new baseline needs that row and nothing else."""

from __future__ import annotations

from types import MappingProxyType

import pytest
import torch

from src.baselines import (
    ALL_BASELINES,
    BASELINES,
    BaselineSpec,
    baseline_direction,
    baseline_names,
    baseline_scores,
    registry,
)
from src.metrics import AlphaReQ, LogME, RankMe


def _task() -> tuple[torch.Tensor, ...]:
    g = torch.Generator().manual_seed(0)
    trz, tez = torch.randn(120, 110, generator=g), torch.randn(60, 110, generator=g)  # alpha_req: ranks 11..100
    return trz, (trz[:, 0] > 0).long(), tez, (tez[:, 0] > 0).long()


def test_the_table_is_the_papers_baselines_with_their_directions() -> None:
    assert (
        ALL_BASELINES == baseline_names() == ("logme", "sfda", "rankme", "alpha_req", "val_loss", "mdl", "sdl", "esc")
    )
    # the report's directions before the table (src/report/render.py DIRECTIONS), the regression reference
    before = {"logme": True, "sfda": True, "rankme": True, "alpha_req": None}
    before |= {"val_loss": False, "mdl": False, "sdl": False, "esc": False}
    assert {n: s.higher_is_better for n, s in BASELINES.items()} == before
    assert baseline_direction("sdl@1") is False and baseline_direction("esc@0.1") is False
    assert baseline_direction("logme") is True and baseline_direction("alpha_req") is None
    assert baseline_direction("synbench") is None  # not a baseline
    assert (RankMe.higher_is_better, LogME.higher_is_better, AlphaReQ.higher_is_better) == (True, True, None)
    assert [n for n, s in BASELINES.items() if s.takes_eps] == ["sdl", "esc"]


def test_a_new_baseline_is_one_row(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = []

    def toy(curve, eps):  # a curve score keyed by ε, lower is better
        calls.append(eps)
        return curve.losses[0] - eps

    row = BaselineSpec("toy", toy, "curve", False, "a toy score", ("eps",))
    monkeypatch.setattr(registry, "BASELINES", MappingProxyType({**BASELINES, "toy": row}))
    assert baseline_names()[-1] == "toy" and baseline_direction("toy@0.5") is False
    out = baseline_scores(*_task(), eps=(1.0, 0.5))
    assert list(out) == [
        "logme", "sfda", "rankme", "alpha_req", "val_loss", "mdl", "sdl@1", "esc@1", "toy@1", "sdl@0.5", "esc@0.5",
        "toy@0.5",
    ]  # fmt: skip
    assert calls == [1.0, 0.5] and list(out.seconds)[-1] == "loss_data_curve"
    only = baseline_scores(*_task(), which=("toy",), eps=(0.5,))
    assert list(only) == ["toy@0.5"] and list(only.seconds) == ["loss_data_curve"]


def test_a_features_row_is_timed_and_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    row = BaselineSpec("mean_norm", lambda z: z.norm(dim=1).mean(), "features", True, "mean feature norm")
    monkeypatch.setattr(registry, "BASELINES", MappingProxyType({"mean_norm": row}))
    out = baseline_scores(*_task())
    assert list(out) == ["mean_norm"] and isinstance(out["mean_norm"], float) and list(out.seconds) == ["mean_norm"]
    with pytest.raises(ValueError, match=r"unknown \['logme'\]; choose from \('mean_norm',\)"):
        baseline_scores(*_task(), which=("logme",))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"needs": "images"}, "needs must be one of"),
        ({"options": ("alpha",)}, "unknown options"),
        ({"higher_is_better": "max"}, "higher_is_better must be True, False or None"),
        ({"name": "a@b"}, "without '@'"),
    ],
)
def test_a_bad_row_is_refused(kwargs: dict, match: str) -> None:
    args = {"name": "x", "fn": len, "needs": "features", "higher_is_better": True, "doc": ""} | kwargs
    with pytest.raises(ValueError, match=match):
        BaselineSpec(**args)
