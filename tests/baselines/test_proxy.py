"""The proxy task draws SynBench's own samples; baseline_scores runs every score."""

from __future__ import annotations

import torch

from src.baselines import ALL_BASELINES, baseline_scores, synthetic_task
from src.synbench import SynBenchConfig
from src.synbench.plan import SamplingPlan


def _features(x: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x.reshape(len(x), -1) @ torch.linspace(-1, 1, 24).reshape(12, 2)) * 3


def test_synthetic_task_draws_exactly_synbenchs_samples() -> None:
    cfg = SynBenchConfig(n_train=300, n_test=200, normalization="none", chunk_size=64, batch_size=128)
    seen = []

    def record(x: torch.Tensor) -> torch.Tensor:
        seen.append(x.clone())
        return x.reshape(len(x), -1).double()

    trz, try_, tez, tey = synthetic_task(record, (12,), cfg, 0.7)
    plan = SamplingPlan.from_config(cfg, (12,), record, None, "cpu")
    for split, z, y in (("train", trz, try_), ("test", tez, tey)):
        xs, ys = zip(*plan.batches(0.7, split))
        assert torch.equal(z, torch.cat(xs).double()) and torch.equal(y, torch.cat(ys))
    assert (trz.shape, tez.shape) == ((300, 12), (200, 12))


def test_baseline_scores_returns_every_score_with_timings() -> None:
    cfg = SynBenchConfig(n_train=256, n_test=128, normalization="none", chunk_size=64)
    trz, try_, tez, tey = synthetic_task(_features, (12,), cfg, 2.0)
    trz = torch.cat([trz, torch.randn(256, 118, generator=torch.Generator().manual_seed(0))], 1)  # D = 120 ≥ 100
    tez = torch.cat([tez, torch.randn(128, 118, generator=torch.Generator().manual_seed(1))], 1)
    out = baseline_scores(trz, try_, tez, tey, eps=(1.0, 0.1))
    assert set(out) == {
        "logme",
        "sfda",
        "rankme",
        "alpha_req",
        "val_loss",
        "mdl",
        "sdl@1",
        "esc@1",
        "sdl@0.1",
        "esc@0.1",
    }
    assert set(out.seconds) == {"logme", "sfda", "rankme", "alpha_req", "loss_data_curve"}
    assert all(isinstance(v, float) for v in out.values())
    assert out.lower_bounds <= {"sdl@1", "esc@1", "sdl@0.1", "esc@0.1"}
    assert set(ALL_BASELINES) >= {k.split("@")[0] for k in out}
