"""TaskPriorMoments / TaskAccuracies torchmetrics: equal to an independent dense Thm 2.3, exact under DDP."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.special import expit

from src.metrics.task_prior import TaskAccuracies, TaskPriorMoments
from src.task_prior import task_prior_moments
from tests._multiprocess import run_in_processes

F64 = torch.float64
U64 = np.finfo(np.float64).eps


def _features(n=30, d_eval=5, d_prior=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, d_eval, generator=g), torch.randn(n, d_prior, generator=g) + 0.5


def _dense_reference(eval_f, prior_f, temperature):
    """Thm 2.3 from the n x n matrices, in numpy: M = H X̂ X̂ᵀ H / ‖·‖_F (eval), K = H X̂ X̂ᵀ H (prior, raw)."""

    def kernel(x):
        x = np.asarray(x, dtype=np.float64)
        xn = x / np.linalg.norm(x, axis=1, keepdims=True)
        h = np.eye(len(x)) - 1.0 / len(x)
        return h @ xn @ xn.T @ h

    m = kernel(eval_f)
    m /= np.linalg.norm(m)
    p = expit(kernel(prior_f) / temperature)
    return float((m * p).sum()), float((m**2 * p * (1 - p)).sum()), np.abs(m).sum() + (m**2).sum()


def _fill(metric, eval_f, prior_f, order, batch=7):
    for start in range(0, len(order), batch):
        idx = order[start : start + batch]
        metric.update(eval_f[idx], prior_f[idx], idx)


@pytest.mark.parametrize("block_size", [1, 8, 1024])
def test_matches_dense_reference_in_any_order(block_size) -> None:
    n, t = 30, 0.5
    eval_f, prior_f = _features(n)
    metric = TaskPriorMoments(n, 5, 4, t, block_size=block_size)
    _fill(metric, eval_f, prior_f, torch.randperm(n, generator=torch.Generator().manual_seed(1)))
    out = metric.compute()
    e, v, scale = _dense_reference(eval_f, prior_f, t)
    # both are float64 sums of n² = 900 terms; summation-order error <= n²·u·Σ|terms| (scale = Σ|M| + Σ M² bounds
    # Σ|terms|), plus O(u) from the kernels and sigmoids; 10x margin
    tol = 10 * n * n * U64 * scale
    assert abs(float(out["mean"]) - e) <= tol and abs(float(out["var"]) - v) <= tol
    assert float(out["z"]) == pytest.approx(float(out["mean"]) / float(out["var"]) ** 0.5, rel=4 * U64)
    # and the functional core agrees (the metric is a shell over the same blocked loop)
    e_core, v_core = task_prior_moments(eval_f, prior_f, t, block_size=block_size)
    assert abs(float(out["mean"]) - e_core) <= tol and abs(float(out["var"]) - v_core) <= tol


def test_bad_input() -> None:
    eval_f, prior_f = _features(10)
    m = TaskPriorMoments(10, 5, 4, 1.0)
    with pytest.raises(ValueError, match="temperature"):
        TaskPriorMoments(10, 5, 4, 0.0)
    with pytest.raises(ValueError, match="temperature"):
        TaskPriorMoments(10, 5, 4, -1.0)
    with pytest.raises(ValueError, match="same images"):  # n mismatch between eval and prior rows
        m.update(eval_f[:3], prior_f[:2], torch.arange(3))
    with pytest.raises(ValueError, match="shape"):  # wrong feature dimension
        m.update(eval_f[:3, :4], prior_f[:3], torch.arange(3))
    bad = eval_f[:3].clone()
    bad[1, 2] = float("nan")
    with pytest.raises(ValueError, match="NaN"):
        m.update(bad, prior_f[:3], torch.arange(3))
    with pytest.raises(ValueError, match="num_samples"):
        m.update(eval_f[:3], prior_f[:3], torch.tensor([0, 1, 10]))
    m.update(eval_f[:3], prior_f[:3], torch.arange(3))
    with pytest.raises(ValueError, match="twice"):
        m.update(eval_f[:1], prior_f[:1], torch.tensor([2]))
    with pytest.raises(RuntimeError, match="7 missing"):
        m.compute()


CASES = ((30, 8), (10, 8))  # (n, block_size); (10, 8) has 2 row blocks: with 3 ranks one computes nothing


def _shares(n, world_size):
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(0)).tolist()
    shares = [perm[r::world_size] for r in range(world_size)]
    if world_size == 3:
        shares = [shares[0] + shares[2], shares[1], []]  # one rank feeds no image at all
    return shares


def _moments(rank, n, block_size, shares):
    eval_f, prior_f = _features(n)
    metric = TaskPriorMoments(n, 5, 4, 0.5, block_size=block_size)
    idx = torch.tensor(shares[rank], dtype=torch.long)
    metric.update(eval_f[idx], prior_f[idx], idx)  # an empty share is a no-op; the rank still joins compute()
    return {k: float(v) for k, v in metric.compute().items()}


def _ddp_cases(rank, world_size):
    """Every case in one process group (spawning is the slow part)."""
    out = {case: _moments(rank, *case, _shares(case[0], world_size)) for case in CASES}
    eval_f, prior_f = _features(10)
    metric = TaskPriorMoments(10, 5, 4, 0.5)
    idx = torch.arange(rank, 9, world_size)  # index 9 is fed by nobody
    metric.update(eval_f[idx], prior_f[idx], idx)
    try:
        metric.compute()
        out["incomplete"] = "no error"
    except RuntimeError as exc:
        out["incomplete"] = str(exc)
    return out


@pytest.mark.slow
@pytest.mark.timeout(400)
@pytest.mark.parametrize("world_size", [2, 3])
def test_ddp_equals_single_process(world_size) -> None:
    results = run_in_processes(_ddp_cases, world_size, timeout=300)
    for case in CASES:
        n = case[0]
        single = _moments(0, *case, [list(range(n))])
        for res in results:
            assert "__error__" not in res, res
            # a different partition of the same float64 row-block sums: reordering <= (#blocks)·u·Σ|terms| with
            # Σ|terms| <= n²·max|M_ij| <= n² (|M_ij| <= 1 after Frobenius scaling); 1e-12·n² is far above that
            for key in ("mean", "var"):
                assert res[case][key] == pytest.approx(single[key], rel=0, abs=1e-12 * n * n)
        assert len({r[case]["mean"] for r in results}) == 1  # every rank reports the same number
    # an index fed by no rank: every rank raises the same clear error instead of deadlocking
    assert all("1 missing" in r["incomplete"] for r in results), [r["incomplete"] for r in results]


def test_task_accuracies_summary() -> None:
    metric = TaskAccuracies(3)
    labels = torch.tensor([[0, 1, 1, 0], [1, 1, 1, 1], [0, 0, 0, 0]])
    logits = torch.zeros(3, 4, 2)
    logits[..., 1] = torch.tensor([[1.0, 1, 1, 1], [1, 1, 1, 1], [1, 1, 1, -1]])  # predicts 1 except task 2, b 3
    metric.update(logits[:, :2], labels[:, :2])
    metric.update(logits[:, 2:], labels[:, 2:])
    acc = metric.accuracies()
    assert acc.tolist() == [0.5, 1.0, 0.25]
    out = metric.compute()
    a = np.array([0.5, 1.0, 0.25])
    # float64 statistics of three exact binary fractions: a few ulps
    assert float(out["acc_mean"]) == pytest.approx(a.mean(), abs=1e-15)
    assert float(out["acc_var"]) == pytest.approx(a.var(), abs=1e-15)
    assert float(out["acc_q10"]) == pytest.approx(np.quantile(a, 0.1), abs=1e-15)
    with pytest.raises(ValueError, match="expected logits"):
        metric.update(logits[:2], labels[:2])
