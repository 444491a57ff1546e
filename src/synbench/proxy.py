"""The paper's Table 1: standard and robust accuracy (SA / RA) of a linear probe on the synthetic proxy task (Ko et
al., ICML 2024, arXiv:2210.02989, §4.2: "the standard/robust accuracy (SA/RA) (%) of their linear probing classifier
on class-conditional Gaussian data. The robust accuracy is obtained by ℓ2 PGD attack (Madry et al., 2018) with
attack strength 0.2").

At one separation s (:class:`~src.synbench.config.ProxyAccuracy`): SynBench's own training samples at s (the same
chunks, seeds and pixel transform as the protocol: :class:`~src.synbench.plan.SamplingPlan`) go through the frozen
feature function; a logistic-regression probe (:func:`fit_probe`: the report's downstream probe, L2 penalty ``C`` on
standardised features) is fitted on their features; SA is its accuracy on the test samples at s, RA its accuracy
after an untargeted ℓ2 PGD attack (:func:`src.attacks.pgd_attack`, cross-entropy, no random start) of radius ε
through feature function + probe.

Where the ball lies (``space``): the paper's data are x ~ N(±μ, Σ) (eq. 1); SynBench draws them (the "Gaussian
space") and feeds the network x' = a·x + b per channel (:func:`~src.synbench.plan.pixel_transform`: a = 1, b = 0 for
the official normalisation with an ImageNet-normalised backbone). ``space="gaussian"`` attacks u = x, so the ball
‖δ‖₂ ≤ ε is the paper's data space and a pixel-space perturbation is a·δ per channel (``pixel_scale`` in the result);
``space="input"`` attacks what the network sees after SynBench's normalisation (x' = s_bb·u + m_bb with the backbone's
own normalisation (m_bb, s_bb)): the reading where the attack perturbs the official code's normalised tensors.

Closed form (tests/synbench/test_proxy.py): for a linear feature map the probe is a linear classifier w·u + c in the
attack space, the worst ℓ2 perturbation of radius ε lowers every signed margin by exactly ε‖w‖, and PGD without a
random start reaches it after ⌈steps / 2.5⌉ steps (each step moves ε/… along −sign·w/‖w‖, the projection keeps the
radius ε): RA = the fraction of test samples whose margin exceeds ε‖w‖; for the Bayes direction of Gaussian-I,
SA → Φ(s) and RA → Φ(s − ε).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from ..attacks import pgd_attack
from .config import SynBenchConfig
from .plan import MeanStd, SamplingPlan, resolve_backbone_mean_std
from .sampling import channel_layout

Tensor = torch.Tensor
F64 = torch.float64

__all__ = ["attack_affine", "fit_probe", "proxy_accuracy"]


def fit_probe(z: Tensor, y: Tensor, C: float = 1.0, max_iter: int = 2000) -> tuple[Tensor, Tensor]:
    """(W (2, D), b (2,)) float64 of a binary logistic-regression probe on features ``z`` (N, D) with labels ``y`` in
    {0, 1}: scikit-learn's ``LogisticRegression(C)`` (L2 penalty, L-BFGS) on standardised features, the
    standardisation folded into the head (logits z·Wᵀ + b, scores (−f, f)/2 with f the binary decision function) —
    the probe of the report's downstream part (:func:`src.divergence_radius.downstream.fit_linear_probe`; equal to it,
    tested). ValueError for a single class."""
    from sklearn.linear_model import LogisticRegression

    if z.dim() != 2 or y.shape != (z.shape[0],):
        raise ValueError(f"need features (N, D) and labels (N,), got {tuple(z.shape)} and {tuple(y.shape)}")
    labels = y.detach().cpu().numpy()
    if len(np.unique(labels)) < 2:
        raise ValueError("the proxy task's probe needs both classes among its training samples; raise proxy.n_train")
    x = z.detach().cpu().to(F64).numpy()
    mu, sd = x.mean(0), x.std(0) + 1e-12
    clf = LogisticRegression(C=C, max_iter=max_iter).fit((x - mu) / sd, labels)
    w = clf.coef_[0] / sd
    c = float(clf.intercept_[0] - w @ mu)
    return torch.from_numpy(np.stack([-w, w]) / 2), torch.tensor([-c / 2, c / 2], dtype=F64)


def attack_affine(
    plan: SamplingPlan, space: str, feature_fn: Any = None, backbone_mean_std: MeanStd | None = None
) -> tuple[Tensor, Tensor]:
    """(α, β), each (C,) float32 on the plan's device: the pixels fed to the feature function are x' = α·u + β per
    channel for u in the attack ``space`` ("gaussian": SynBench's pixel transform; "input": the backbone's own
    normalisation, identity when it has none)."""
    shape = plan.input_shape
    channels = channel_layout(shape)[0]
    dev = plan.sample_kwargs["device"]
    pair: Any
    if space == "gaussian":
        pair = plan.sample_kwargs["channel_affine"]
    elif space == "input":
        mean_std = resolve_backbone_mean_std(feature_fn, backbone_mean_std, channels, shape)
        pair = None if mean_std is None else (mean_std[1], mean_std[0])
    else:
        raise ValueError(f"proxy.space must be 'gaussian' or 'input', got {space!r}")
    if pair is None:
        return torch.ones(channels, device=dev), torch.zeros(channels, device=dev)
    return tuple(torch.as_tensor(v, dtype=torch.float32).to(dev).reshape(channels) for v in pair)  # type: ignore[return-value]


def _per_channel(v: Tensor, shape: tuple[int, ...]) -> Tensor:
    """(C,) → a view broadcasting over samples (B, *shape) (channels on axis 0 of rank >= 2; a flat vector: one)."""
    return v.view(v.shape[0], *([1] * (len(shape) - 1))) if len(shape) > 1 else v


def proxy_accuracy(
    feature_fn: Callable[[Tensor], Tensor],
    plan: SamplingPlan,
    config: SynBenchConfig,
    extract: Callable[[Tensor], Tensor],
    backbone_mean_std: MeanStd | None = None,
) -> dict[str, Any]:
    """SA and RA of ``config.proxy`` (module docstring) for ``feature_fn`` with the protocol's ``plan`` and feature
    ``extract`` (the clean forwards, :func:`src.synbench.protocol.make_extract`); the attack differentiates through
    the raw feature function (a FeatureExtractor is looked through), in its own dtype. The caller holds the module in
    eval mode (:func:`src.synbench.protocol.frozen`). Returns {"s", "eps", "steps", "space", "C", "n_train",
    "n_test", "sa", "ra", "pixel_scale" (α per channel: a perturbation δ in the attack space moves the pixels by α·δ),
    "seconds"}."""
    p = config.proxy
    if p is None:
        raise ValueError("SynBenchConfig.proxy is None: nothing to compute")
    t0 = time.perf_counter()
    n_train, n_test = p.n_train or config.n_train, p.n_test or config.n_test
    task = dataclasses.replace(plan, s_values=(p.s,), n_train=n_train, n_test=n_test)
    zs, ys = [], []
    for x, y in task.batches(p.s, "train"):
        zs.append(extract(x).cpu())
        ys.append(y.cpu())
    W, b = fit_probe(torch.cat(zs), torch.cat(ys), C=p.C)
    alpha, beta = attack_affine(task, p.space, feature_fn, backbone_mean_std)
    a, c = _per_channel(alpha, task.input_shape), _per_channel(beta, task.input_shape)
    raw = getattr(feature_fn, "feature_fn", feature_fn)  # a FeatureExtractor runs in inference mode: look through
    dev = alpha.device
    W, b = W.to(dev), b.to(dev)

    def head(z: Tensor) -> Tensor:
        return z.reshape(z.shape[0], -1).to(F64) @ W.T + b

    def forward(u: Tensor) -> Tensor:
        return head(raw(a * u + c))

    clean = robust = total = 0
    for x, y in task.batches(p.s, "test"):
        y = y.to(dev)
        clean += int((head(extract(x).to(dev)).argmax(1) == y).sum())
        u0 = (x.to(dev) - c) / a
        for ub, yb in zip(u0.split(p.batch_size), y.split(p.batch_size)):
            adv = pgd_attack(forward, ub, yb, eps=p.eps, norm="l2", steps=p.steps, random_start=False, clip=None)
            with torch.no_grad():
                robust += int((forward(adv).argmax(1) == yb).sum())
        total += int(y.numel())
    return {
        **dataclasses.asdict(p),
        "n_train": n_train,
        "n_test": n_test,
        "sa": clean / total,
        "ra": robust / total,
        "pixel_scale": alpha.cpu().tolist(),
        "seconds": time.perf_counter() - t0,
    }
