"""The ``paper`` convention equals independent transcriptions of the codes behind the SynBench paper's Table 7:
reprieve's ``LossDataEstimator`` (torch MLP, sequential path) and ``compute_metrics``, thuml/LogME's
``LogME._fit_fixed_point`` and TencentARC/SFDA's ``SFDA_Score``. Each transcription below is written the way the
original runs (global numpy / torch seeds, a real ``DataLoader``, numpy + scipy linear algebra), not through any
RepBench function."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
import torch
from scipy import linalg

from src.baselines import (
    CONVENTIONS,
    ReprieveProbe,
    baseline_scores,
    eps_sample_complexity,
    logme,
    mdl,
    reprieve_curve,
    sdl,
    sfda,
    val_loss,
)
from src.baselines.conventions import check_convention
from src.baselines.reprieve import reprieve_sizes, reprieve_whitening


# ----------------------------------------------------------------------------------------------- reprieve, transcribed
class _Subset(torch.utils.data.Dataset):
    def __init__(self, data, start=0, stop=None):
        self.data, self.start = data, start
        self.stop = len(data) if stop is None else min(stop, len(data))

    def __getitem__(self, i):
        return self.data[i + self.start]

    def __len__(self):
        return self.stop - self.start


class _Shuffle(torch.utils.data.Dataset):
    def __init__(self, data):
        self.data = data
        self.mapping = np.arange(len(data))
        np.random.shuffle(self.mapping)  # reprieve: numpy's global state

    def __getitem__(self, i):
        return self.data[self.mapping[i]]

    def __len__(self):
        return len(self.data)


def _reprieve_reference(x: np.ndarray, y: np.ndarray, steps: int, seeds: int, points: int, eps: float):
    """reprieve ``LossDataEstimator(..., use_vmap=False, train_steps, n_seeds)`` + ``compute_curve(n_points)`` +
    ``compute_metrics`` with the torch MLP of ``algorithms/torch_mlp.py``; returns ({samples: mean val loss},
    val loss, MDL, SDL_eps, eSC_eps (None when never reached))."""
    torch.manual_seed(0)
    np.random.seed(0)
    random.seed(0)
    data = torch.utils.data.TensorDataset(torch.as_tensor(x).float(), torch.as_tensor(y).int())
    val_size = math.ceil(len(data) * 0.1)
    max_train = len(data) - val_size
    train, val = _Subset(data, stop=max_train), _Subset(data, start=max_train)
    # compute_stats: streamed over batches of 256 with the first batch's mean as offset
    total = squares = 0
    offset = None
    n_el = len(train) * train[0][0].nelement()
    for xb, _ in torch.utils.data.DataLoader(train, 256):
        xb = xb.reshape(xb.shape[0], -1)
        offset = xb.mean() if offset is None else offset
        total += (xb - offset).sum()
        squares += ((xb - offset) ** 2).sum()
    mean = float(offset + total / n_el)
    std = float(((squares - total**2 / n_el) / n_el) ** 0.5)

    def whiten(a):
        return (a - mean) / std

    def init(seed, d, c):
        torch.manual_seed(seed)
        net = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(d, 512), torch.nn.ReLU(),
                                  torch.nn.Linear(512, 512), torch.nn.ReLU(), torch.nn.Linear(512, c),
                                  torch.nn.LogSoftmax(dim=1))  # fmt: skip
        return net, torch.optim.Adam(net.parameters(), lr=1e-4)

    rows = []
    pts = np.ceil(np.logspace(1, np.log10(max_train), points))
    for point in pts:
        for seed in range(seeds):
            subset = _Subset(_Shuffle(train), stop=int(point))
            torch.manual_seed(seed)
            loader = torch.utils.data.DataLoader(subset, batch_size=256, shuffle=True)
            net, opt = init(seed, x.shape[1], 2)
            step = 0
            while step < steps:
                for xb, yb in loader:
                    xb = torch.as_tensor(whiten(xb.numpy()))
                    net.train()
                    opt.zero_grad()
                    loss = torch.nn.functional.nll_loss(net(xb), torch.as_tensor(yb.numpy(), dtype=torch.long))
                    loss.backward()
                    opt.step()
                    step += 1
                    if step >= steps:
                        break
            loss_sum, count = 0, 0
            for xb, yb in torch.utils.data.DataLoader(val, batch_size=256, shuffle=False):
                xb = torch.as_tensor(whiten(xb.numpy()))
                net.eval()
                with torch.no_grad():
                    batch = torch.nn.functional.nll_loss(net(xb), torch.as_tensor(yb.numpy(), dtype=torch.long))
                loss_sum += batch.item() * xb.shape[0]
                count += xb.shape[0]
            rows.append((point, loss_sum / count))
    curve: dict[float, list[float]] = {}
    for point, loss in rows:
        curve.setdefault(point, []).append(loss)
    means = {p: float(np.mean(v)) for p, v in sorted(curve.items())}
    # compute_metrics at n = max(samples): auc_segment (n_i - n_{i-1}) max(L - eps, 0) summed; sc = first n with L <= eps
    mdl_ref = sdl_ref = 0.0
    last = 0
    esc_ref = None
    for p, loss in means.items():
        mdl_ref += (p - last) * max(loss, 0)
        sdl_ref += (p - last) * max(loss - eps, 0)
        if esc_ref is None and loss <= eps:
            esc_ref = p
        last = p
    return means, list(means.values())[-1], mdl_ref, sdl_ref, esc_ref


@pytest.fixture
def restore_global_rngs():
    """The transcription seeds numpy's, random's and torch's global generators, as reprieve does; restore them."""
    np_state, py_state, torch_state = np.random.get_state(), random.getstate(), torch.random.get_rng_state()
    yield
    np.random.set_state(np_state)
    random.setstate(py_state)
    torch.random.set_rng_state(torch_state)


def _two_class(n: int, d: int, shift: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.arange(n) % 2
    x = rng.standard_normal((n, d)).astype(np.float32) * 2.0 + 1.5 + shift * y[:, None]
    return x, y


@pytest.mark.parametrize(("n", "steps", "seeds", "points"), [(70, 12, 2, 4), (300, 5, 1, 3)])
def test_reprieve_curve_equals_reprieve(restore_global_rngs, n, steps, seeds, points) -> None:
    # (300, 5, 1, 3): subsets above the batch size (partial last batches, several batches per epoch);
    # (70, 12, 2, 4): subsets below it (an epoch is one batch: many epochs, each drawing its loader and sampler seeds)
    x, y = _two_class(n, 6, 0.8, seed=n)
    ref_curve, ref_val, ref_mdl, ref_sdl, ref_esc = _reprieve_reference(x, y, steps, seeds, points, eps=0.6)
    state = torch.random.get_rng_state()
    ours = reprieve_curve(torch.from_numpy(x), torch.from_numpy(y), ReprieveProbe(train_steps=steps, n_seeds=seeds,
                                                                                n_points=points))  # fmt: skip
    assert torch.equal(torch.random.get_rng_state(), state)  # the caller's torch generator is untouched
    assert list(ours.sizes) == [int(p) for p in ref_curve]
    # The same initial weights, the same batches and the same float32 arithmetic, but the probes' products batched
    # (bmm instead of mm: another summation order, ≈ √K·u ≈ 1e-6 relative per product at K ≤ 512, u = 6e-8, averaged
    # down in the mean losses); over ≤ 12 Adam steps measured ≤ 1.8e-7 relative in the curve: 1e-6 bounds it. (Adam
    # carries rounding along: 1e-4 after 200 steps — the reason the tests train few steps.)
    assert ours.losses == pytest.approx(list(ref_curve.values()), rel=1e-6)
    assert val_loss(ours) == pytest.approx(ref_val, rel=1e-6)
    assert mdl(ours, "reprieve") == pytest.approx(ref_mdl, rel=1e-6)
    assert sdl(ours, 0.6, "reprieve").value == pytest.approx(ref_sdl, rel=1e-6, abs=1e-9)
    esc = eps_sample_complexity(ours, 0.6)
    assert esc.lower_bound == (ref_esc is None)
    assert esc.value == (ref_esc if ref_esc is not None else ours.sizes[-1])


def test_reprieve_sizes_and_whitening() -> None:
    # the paper's n = 2048 and 8192: 1843 and 7372 training samples, the last size of each grid (Table 7's "> 1843.0")
    assert reprieve_sizes(1843)[-1] == 1843 and reprieve_sizes(7372)[-1] == 7372
    assert reprieve_sizes(1843)[0] == 10 and len(reprieve_sizes(1843)) == 10
    # reprieve keeps the repeats, and its rounding: 10**log10(12) is 12.000000000000002, so the last size is 13
    # (the probe then trains on all 12 samples: reprieve's DatasetSubset stops at the data's length)
    assert reprieve_sizes(12, 10) == (10, 11, 11, 11, 11, 12, 12, 12, 12, 13)
    # population mean / std of every entry, float32 streaming: equal to the float64 two-pass values to float32
    # rounding of sums of 600·5 terms (≈ 3000·6e-8 relative ≤ 2e-4 of the std)
    x = torch.from_numpy(_two_class(600, 5, 1.0, 0)[0])
    mean, std = reprieve_whitening(x)
    assert mean == pytest.approx(float(x.double().mean()), rel=2e-4)
    assert std == pytest.approx(float(x.double().std(unbiased=False)), rel=2e-4)


def test_reprieve_curve_bad_input() -> None:
    with pytest.raises(ValueError, match="starts at 10 training samples"):
        reprieve_curve(torch.randn(11, 3), torch.arange(11) % 2)
    with pytest.raises(ValueError, match="train_steps must be"):
        ReprieveProbe(train_steps=0)


# ----------------------------------------------------------------------------------------------- LogME, transcribed
def _logme_official(f: np.ndarray, y: np.ndarray) -> float:
    """thuml/LogME ``LogME._fit_fixed_point`` (classification), without numba."""
    f = f.astype(np.float64)
    n, d = f.shape
    if n > d:  # truncated_svd
        u0, s, vh = np.linalg.svd(f.T @ f)
        s = np.sqrt(s)
        k = int(np.sum(s > 1e-10))
        s, vh = s.reshape(-1, 1)[:k], vh[:k]
        u = (f @ vh.T) / s.reshape(1, -1)
    else:
        u, s, vh = np.linalg.svd(f, full_matrices=False)
        s = s.reshape(-1, 1)
    sigma = s**2
    evidences = []
    for i in range(int(y.max() + 1)):
        y_ = (y == i).astype(np.float64).reshape(-1, 1)
        x2 = (u.T @ y_) ** 2
        res_x2 = (y_**2).sum() - x2.sum()
        alpha, beta = 1.0, 1.0
        for _ in range(11):
            t = alpha / beta
            gamma = (sigma / (sigma + t)).sum()
            m2 = (sigma * x2 / ((t + sigma) ** 2)).sum()
            res2 = (x2 / ((1 + sigma / t) ** 2)).sum() + res_x2
            alpha = gamma / (m2 + 1e-5)
            beta = (n - gamma) / (res2 + 1e-5)
            if abs(alpha / beta - t) / t <= 1e-3:
                break
        evidence = (d / 2.0 * np.log(alpha) + n / 2.0 * np.log(beta) - 0.5 * np.sum(np.log(alpha + beta * sigma))
                    - beta / 2.0 * res2 - alpha / 2.0 * m2 - n / 2.0 * np.log(2 * np.pi))  # fmt: skip
        evidences.append(evidence / n)
    return float(np.mean(evidences))


# ----------------------------------------------------------------------------------------------- SFDA, transcribed
def _cov(x: np.ndarray, shrinkage: float = -1) -> np.ndarray:
    emp = np.cov(np.asarray(x).T, bias=1)
    if shrinkage < 0:
        return emp
    out = (1.0 - shrinkage) * emp
    out.flat[:: emp.shape[0] + 1] += shrinkage * np.trace(emp) / emp.shape[0]
    return out


def _iterative_a(a: np.ndarray, max_iterations: int = 3) -> float:
    v = a.sum(axis=1)
    for _ in range(max_iterations):
        tmp = a @ v
        w = tmp / np.linalg.norm(tmp, 2)
        tmp = a @ w
        v = tmp / np.linalg.norm(tmp, 2)
    return float(v.T @ a @ w)


def _sfda_fit_proba(x: np.ndarray, y: np.ndarray, shrinkage: float | None) -> tuple[np.ndarray, float]:
    """TencentARC/SFDA ``SFDA(shrinkage).fit(X, y).predict_proba(X)`` and the shrinkage it used."""
    classes, yi = np.unique(y, return_inverse=True)
    priors = np.bincount(yi) / float(len(y))
    means = np.zeros((len(classes), x.shape[1]))
    np.add.at(means, yi, x)
    means /= np.bincount(yi)[:, None]
    sw = np.zeros((x.shape[1], x.shape[1]))
    for idx, group in enumerate(classes):
        sw += priors[idx] * np.atleast_2d(_cov(x[yi == group, :]))
    if shrinkage is None:
        shrinkage = max(np.exp(-5 * _iterative_a(sw, 3)), 1e-10)
    st = _cov(x, shrinkage=shrinkage)
    shrunk = (1.0 - shrinkage) * sw
    shrunk.flat[:: sw.shape[0] + 1] += shrinkage * np.trace(sw) / sw.shape[0]
    evals, evecs = linalg.eigh(st - shrunk, shrunk)
    evecs = evecs[:, np.argsort(evals)[::-1]]
    coef = means @ evecs @ evecs.T
    intercept = -0.5 * np.diag(means @ coef.T) + np.log(priors)
    scores = x @ coef.T + intercept
    scores = np.exp(scores - scores.max(axis=1, keepdims=True))
    return scores / scores.sum(axis=1, keepdims=True), shrinkage


def _sfda_official(x: np.ndarray, y: np.ndarray) -> float:
    """TencentARC/SFDA ``SFDA_Score``."""
    x = x.astype(np.float64).copy()
    n, c = len(y), len(np.unique(y))
    prob, shrinkage = _sfda_fit_proba(x, y, None)
    prob = np.exp(prob) / np.exp(prob).sum(axis=1, keepdims=True)
    means = np.stack([x[y == k].mean(0) for k in range(c)])
    others = np.stack([(means.sum(0) - means[k]) / (c - 1) for k in range(c)])
    for k in range(c):
        idx = np.where(y == k)[0]
        p = prob[idx, k].reshape(-1, 1)
        x[idx] = p * x[idx] + (1 - p) * others[k]
    prob2, _ = _sfda_fit_proba(x, y, shrinkage)
    return float(prob2[np.arange(n), y].sum() / n)


def _features(n: int, d: int, c: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    y = np.arange(n) % c
    return rng.standard_normal((n, d)) * 0.7 + 0.5 * np.eye(c, d)[y], y


@pytest.mark.parametrize(("n", "d", "c"), [(120, 6, 3), (40, 60, 2), (500, 20, 4)])
def test_authors_logme_and_sfda_equal_the_official_codes(n, d, c) -> None:
    x, y = _features(n, d, c, n + d)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    # LogME: the same formula on the same singular values (official, n > D: sqrt of the eigenvalues of FᵀF; ours:
    # the SVD of F — both backward stable, σ_i agreeing to ≈ κ(F)²·u ≈ 1e-14 on these well-conditioned F); the mean
    # evidence is a smooth function of them of size O(1): 1e-9 absolute leaves five orders of margin
    assert logme(xt, yt, authors=True) == pytest.approx(_logme_official(x, y), rel=0, abs=1e-9)
    # SFDA: the official full generalised eigendecomposition (W Wᵀ = (S_w^λ)⁻¹) against our Cholesky solve: both
    # ≈ κ(S_w^λ)·u in the coefficients; κ ≤ 1e3 here (shrunk, well-conditioned), so ≤ 1e-12 in the probabilities
    assert sfda(xt, yt, authors=True) == pytest.approx(_sfda_official(x, y), rel=0, abs=1e-9)


def test_paper_convention_in_baseline_scores(restore_global_rngs) -> None:
    x, y = _two_class(120, 6, 0.8, seed=3)
    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    probe = ReprieveProbe(train_steps=4, n_seeds=1, n_points=3)
    which = ("logme", "sfda", "val_loss", "mdl", "sdl")  # alpha_req needs D >= 100
    out = baseline_scores(xt, yt, xt[:10], yt[:10], which, eps=(0.5,), convention="paper", probe=probe)
    assert out["logme"] == pytest.approx(_logme_official(x, y), rel=0, abs=1e-9)
    assert out["sfda"] == pytest.approx(_sfda_official(x, y), rel=0, abs=1e-9)
    _, ref_val, ref_mdl, ref_sdl, _ = _reprieve_reference(x, y, 4, 1, 3, eps=0.5)  # the test set is not used
    assert out["val_loss"] == pytest.approx(ref_val, rel=1e-6)  # tolerance: test_reprieve_curve_equals_reprieve
    assert out["mdl"] == pytest.approx(ref_mdl, rel=1e-6)
    assert out["sdl@0.5"] == pytest.approx(ref_sdl, rel=1e-6, abs=1e-9)
    # the default convention is unchanged: the logistic curve on train → test, online MDL, the exact LogME
    ours = baseline_scores(xt, yt, xt[:40], yt[:40], which=("logme", "mdl"))
    assert ours["logme"] == logme(xt, yt)
    assert set(CONVENTIONS) == {"repbench", "paper"}
    with pytest.raises(ValueError, match=r"convention must be one of \['repbench', 'paper'\], got 'papers'"):
        check_convention("papers")
    with pytest.raises(ValueError, match="curve_sizes does not apply"):
        baseline_scores(xt, yt, xt, yt, convention="paper", curve_sizes=(10, 20))
