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

**How it runs.** The initial weights and each epoch's order come from the same draws reprieve makes (torch's
generator seeded per probe inside :func:`torch.random.fork_rng`, so the caller's random state is unchanged; numpy's
global state is never touched: a local ``RandomState``), replayed without a ``DataLoader``'s per-sample collation.
The n_points·n_seeds probes (50 by default) share no parameter and Adam is elementwise, so they train at once as one
stacked model (batched matrix products, short batches padded and masked out of each probe's mean): 4000 steps of
one batched model instead of 200 000 steps of small ones. The result equals reprieve's sequential code up to the
rounding of the batched products, which Adam's normalised steps carry along: measured 2e-7 relative in the curve
after 12 steps, 1e-4 after 200 (a run of reprieve itself on another device differs the same way). reprieve's JAX path
(``use_vmap=True``) samples its batches differently (with replacement, per-point PRNG keys): same probe, optimiser
and steps, other data order.

Cost: ``train_steps`` steps of the stacked model (``n_points·n_seeds·batch_size`` rows each; 200 000 probe steps in
all by default): seconds per backbone on a data-centre GPU, about half an hour at 1280 features on 2 CPU cores
(the paper: 6807 s for ViT-B/16 on a V100, Appendix A.9).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
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


def _init(seed: int, d: int, c: int, probe: ReprieveProbe) -> tuple[list[Tensor], torch.Generator]:
    """One probe's initial weights — [W (in, out), b (1, out)] per layer, as ``torch.manual_seed(seed)`` then
    reprieve's MLP give them — and a generator holding the global generator's state after them, from which its
    epochs' orders are drawn (:func:`_batches`). The caller's random state is unchanged."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        net = _mlp(d, c, probe)
        state = torch.random.get_rng_state()
    gen = torch.Generator()
    gen.set_state(state)
    params = []
    for layer in net:
        if isinstance(layer, torch.nn.Linear):
            params += [layer.weight.detach().T.contiguous(), layer.bias.detach()[None].clone()]
    return params, gen


def _batches(m: int, gen: torch.Generator, batch_size: int) -> Iterator[Tensor]:
    """The batches (positions in the subset of ``m`` samples) of the epochs of a ``DataLoader(shuffle=True)``, without
    end: each epoch, the loader's iterator draws its base seed and then its RandomSampler its own seed from the
    generator (torch/utils/data: ``_BaseDataLoaderIter`` and ``RandomSampler.__iter__``), the permutation is cut into
    batches, the last one partial."""
    while True:
        torch.empty((), dtype=torch.int64).random_(generator=gen)  # _BaseDataLoaderIter._base_seed
        seed = int(torch.empty((), dtype=torch.int64).random_(generator=gen).item())  # RandomSampler.__iter__
        order = torch.randperm(m, generator=torch.Generator().manual_seed(seed))
        yield from order.split(batch_size)


def _forward(params: Sequence[Tensor], x: Tensor) -> Tensor:
    """Log-probabilities of every probe at once: ``x`` (P, B, D) through the stacked MLPs (P, ·, ·)."""
    h = x
    for i in range(0, len(params) - 2, 2):
        h = torch.relu(torch.baddbmm(params[i + 1], h, params[i]))
    return torch.log_softmax(torch.baddbmm(params[-1], h, params[-2]), dim=-1)


def _train_probes(
    xtr: Tensor, ytr: Tensor, subsets: Tensor, seeds: Sequence[int], c: int, probe: ReprieveProbe
) -> list[Tensor]:
    """Every probe of the curve trained at once: probe p is reprieve's ``_train(seeds[p], subset)`` on the training
    samples ``subsets[p, :sizes]`` (−1 padded) — its own initial weights, its own epochs' batches, ``train_steps``
    Adam steps on its own mean NLL. The probes share no parameter, and Adam is elementwise, so training them as one
    stacked model (batched matrix products; short batches padded and masked out of the mean) is training each alone,
    up to the rounding of the batched products. Returns the stacked parameters."""
    dev = xtr.device
    n_probes, d = subsets.shape[0], xtr.shape[1]
    inits, streams = [], []
    for p in range(n_probes):
        m = int((subsets[p] >= 0).sum())
        params, gen = _init(seeds[p], d, c, probe)
        inits.append(params)
        streams.append(_batches(m, gen, probe.batch_size))
    stacked = [torch.stack([ps[k] for ps in inits]).to(dev).requires_grad_(True) for k in range(len(inits[0]))]
    opt = torch.optim.Adam(stacked, lr=probe.lr)
    chunk = 64  # steps whose batches are drawn on the CPU and moved to the device at once
    for first in range(0, probe.train_steps, chunk):
        steps = min(chunk, probe.train_steps - first)
        pos = torch.zeros(steps, n_probes, probe.batch_size, dtype=torch.long)
        mask = torch.zeros(steps, n_probes, probe.batch_size)
        for p, stream in enumerate(streams):
            for t in range(steps):
                b = next(stream)
                pos[t, p, : len(b)] = b
                mask[t, p, : len(b)] = 1.0
        rows = torch.gather(subsets.clamp(min=0).cpu()[None].expand(steps, -1, -1), 2, pos).to(dev)
        mask = mask.to(dev)
        for t in range(steps):
            opt.zero_grad()
            logp = _forward(stacked, xtr[rows[t]])
            nll = -logp.gather(2, ytr[rows[t]][..., None])[..., 0]
            ((nll * mask[t]).sum(1) / mask[t].sum(1)).sum().backward()
            opt.step()
    return [s.detach() for s in stacked]


@torch.no_grad()
def _evaluate(params: Sequence[Tensor], x: Tensor, y: Tensor, batch_size: int) -> list[float]:
    """reprieve's ``_eval`` of every probe: batch mean NLLs (as Python floats) weighted by the batch sizes."""
    total, count = [0.0] * params[0].shape[0], 0
    for start in range(0, x.shape[0], batch_size):
        xb, yb = x[start : start + batch_size], y[start : start + batch_size]
        logp = _forward(params, xb[None].expand(params[0].shape[0], -1, -1))
        means = (-logp.gather(2, yb[None, :, None].expand(logp.shape[0], -1, 1))[..., 0]).mean(1).tolist()
        total = [t + v * xb.shape[0] for t, v in zip(total, means)]
        count += xb.shape[0]
    return [t / count for t in total]


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
    jobs = [(size, seed) for size in reprieve_sizes(xtr.shape[0], probe.n_points) for seed in range(probe.n_seeds)]
    subsets = torch.full((len(jobs), xtr.shape[0]), -1, dtype=torch.long)
    for p, (size, _) in enumerate(jobs):
        mapping = np.arange(xtr.shape[0])
        shuffles.shuffle(mapping)
        keep = min(size, xtr.shape[0])  # reprieve's DatasetSubset stops at the data's length
        subsets[p, :keep] = torch.from_numpy(mapping[:keep])
    params = _train_probes(xtr, ytr, subsets.to(dev), [seed for _, seed in jobs], c, probe)
    losses: dict[int, list[float]] = {}
    for (size, _), loss in zip(jobs, _evaluate(params, xva, yva, probe.batch_size)):
        losses.setdefault(size, []).append(loss)
    sizes = sorted(losses)
    return LossDataCurve(tuple(sizes), tuple(sum(losses[s]) / len(losses[s]) for s in sizes), c, "nats")
