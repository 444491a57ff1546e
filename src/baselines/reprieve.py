"""The loss-data curve of reprieve (Whitney et al., "Evaluating representations by the complexity of learning
low-loss predictors", arXiv:2009.07368; code: willwhitney/reprieve ``LossDataEstimator`` with the PyTorch MLP of
``reprieve/algorithms/torch_mlp.py``), the code behind the baselines of the SynBench paper (Ko et al., ICML 2024,
arXiv:2210.02989, Appendix Table 7 / Table 8). :func:`reprieve_curve` reproduces its numbers step for step:

1. **split**: the last ceil(``val_frac``·n) samples validate, the first ones train (n = 2048: 1843 training samples,
   the "> 1843.0" of Table 7) — :func:`src.baselines.reprieve_split`;
2. **whiten**: one scalar mean and standard deviation (population, divisor N·D) over every entry of the training
   part, streamed in float32 over batches of ``batch_size`` as reprieve's ``utils.compute_stats``;
3. **sizes**: ceil(logspace(1, log10 n_train, ``n_points``)) (``compute_curve(n_points=10)``);
4. **subsets**: for each size, for each seed 0 … ``n_seeds``−1 (in that order), a fresh permutation of the training
   part from numpy's legacy ``RandomState(0)`` stream (reprieve seeds numpy's global state with 0 once and draws
   ``np.random.shuffle`` per subset) — so the subsets of one size are NOT nested in the ones of the next;
5. **probe**: ``torch.manual_seed(seed)``, an MLP Flatten → [Linear(·, 512) → ReLU] × 2 → Linear(512, C) →
   LogSoftmax built with torch's default initialisation, Adam (lr 1e-4, torch defaults otherwise), ``train_steps``
   minibatch steps of NLL over reshuffled epochs of the subset (a ``DataLoader(shuffle=True, batch_size=256)``: each
   epoch draws its loader's base seed, then its sampler's seed, from torch's global generator);
6. **validation**: the mean NLL over the validation part (batches of ``batch_size``, batch means weighted by size);
7. **curve**: the mean over seeds of the validation loss at each size (``compute_metrics``' groupby-mean), from
   which MDL, SDL_ε and ε-SC follow in reprieve's convention (:func:`src.baselines.mdl` with
   ``convention="reprieve"``).

Torch's global generator is used inside :func:`torch.random.fork_rng` (the caller's random state is unchanged);
numpy's global state is never touched (a local ``RandomState``). The data order is replayed from the same draws a
``DataLoader`` makes, without its per-sample collation (≈ 1 ms per batch), so the 200 000 steps of the default
(10 sizes × 5 seeds × 4000) cost the MLP's arithmetic only. reprieve's JAX path (``use_vmap=True``) samples its
batches differently (with replacement, per-point PRNG keys): same probe, optimiser and steps, other data order.

Cost: ``n_points·n_seeds·train_steps`` MLP steps of ``batch_size`` rows (200 000 by default): about a minute per
backbone on a data-centre GPU, hours on 2 CPU cores (the paper: 6807 s for ViT-B/16 on a V100, Appendix A.9).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from ..utils.checks import check_features, check_int, check_labels, check_real
from .loss_data import LossDataCurve, reprieve_split

__all__ = ["ReprieveProbe", "reprieve_sizes", "reprieve_whitening", "reprieve_curve"]


@dataclass(frozen=True)
class ReprieveProbe:
    """reprieve's defaults (``LossDataEstimator`` and ``torch_mlp.make_algorithm``), one owner: ``hidden_layers``
    and ``hidden_dim`` of the MLP, Adam's ``lr``, ``train_steps`` minibatch steps of ``batch_size``, ``n_seeds``
    probes per size, ``n_points`` sizes, the validation fraction ``val_frac``."""

    hidden_layers: int = 2
    hidden_dim: int = 512
    lr: float = 1e-4
    train_steps: int = 4000
    batch_size: int = 256
    n_seeds: int = 5
    n_points: int = 10
    val_frac: float = 0.1

    def __post_init__(self) -> None:
        for name, low in (("hidden_layers", 0), ("hidden_dim", 1), ("train_steps", 1), ("batch_size", 1),
                          ("n_seeds", 1), ("n_points", 1)):  # fmt: skip
            object.__setattr__(self, name, check_int(getattr(self, name), name, low))
        object.__setattr__(self, "lr", check_real(self.lr, "lr", low=0.0))
        object.__setattr__(self, "val_frac", check_real(self.val_frac, "val_frac", low=0.0, high=1.0))

    @property
    def steps_total(self) -> int:
        """MLP steps of one curve: n_points·n_seeds·train_steps."""
        return self.n_points * self.n_seeds * self.train_steps


def reprieve_sizes(n_train: int, n_points: int = 10) -> tuple[int, ...]:
    """reprieve's sizes ``np.ceil(np.logspace(1, np.log10(n_train), n_points))`` as integers, in order, with the
    repeats reprieve keeps (small ``n_train``: e.g. 10, 11, 11, 12); n_train ≥ 10 (the grid starts at 10)."""
    n_train = check_int(n_train, "n_train", 10)
    return tuple(int(p) for p in np.ceil(np.logspace(1, np.log10(n_train), check_int(n_points, "n_points", 1))))


def reprieve_whitening(x: Tensor, batch_size: int = 256) -> tuple[float, float]:
    """(mean, std) of every entry of ``x`` (n, D) as reprieve's ``compute_stats``: float32, streamed over batches
    with the first batch's mean as offset, population variance (divisor n·D)."""
    x = x.float().reshape(x.shape[0], -1)
    count = x.numel()
    offset = None
    total: Tensor | int = 0
    squares: Tensor | int = 0
    for start in range(0, x.shape[0], batch_size):
        b = x[start : start + batch_size]
        if offset is None:
            offset = b.mean()
        total = total + (b - offset).sum()
        squares = squares + ((b - offset) ** 2).sum()
    assert offset is not None and isinstance(total, Tensor) and isinstance(squares, Tensor)
    mean = offset + total / count
    variance = (squares - total**2 / count) / count
    return float(mean), float(variance**0.5)


def _mlp(d: int, c: int, probe: ReprieveProbe) -> torch.nn.Sequential:
    """reprieve's ``MLPClassifier`` (built on the CPU with the global generator, in reprieve's layer order)."""
    dims = [d, *([probe.hidden_dim] * probe.hidden_layers), c]
    layers: list[torch.nn.Module] = [torch.nn.Flatten()]
    for i in range(len(dims) - 2):
        layers += [torch.nn.Linear(dims[i], dims[i + 1]), torch.nn.ReLU()]
    layers += [torch.nn.Linear(dims[-2], dims[-1]), torch.nn.LogSoftmax(dim=1)]
    return torch.nn.Sequential(*layers)


def _epoch_order(m: int) -> Tensor:
    """The order one ``DataLoader(shuffle=True)`` epoch visits a subset of ``m`` samples: the loader's iterator draws
    its base seed, then the RandomSampler its own seed, from the global generator (torch/utils/data)."""
    torch.empty((), dtype=torch.int64).random_()  # _BaseDataLoaderIter._base_seed
    seed = int(torch.empty((), dtype=torch.int64).random_().item())  # RandomSampler.__iter__
    return torch.randperm(m, generator=torch.Generator().manual_seed(seed))


def _train(x: Tensor, y: Tensor, c: int, seed: int, probe: ReprieveProbe, device: torch.device) -> torch.nn.Module:
    """One probe: reprieve's ``_train(seed, subset)`` on the (already whitened) subset ``x``, ``y``."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = _mlp(x.shape[1], c, probe).to(device)
        opt = torch.optim.Adam(model.parameters(), lr=probe.lr)
        model.train()
        step = 0
        while step < probe.train_steps:
            order = _epoch_order(x.shape[0]).to(device)
            for start in range(0, x.shape[0], probe.batch_size):
                idx = order[start : start + probe.batch_size]
                opt.zero_grad()
                loss = torch.nn.functional.nll_loss(model(x[idx]), y[idx])
                loss.backward()
                opt.step()
                step += 1
                if step >= probe.train_steps:
                    break
    return model


@torch.no_grad()
def _evaluate(model: torch.nn.Module, x: Tensor, y: Tensor, batch_size: int) -> float:
    """reprieve's ``_eval``: batch mean NLLs (Python floats) weighted by the batch sizes."""
    model.eval()
    total, count = 0.0, 0
    for start in range(0, x.shape[0], batch_size):
        xb, yb = x[start : start + batch_size], y[start : start + batch_size]
        total += torch.nn.functional.nll_loss(model(xb), yb).item() * xb.shape[0]
        count += xb.shape[0]
    return total / count


def reprieve_curve(
    features: Tensor,
    labels: Tensor,
    probe: ReprieveProbe | None = None,
    *,
    num_classes: int | None = None,
    device: str | torch.device = "cpu",
) -> LossDataCurve:
    """reprieve's loss-data curve of one labelled feature set (module docstring): ``features`` (n, D) and
    ``labels`` (n,) are split by reprieve (the last ``val_frac`` validate), each size's probes trained on ``device``
    (float32, as reprieve), the curve the mean validation NLL over seeds per size, in nats. MDL / SDL / ε-SC:
    :func:`src.baselines.mdl` etc. with ``convention="reprieve"``."""
    probe = probe or ReprieveProbe()
    z = check_features(features, "features", min_rows=2)
    y, c = check_labels(labels, z.shape[0], num_classes, "labels")
    c = max(c, 2)
    n_val = math.ceil(z.shape[0] * probe.val_frac)
    if z.shape[0] - n_val < 10:
        raise ValueError(
            f"reprieve's curve starts at 10 training samples; {z.shape[0]} samples with val_frac={probe.val_frac} "
            f"leave {z.shape[0] - n_val}: pass at least {math.ceil(10 / (1 - probe.val_frac)) + 1} samples"
        )
    xtr, ytr, xva, yva = reprieve_split(z.detach().cpu().float(), y.cpu(), probe.val_frac)
    mean, std = reprieve_whitening(xtr, probe.batch_size)
    dev = torch.device(device)
    # reprieve whitens numpy float32 batches with Python floats: float32 arithmetic, elementwise
    xtr = torch.from_numpy((xtr.numpy() - mean) / std).to(dev)
    xva = torch.from_numpy((xva.numpy() - mean) / std).to(dev)
    ytr, yva = ytr.to(dev), yva.to(dev)
    shuffles = np.random.RandomState(0)  # reprieve: np.random.seed(0) once, then np.random.shuffle per subset
    losses: dict[int, list[float]] = {}
    for size in reprieve_sizes(xtr.shape[0], probe.n_points):
        for seed in range(probe.n_seeds):
            mapping = np.arange(xtr.shape[0])
            shuffles.shuffle(mapping)
            subset = torch.from_numpy(mapping[: min(size, xtr.shape[0])]).to(dev)
            model = _train(xtr[subset], ytr[subset], c, seed, probe, dev)
            losses.setdefault(size, []).append(_evaluate(model, xva, yva, probe.batch_size))
    sizes = sorted(losses)
    return LossDataCurve(tuple(sizes), tuple(sum(losses[s]) / len(losses[s]) for s in sizes), c, "nats")
