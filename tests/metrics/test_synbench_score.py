"""SynBenchScore and the one protocol loop: the runner, the metric and the callback agree at 1, 2 and 3 gloo
processes, including ranks without any chunk; a failure on one rank raises on all (no hang)."""

from __future__ import annotations

import math

import lightning as L
import pytest
import torch

from callbacks import SynBenchCallback
from src.metrics import SynBenchScore
from src.metrics.synbench_score import scores_of, synbench_distributed
from src.synbench import SynBenchConfig, synbench
from src.synbench.plan import SamplingPlan
from src.synbench.protocol import make_extract, run_protocol
from src.utils.distributed import Shard, all_reduce_sum, process_seams
from tests._multiprocess import run_in_processes

SHAPE = (3, 8, 8)
# 2 training chunks and 2 test chunks of 64: at 3 processes rank 2 draws no chunk at all (ranks > chunks)
CFG = SynBenchConfig(
    s_values=(0.5, 1.0, 2.0),
    n_train=120,
    n_test=100,
    eps=(0.0, 0.2, 0.4),
    a_T=(0.6,),
    normalization="none",
    chunk_size=64,
    batch_size=64,
)
_A = torch.randn(192, 12, generator=torch.Generator().manual_seed(0))
U = 2.0**-53  # float64 unit roundoff


def feature_fn(x: torch.Tensor) -> torch.Tensor:
    """A fixed random linear map of the 192 pixels to 12 features (no normalisation inside)."""
    return x.flatten(1) @ _A


class _Encoder(torch.nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return feature_fn(x)


class _Module(L.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.backbone = _Encoder()


def _tolerance() -> float:
    """Relative agreement expected between process counts. The processes only change the float64 summation
    order of the statistics and the shift (rank 0's first batch): Σ changes by ~n·u relatively, W by
    ≤ κ(Σ)·n·u (first-order perturbation of a solve), the scaled bounds likewise; ×10 for the constant.
    Accuracies are counts: identical unless a test margin is within that relative distance of 0 (probability
    of the order of the tolerance itself)."""
    z = feature_fn(torch.randn(4000, *SHAPE, generator=torch.Generator().manual_seed(1))).double()
    kappa = float(torch.linalg.cond(torch.cov(z.T)))
    tol = 10 * CFG.n_train * kappa * U
    assert tol <= 1e-12, tol  # the brief's 1e-12 is implied by the conditioning here
    return 1e-12


def _agree(rank: int, world: int) -> dict:
    scores, res = synbench_distributed(feature_fn, SHAPE, CFG)
    cb = SynBenchCallback(input_size=SHAPE, config=CFG, log_figure=False)
    cb_scores = cb.compute(None, _Module())
    # count the collectives of one protocol run on this rank
    calls = []

    def counting(t: torch.Tensor) -> torch.Tensor:
        calls.append(tuple(t.shape))
        return all_reduce_sum(t)

    shard, _ = process_seams()
    plan = SamplingPlan.from_config(CFG, SHAPE, feature_fn)
    run_protocol(make_extract(feature_fn), plan, CFG, shard, counting)
    return {
        "scores": scores,
        "acc": res.accuracy,
        "bound": res.bound,
        "cb_scores": cb_scores,
        "cb_acc": cb.result.accuracy,
        "cb_bound": cb.result.bound,
        "collectives": len(calls),
        "dim": res.feature_dim,
    }


def _fails(rank: int, bad_rank: int, where: str) -> str:
    calls = [0]

    def fn(x: torch.Tensor) -> torch.Tensor:
        calls[0] += 1
        if rank == bad_rank and (where == "first" or calls[0] > 1):
            if where == "nan":
                return feature_fn(x) * float("nan")
            raise RuntimeError("boom on purpose")
        return feature_fn(x)

    try:
        synbench_distributed(fn, SHAPE, CFG)
    except Exception as err:
        return f"{type(err).__name__}: {err}"
    return "no error"


def _worker(rank: int, world: int, failures: list) -> dict:
    out = _agree(rank, world)
    # after each failure every rank has run the same collectives, so the group stays usable for the next one
    out["failures"] = [_fails(rank, bad, where) for bad, where in failures]
    return out


FAILURES = [(0, "first"), (1, "later"), (1, "nan")]  # rank 2 of 3 owns no chunk: failures on ranks with work


def test_runner_and_metric_are_one_loop() -> None:
    res = synbench(feature_fn, input_shape=SHAPE, config=CFG)
    scores, res2 = synbench_distributed(feature_fn, SHAPE, CFG)
    # the same code path on the same samples in one process: bitwise equal
    assert torch.equal(res2.accuracy, res.accuracy) and torch.equal(res2.bound, res.bound)
    assert scores == scores_of(res)
    m = SynBenchScore(CFG, input_shape=SHAPE)
    m.update(feature_fn)
    out = m.compute()
    # compute() gives the scores; best_eps (a choice of ε, not a higher-is-better score) is a separate output
    assert {k: float(v) for k, v in out.items()} == {k: v for k, v in scores.items() if k != "best_eps"}
    assert m.best_eps() == scores["best_eps"]
    assert set(dict(m.named_buffers())) == set()  # states only, no buffers or hidden tensors
    assert set(m._defaults) == {"n_correct", "sum_bound", "n_total", "n_updates", "dim_sum"}


def test_compute_before_update_is_an_error() -> None:
    m = SynBenchScore(CFG, input_shape=SHAPE)
    with pytest.warns(UserWarning), pytest.raises(RuntimeError, match="before any update"):
        m.compute()


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_one_two_three_processes_agree_and_failures_raise_everywhere() -> None:
    tol = _tolerance()
    ref = synbench(feature_fn, input_shape=SHAPE, config=CFG)
    n_collectives = 1 + 3 * len(CFG.s_values)
    runs = {1: [_agree(0, 1)], 2: run_in_processes(_worker, 2, []), 3: run_in_processes(_worker, 3, FAILURES)}
    for world, outs in runs.items():
        for rank, out in enumerate(outs):
            assert "__error__" not in out, out
            assert out["collectives"] == n_collectives, (world, rank)
            for acc, bound, scores in (
                (out["acc"], out["bound"], out["scores"]),
                (out["cb_acc"], out["cb_bound"], out["cb_scores"]),
            ):
                torch.testing.assert_close(acc, ref.accuracy, rtol=0, atol=tol)
                torch.testing.assert_close(bound, ref.bound, rtol=tol, atol=0)
                for k, v in scores_of(ref).items():
                    assert math.isclose(scores[k], v, rel_tol=tol, abs_tol=tol), (world, rank, k)
    for rank, out in enumerate(runs[3]):
        for (bad, where), msg in zip(FAILURES, out["failures"]):
            if rank == bad:
                expected = "NaN or inf" if where == "nan" else "boom on purpose"
            else:
                expected = "other process(es) failed"
            assert expected in msg, (rank, bad, where, msg)


def test_single_process_shards_cover_the_draw() -> None:
    # the union of the shards' chunks is the single-process draw, chunk by chunk
    plan = SamplingPlan.from_config(CFG, SHAPE, feature_fn)
    whole = torch.cat([x for x, _ in plan.batches(1.0, "train")])
    parts = {c: plan.chunk(1.0, "train", c)[0] for c in range(plan.n_chunks("train"))}
    for world in (2, 3):
        got = []
        for r in range(world):
            got += [c for c in Shard(r, world).indices(plan.n_chunks("train"))]
        assert sorted(got) == list(parts)
    assert torch.equal(whole, torch.cat([parts[c] for c in sorted(parts)]))
    assert len(whole) == CFG.n_train
