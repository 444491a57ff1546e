"""Batched task probes (src/task_prior/probing.py): equal to independent per-task heads, exact summaries, bad input."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from src.task_prior.probing import (
    BatchedLinearHead,
    Standardizer,
    accuracy_summary,
    fit_task_probes,
    random_split,
    task_accuracies,
    task_probe_loss,
)

F64 = torch.float64
EPS64 = torch.finfo(F64).eps


def _data(n=40, d=6, t=4, q=3, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=F64)
    y = torch.randint(0, q, (t, n), generator=g)
    return x, y


def test_loss_is_sum_of_per_task_mean_cross_entropies() -> None:
    x, y = _data()
    head = BatchedLinearHead(4, 3, 6, generator=torch.Generator().manual_seed(1), dtype=F64)
    logits = head(x)
    expected = sum(F.cross_entropy(x @ head.weight[t].T + head.bias[t], y[t]) for t in range(4))
    # the same float64 sums in a different order: |Δ| <= n·q·(|logit| + log q)·u per task; 1e-12 leaves >10x margin
    assert torch.allclose(task_probe_loss(logits, y), expected, rtol=0, atol=1e-12)


@pytest.mark.parametrize("batch_size", [None, 16])
def test_batched_head_equals_independent_heads(batch_size) -> None:
    """Adam on Σ_t loss_t updates slice t exactly as Adam on loss_t alone (block-separable gradient, element-wise
    optimizer); the runs differ only by float64 summation order."""
    n, d, t, q, epochs, lr = 40, 6, 4, 3, 30, 0.05
    x, y = _data(n, d, t, q)
    head = fit_task_probes(x, y, q, epochs=epochs, lr=lr, batch_size=batch_size, seed=3)
    # the same initialisation and minibatch order, one nn.Linear per task
    gen = torch.Generator().manual_seed(3)
    init = BatchedLinearHead(t, q, d, generator=gen, dtype=F64)
    orders = [torch.randperm(n, generator=gen) if batch_size else None for _ in range(epochs)]
    for task in range(t):
        lin = nn.Linear(d, q, dtype=F64)
        with torch.no_grad():
            lin.weight.copy_(init.weight[task])
            lin.bias.copy_(init.bias[task])
        opt = torch.optim.Adam(lin.parameters(), lr=lr)
        for order in orders:
            for start in range(0, n, batch_size or n):
                idx = order[start : start + batch_size] if order is not None else slice(None)
                loss = F.cross_entropy(lin(x[idx]), y[task, idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
        # tolerance: per step the gradients differ by ~c·d·u relative (einsum vs addmm order); Adam's update is
        # lr·m/(√v + ε) with relative sensitivity ~1 to the gradient, so after S = 30 (or 90) steps the weights differ by
        # <= S·lr·c·d·u ≈ 90·0.05·10·6·2.2e-16 ≈ 6e-14; 1e-10 absorbs c up to 10^4
        assert torch.allclose(head.weight[task], lin.weight, rtol=0, atol=1e-10)
        assert torch.allclose(head.bias[task], lin.bias, rtol=0, atol=1e-10)


def test_initialisation_is_seeded_and_like_nn_linear() -> None:
    a = BatchedLinearHead(3, 2, 100, generator=torch.Generator().manual_seed(0))
    b = BatchedLinearHead(3, 2, 100, generator=torch.Generator().manual_seed(0))
    assert torch.equal(a.weight, b.weight) and torch.equal(a.bias, b.bias)
    assert a.weight.abs().max() <= 0.1 and a.bias.abs().max() <= 0.1  # U(±1/√D), D = 100


def test_separable_task_is_learned() -> None:
    g = torch.Generator().manual_seed(0)
    n = 200
    y = torch.randint(0, 2, (1, n), generator=g)
    x = torch.randn(n, 5, generator=g) * 0.1
    x[:, 0] += 4.0 * (2 * y[0] - 1)  # margin 8, noise 0.1: linearly separable with overwhelming probability
    tr, te = random_split(n, 0.3, seed=0)
    head = fit_task_probes(x[tr], y[:, tr], 2, epochs=100, lr=0.05)
    acc = task_accuracies(head, x[te], y[:, te])
    assert acc.item() == 1.0


def test_accuracy_summary_matches_numpy() -> None:
    acc = torch.rand(17, generator=torch.Generator().manual_seed(0), dtype=F64)
    s = accuracy_summary(acc, quantiles=(0.1, 0.5, 0.9))
    a = acc.numpy()
    # identical formulas in float64 over 17 values: differences are a few ulps of O(1) numbers
    assert s["acc_mean"] == pytest.approx(np.mean(a), abs=1e-14)
    assert s["acc_var"] == pytest.approx(np.var(a), abs=1e-14)
    for q, key in ((0.1, "acc_q10"), (0.5, "acc_q50"), (0.9, "acc_q90")):
        assert s[key] == pytest.approx(np.quantile(a, q), abs=1e-14)
    with pytest.raises(FloatingPointError, match="non-finite"):
        accuracy_summary(torch.tensor([0.5, float("nan")]))


def test_random_split_is_a_seeded_partition() -> None:
    tr, te = random_split(10, 0.3, seed=1)
    assert len(te) == 3 and sorted(torch.cat([tr, te]).tolist()) == list(range(10))
    tr2, te2 = random_split(10, 0.3, seed=1)
    assert torch.equal(te, te2)
    with pytest.raises(ValueError, match="test_fraction"):
        random_split(10, 1.0)


def test_standardizer_uses_training_statistics() -> None:
    x = torch.randn(50, 3, dtype=F64) * 3 + 2
    z = Standardizer.fit(x)(x)
    # float64 mean/std of 50 values: error ~50·u; 1e-12 leaves margin
    assert torch.allclose(z.mean(0), torch.zeros(3, dtype=F64), atol=1e-12)
    assert torch.allclose(z.std(0, correction=0), torch.ones(3, dtype=F64), atol=1e-12)


def test_bad_input() -> None:
    x, y = _data()
    with pytest.raises(ValueError, match="NaN"):
        fit_task_probes(torch.full_like(x, float("nan")), y, 3, epochs=1)
    with pytest.raises(ValueError, match="rows"):
        fit_task_probes(x[:10], y, 3, epochs=1)
    with pytest.raises(ValueError, match="outside"):
        fit_task_probes(x, y + 5, 3, epochs=1)
    with pytest.raises(ValueError, match="num_classes"):
        BatchedLinearHead(2, 1, 4)
    with pytest.raises(ValueError, match="shape"):
        BatchedLinearHead(2, 2, 4)(torch.zeros(3, 5))


def test_report_table_and_correlations(tmp_path) -> None:
    import json

    from scipy.stats import pearsonr, spearmanr

    from src.task_prior.compare import compare_features
    from src.task_prior.report import collect_rows, correlations, write_table

    g = torch.Generator().manual_seed(0)
    prior = torch.randn(30, 4, generator=g)
    feats = {"a": prior + 0.1 * torch.randn(30, 4, generator=g), "b": torch.randn(30, 5, generator=g)}
    feats["c"] = torch.randn(30, 3, generator=g)
    rows = compare_features(feats, prior, num_tasks=3, epochs=5, sample_temperature=0.01)
    assert [r["backbone"] for r in rows] == ["a", "b", "c"] and all(len(r["accuracies"]) == 3 for r in rows)
    corr = correlations(rows)
    e, am = [r["mean"] for r in rows], [r["acc_mean"] for r in rows]
    v, av = [r["var"] for r in rows], [r["acc_var"] for r in rows]
    # numpy's corrcoef vs scipy on 3 points: the same float64 formula up to ordering, ~10 ulps
    if np.std(am) > 0:
        assert corr["pearson_mean_vs_acc_mean"] == pytest.approx(pearsonr(e, am)[0], abs=1e-12)
        assert corr["spearman_mean_vs_acc_mean"] == pytest.approx(spearmanr(e, am)[0], abs=1e-12)
    if np.std(av) > 0:
        assert corr["pearson_var_vs_acc_var"] == pytest.approx(pearsonr(v, av)[0], abs=1e-12)
    run = tmp_path / "sweep" / "0"
    run.mkdir(parents=True)
    for i, r in enumerate(rows):
        (tmp_path / "sweep" / str(i)).mkdir(exist_ok=True)
        (tmp_path / "sweep" / str(i) / "task_prior_row.json").write_text(json.dumps(r))
    collected = collect_rows(tmp_path / "sweep")
    assert [r["backbone"] for r in collected] == ["a", "b", "c"]
    paths = write_table(collected, tmp_path / "sweep")
    text = paths["md"].read_text()
    assert "| a |" in text and "Correlation across backbones" in text
    assert paths["csv"].read_text().splitlines()[0].startswith("backbone,acc_mean,acc_var")
    with pytest.raises(ValueError, match="no rows"):
        write_table([], tmp_path)
