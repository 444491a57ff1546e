"""Settings conventions (``src.task_prior.conventions``): "paper" is Thm 2.3 and Algorithm 1 of Task Priors
(Patel & Balestriero, arXiv:2507.09871) as written, checked against independent numpy implementations; "authors" is
the authors' code's settings; "repbench" is the project's unchanged defaults."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from src.models import TaskPriorProbe
from src.task_prior import CONVENTIONS, TaskPriorConvention, resolve_convention, sample_task_labels, task_prior_moments
from src.task_prior.probing import BatchedLinearHead, evaluate_task_probes, task_positive_recalls, task_scores
from src.task_prior.sampler import prior_factor, sequential_log_prob

U = np.finfo(np.float64).eps / 2  # unit roundoff of float64
N, D_EVAL, D_PRIOR, Q = 30, 8, 5, 3


def _features(seed: int, n: int, d: int) -> torch.Tensor:
    return torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


# ----------------------------------------------------------------------------- independent numpy references
def np_centred_cosine(x: np.ndarray) -> np.ndarray:
    """K = H X̂ X̂ᵀ H (Sec. 2.1): dense, with the centring matrix H itself (no factorisation)."""
    xh = x / np.linalg.norm(x, axis=1, keepdims=True)
    h = np.eye(len(x)) - np.ones((len(x), len(x))) / len(x)
    return h @ (xh @ xh.T) @ h


def np_sigmoid(a: np.ndarray) -> np.ndarray:
    return np.where(a >= 0, 1 / (1 + np.exp(-np.abs(a))), np.exp(-np.abs(a)) / (1 + np.exp(-np.abs(a))))


def np_thm23(m: np.ndarray, k: np.ndarray, t: float) -> tuple[float, float, float]:
    """(E, Var) of Thm 2.3 over all ordered pairs, and Σ|M σ| (for the rounding bound)."""
    s = np_sigmoid(k / t)
    return float((m * s).sum()), float((m**2 * s * (1 - s)).sum()), float(np.abs(m * s).sum())


def np_algorithm1(z: np.ndarray, q: int, t: float, gumbel: np.ndarray, order: np.ndarray) -> np.ndarray:
    """Algorithm 1 (App. C) for one labeling, visiting ``order``; CategoricalSample(p) is drawn by Gumbel-max with
    the given noise (gumbel[step] for the step-th visited point): argmax_c(log p_c + g_c), an exact categorical draw."""
    u = np.zeros((z.shape[1], q))
    labels = np.empty(len(z), dtype=np.int64)
    for step, i in enumerate(order):
        h = (1 / t) * (z[i] @ u)
        h = h - h.max()
        p = np.exp(h)
        p = p / p.sum()
        with np.errstate(divide="ignore"):
            c = int(np.argmax(np.log(p) + gumbel[step]))
        labels[i] = c
        u[:, c] += z[i]
    return labels


def np_algorithm1_log_prob(k: np.ndarray, labels: np.ndarray, q: int, t: float) -> float:
    """log P(labels) under Algorithm 1 in index order: Σ_i log softmax_c((1/T) Σ_{j<i} K_ij 1[y_j = c])[y_i]."""
    total = 0.0
    for i in range(len(labels)):
        h = np.array([k[i, :i][labels[:i] == c].sum() for c in range(q)]) / t
        h = h - h.max()
        total += h[labels[i]] - np.log(np.exp(h).sum())
    return total


def _shared_gumbel(seed: int, tasks: int, n: int, q: int, extra: int) -> tuple[np.ndarray, np.ndarray]:
    """The uniforms ``sample_task_labels`` documents it consumes per task (``extra`` permutation keys, then n·q),
    as (permutation keys, Gumbel noise (tasks, n, q))."""
    u = torch.rand(tasks, extra + n * q, generator=torch.Generator().manual_seed(seed), dtype=torch.float64).numpy()
    g = -np.log(-np.log(np.maximum(u[:, extra:], np.finfo(np.float64).tiny)))
    return u[:, :extra], g.reshape(tasks, n, q)


def _moment_tolerance(n: int, d: int, t: float, abs_sum: float, k_scale: float = 1.0) -> float:
    """|ΔE| bound between two float64 implementations. Every kernel entry (|M_ij| <= 4: centred unit rows have
    norm <= 2) is a sum of at most 3n + d products of O(1) terms in either one, so it is off by at most
    δ = 8(3n + d)·4u; σ is 1/4-Lipschitz, so σ(K_ij/T) is off by at most δ/(4T·k_scale) (K divided by k_scale).
    Summed over the n² pairs: n²·δ·(1 + 4/(4T·k_scale)), plus the n²·u·Σ|M σ| of summing n² terms in any order."""
    delta = 8 * (3 * n + d) * 4 * U
    return n * n * delta * (1 + 1 / (t * k_scale)) + n * n * U * abs_sum


# ----------------------------------------------------------------------------- the presets and the resolver
def test_repbench_is_todays_defaults() -> None:
    c = CONVENTIONS["repbench"]
    assert (c.eval_scale, c.prior_scale, c.temperature) == ("frobenius", "none", 0.01)
    assert (c.sampler_factor, c.sampler_scale, c.sample_temperature, c.order) == (
        "cosine",
        "frobenius",
        0.01,
        "sequential",
    )
    assert (c.probe_metric, c.probe_split) == ("accuracy", "test")
    assert resolve_convention() is c  # no convention = repbench
    x, y = _features(0, N, D_EVAL), _features(1, N, D_PRIOR)
    # the number a user who does not ask for a convention gets is bit for bit the number of the explicit old call
    assert task_prior_moments(x, y) == task_prior_moments(x, y, 0.01, eval_scale="frobenius", prior_scale="none")
    a = sample_task_labels(y, 2, num_tasks=3, generator=torch.Generator().manual_seed(5))
    b = sample_task_labels(
        y, 2, 0.01, 3, generator=torch.Generator().manual_seed(5), order="sequential", scale="frobenius"
    )
    assert torch.equal(a, b)


def test_authors_settings_field_by_field() -> None:
    c = CONVENTIONS["authors"]
    assert c.eval_scale == "frobenius" and c.prior_scale == "frobenius"  # both kernels Frobenius-scaled
    assert c.temperature == 1e-5  # moments
    assert c.sampler_factor == "raw" and c.sampler_scale == "none"  # centred raw features, unscaled
    assert 500 <= c.sample_temperature <= 1000 and c.order == "random"
    assert c.probe_metric == "positive_recall" and c.probe_split == "train"


def test_paper_settings_field_by_field() -> None:
    c = CONVENTIONS["paper"]
    assert (c.eval_scale, c.prior_scale, c.sampler_scale) == ("none", "none", "none")
    assert (c.temperature, c.sample_temperature, c.order, c.sampler_factor) == (0.01, 0.01, "sequential", "cosine")


def test_unknown_convention_lists_the_choices() -> None:
    with pytest.raises(ValueError, match=r"convention must be one of \('paper', 'authors', 'repbench'\), got 'papr'"):
        task_prior_moments(_features(0, 4, 3), _features(1, 4, 3), convention="papr")
    with pytest.raises(ValueError, match=r"convention must be one of"):
        sample_task_labels(_features(1, 4, 3), 2, convention="Paper")


def test_explicit_options_win_and_are_checked() -> None:
    c = resolve_convention("paper", eval_scale="frobenius", sample_temperature=2.0)
    assert (c.eval_scale, c.prior_scale, c.sample_temperature) == ("frobenius", "none", 2.0)
    x, y = _features(0, N, D_EVAL), _features(1, N, D_PRIOR)
    assert task_prior_moments(x, y, convention="paper", eval_scale="frobenius") == task_prior_moments(
        x, y, 0.01, eval_scale="frobenius", prior_scale="none"
    )
    with pytest.raises(ValueError, match=r"prior_scale must be one of \('frobenius', 'none'\), got 'fro'"):
        resolve_convention("authors", prior_scale="fro")
    with pytest.raises(ValueError, match=r"sample_temperature must be a finite number > 0, got -1"):
        resolve_convention("paper", sample_temperature=-1)
    with pytest.raises(TypeError, match=r"unknown Task-Prior option\(s\) \['scale'\]"):
        resolve_convention("paper", scale="none")
    custom = dataclasses.replace(CONVENTIONS["paper"], name="mine", temperature=0.5)
    assert isinstance(custom, TaskPriorConvention) and resolve_convention(custom).temperature == 0.5


# ----------------------------------------------------------------------------- "paper" = Thm 2.3 and Algorithm 1
def test_paper_moments_equal_thm23_in_numpy() -> None:
    x, y = _features(0, N, D_EVAL), _features(1, N, D_PRIOR)
    m, k = np_centred_cosine(x.numpy()), np_centred_cosine(y.numpy())
    e_ref, v_ref, abs_sum = np_thm23(m, k, 0.01)
    e, v = task_prior_moments(x, y, convention="paper", block_size=7)  # several tiles, a ragged last one
    tol = _moment_tolerance(N, max(D_EVAL, D_PRIOR), 0.01, abs_sum)
    assert abs(e - e_ref) <= tol
    # Var: the same bound with M² (|ΔM²| <= 8δ) and σ(1−σ) (also 1/4-Lipschitz); Σ|M² σ(1−σ)| <= 4·Σ|M σ|
    assert abs(v - v_ref) <= 8 * tol
    assert e_ref != pytest.approx(task_prior_moments(x, y)[0])  # the defaults differ from the paper, by design


def test_paper_sampler_equals_algorithm1_in_numpy() -> None:
    y = _features(1, N, D_PRIOR)
    tasks, seed = 4, 11
    labels = sample_task_labels(
        y, Q, num_tasks=tasks, generator=torch.Generator().manual_seed(seed), convention="paper"
    )
    z = np_centred_cosine(y.numpy())  # K itself; Algorithm 1 needs a factor: Z = H X̂ (K = ZZᵀ), built in numpy
    xh = y.numpy() / np.linalg.norm(y.numpy(), axis=1, keepdims=True)
    zf = xh - xh.mean(0)
    # the factor is exact: ‖ZZᵀ − K‖ is rounding only (entries O(1), sums of <= 3n + D terms)
    assert np.abs(zf @ zf.T - z).max() <= 8 * (3 * N + D_PRIOR) * 4 * U
    _, gumbel = _shared_gumbel(seed, tasks, N, Q, extra=0)
    ref = np.stack([np_algorithm1(zf, Q, 0.01, gumbel[t], np.arange(N)) for t in range(tasks)])
    assert np.array_equal(labels.numpy(), ref)  # same noise, same draws: label for label
    assert len(np.unique(ref)) > 1


def test_paper_sampler_law_equals_algorithm1_log_prob() -> None:
    y = _features(2, 12, D_PRIOR)
    k = np_centred_cosine(y.numpy())
    t = 0.5  # an explicit T wins over the paper's 0.01; here the conditionals are far from deterministic
    labels = sample_task_labels(y, Q, t, 5, generator=torch.Generator().manual_seed(3), convention="paper")
    ours = sequential_log_prob(labels, prior_factor(y, scale="none"), t, Q)
    for row, lp in zip(labels.numpy(), ours.tolist(), strict=True):
        ref = np_algorithm1_log_prob(k, row, Q, t)
        # 12 steps, each a log-softmax of q logits h = Σ_{j<i} K_ij/T: |h| <= 12·4/T = 96, each off by
        # <= 12·δ/T (δ as above); log-sum-exp adds <= 2·|h|·u per step: bound 12·(2·12·δ/T + 2·96·u)
        delta = 8 * (3 * 12 + D_PRIOR) * 4 * U
        assert abs(lp - ref) <= 12 * (2 * 12 * delta / t + 2 * 96 * U)


# ----------------------------------------------------------------------------- "authors"
def test_authors_moments_are_frobenius_scaled_at_1e_minus_5() -> None:
    x, y = _features(0, N, D_EVAL), _features(1, N, D_PRIOR)
    m, k = np_centred_cosine(x.numpy()), np_centred_cosine(y.numpy())
    km = np.linalg.norm(k)
    e_ref, _, abs_sum = np_thm23(m / np.linalg.norm(m), k / km, 1e-5)
    e, _ = task_prior_moments(x, y, convention="authors")
    assert abs(e - e_ref) <= _moment_tolerance(N, max(D_EVAL, D_PRIOR), 1e-5, abs_sum, k_scale=km)


def test_authors_sampler_uses_centred_raw_features_in_random_order() -> None:
    y = _features(1, N, D_PRIOR) * 40.0  # raw features with a large norm, as a backbone's are
    tasks, seed, q = 3, 4, 2
    labels = sample_task_labels(
        y, q, num_tasks=tasks, generator=torch.Generator().manual_seed(seed), convention="authors"
    )
    zf = y.numpy() - y.numpy().mean(0)  # the authors' factor: centred raw features
    # a column mean of N terms is off by <= N·u·max|y|, the subtraction by u·2·max|y| more: 2(N + 1)·u·max|y|
    err = (prior_factor(y, scale="none", kind="raw") - torch.from_numpy(zf)).abs().max()
    assert float(err) <= 2 * (N + 1) * U * float(y.abs().max())
    keys, gumbel = _shared_gumbel(seed, tasks, N, q, extra=N)
    ref = np.stack([np_algorithm1(zf, q, 1000.0, gumbel[t], np.argsort(keys[t])) for t in range(tasks)])
    assert np.array_equal(labels.numpy(), ref)


# ----------------------------------------------------------------------------- probe scores
def _threshold_head() -> BatchedLinearHead:
    """One binary probe on 1-d features predicting class 1 exactly when x > 0.5."""
    head = BatchedLinearHead(1, 2, 1)
    with torch.no_grad():
        head.weight.copy_(torch.tensor([[[0.0], [1.0]]]))
        head.bias.copy_(torch.tensor([[0.0, -0.5]]))
    return head


def test_positive_recall_is_the_authors_score() -> None:
    x = torch.tensor([[0.2], [0.7], [0.9], [0.1]])
    labels = torch.tensor([[1, 1, 1, 0]])  # positives 0, 1, 2; predicted positive: 1, 2
    assert task_positive_recalls(_threshold_head(), x, labels).tolist() == [2 / 3]
    assert task_scores(_threshold_head(), x, labels, metric="accuracy").tolist() == [3 / 4]


def test_positive_recall_without_positives_is_refused() -> None:
    with pytest.raises(ValueError, match=r"task 0\) have no positive sample .* probe_metric='accuracy'"):
        task_positive_recalls(_threshold_head(), torch.tensor([[0.2], [0.7]]), torch.tensor([[0, 0]]))
    with pytest.raises(ValueError, match=r"binary task, but the probes have 3 classes; use task_classes=2"):
        task_positive_recalls(BatchedLinearHead(1, 3, 1), torch.tensor([[0.2]]), torch.tensor([[1]]))
    with pytest.raises(ValueError, match=r"probe_metric must be one of \('accuracy', 'positive_recall'\)"):
        task_scores(_threshold_head(), torch.tensor([[0.2]]), torch.tensor([[1]]), metric="recall")


def test_evaluate_on_the_training_split_scores_the_training_rows() -> None:
    x = _features(3, 40, 4).float()
    labels = (x[:, :1].T > 0).long().repeat(2, 1)  # separable binary tasks
    train, test = torch.arange(0, 30), torch.arange(30, 40)
    opts = dict(epochs=60, lr=0.1, seed=0)
    r_train = evaluate_task_probes(x, labels, train, test, 2, metric="positive_recall", split="train", **opts)
    assert r_train.shape == (2,) and bool((r_train > 0.9).all())  # learned: nearly every positive recalled
    with pytest.raises(ValueError, match=r"probe_split must be one of \('test', 'train'\)"):
        evaluate_task_probes(x, labels, train, test, 2, split="val")


# ----------------------------------------------------------------------------- the probe module
TINY = {"name": "timm:test_efficientnet", "pretrained": False}


def test_probe_module_resolves_and_uses_the_convention() -> None:
    assert TaskPriorProbe(backbone=TINY, prior_backbone=TINY).convention == CONVENTIONS["repbench"]
    model = TaskPriorProbe(backbone=TINY, prior_backbone=TINY, convention="authors", num_tasks=3, temperature=0.1)
    assert model.convention.temperature == 0.1 and model.convention.prior_scale == "frobenius"  # explicit T wins
    ev, pr = _features(0, 20, 6).float(), _features(1, 20, 5).float()
    moments = model.prepare_tasks(ev[:14], ev[14:], pr[:14], pr[14:])
    assert moments["mean"] == task_prior_moments(ev, pr, 0.1, convention="authors")[0]
    with pytest.raises(ValueError, match=r"convention must be one of"):
        TaskPriorProbe(backbone=TINY, prior_backbone=TINY, convention="mine")


def test_compare_features_takes_the_convention_and_explicit_options_win():
    """The study's entry point (python -m src.task_prior) resolves the convention once: `repbench` equals the old
    explicit defaults, `paper` equals its settings spelt out, and an explicit option overrides the preset (exact:
    the same float64 operations in the same order)."""
    from src.task_prior.compare import compare_features

    g = torch.Generator().manual_seed(3)
    prior = torch.randn(24, 5, generator=g, dtype=torch.float64)
    feats = {"a": torch.randn(24, 7, generator=g, dtype=torch.float64)}
    common = {"num_tasks": 3, "epochs": 3}
    old = compare_features(feats, prior, **common, sample_temperature=0.01, temperature=0.01, order="sequential",
                           eval_scale="frobenius", prior_scale="none", sampler_scale="frobenius")  # fmt: skip
    assert compare_features(feats, prior, **common)[0]["accuracies"] == old[0]["accuracies"]
    assert compare_features(feats, prior, **common)[0]["mean"] == old[0]["mean"]
    paper = compare_features(feats, prior, **common, convention="paper")[0]
    spelt = compare_features(feats, prior, **common, eval_scale="none", sampler_scale="none")[0]
    assert paper["convention"] == "paper" and (paper["mean"], paper["var"]) == (spelt["mean"], spelt["var"])
    assert compare_features(feats, prior, **common, convention="paper", temperature=0.5)[0]["mean"] != paper["mean"]
