"""Linear probes on many sampled tasks at once (Task Priors, Patel & Balestriero, arXiv:2507.09871, App. D.1).

The paper trains an independent linear probe on every labeling drawn from the Task Prior and compares the mean and
variance of held-out accuracy across tasks with the closed-form E[Tr(MG)] and Var (Thm 2.3). Here all ``num_tasks``
probes are one batched head: weight (num_tasks, q, D), logits ``einsum("tqd,bd->tbq")``, and the loss is the sum over
tasks of each task's mean cross-entropy. Because task t's loss depends only on slice t of the weights, the gradient
of the sum is block-separable and an element-wise optimizer (Adam, SGD) updates every slice exactly as if each probe
were trained on its own (``tests/task_prior/test_probing.py`` checks this against separate ``nn.Linear`` heads).

The authors' probe (convention ``"authors"``; their ``examples/mieb/3_run_linear_probes.py``, ``linear_probe_multi``)
is :class:`BatchedLogitHead`: one logit per binary task (their ``nn.Linear(D, num_tasks)``), ``BCEWithLogitsLoss``
averaged over batch × tasks, trained by :func:`fit_task_probes` with ``batch_size=256`` (reshuffled every epoch) and
``schedule="cosine"`` (lr annealed to 1e-6 over the epochs, stepped per epoch) on the raw features. The mean over
tasks scales every task's gradient by 1/num_tasks; Adam is invariant to that scale but for its ε (1e-8), so the
probes stay independent up to ε.

Pure torch (no Lightning): :class:`~src.models.TaskPriorProbe` and ``python -m src.task_prior`` are shells over it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..utils.checks import check_fraction, check_int
from .conventions import COSINE_MIN_LR, PROBE_HEADS, PROBE_METRICS, PROBE_SCHEDULES, PROBE_SPLITS
from .validation import check_quantiles

__all__ = [
    "BatchedLinearHead",
    "BatchedLogitHead",
    "Standardizer",
    "accuracy_summary",
    "check_task_labels",
    "cosine_lr",
    "evaluate_task_probes",
    "fit_task_probes",
    "make_probe_head",
    "random_split",
    "task_accuracies",
    "task_correct_counts",
    "task_positive_counts",
    "task_positive_recalls",
    "task_probe_loss",
    "task_scores",
]

DEFAULT_QUANTILES = (0.1, 0.5, 0.9)


def _uniform_init(weight: Tensor, bias: Tensor, in_features: int, generator: torch.Generator | None) -> None:
    """nn.Linear's default bound for a head's weights and biases: U(−1/√D, 1/√D), in place."""
    bound = 1.0 / math.sqrt(in_features)
    with torch.no_grad():
        weight.uniform_(-bound, bound, generator=generator)
        bias.uniform_(-bound, bound, generator=generator)


def _check_head_input(features: Tensor, in_features: int) -> None:
    """Refuse features that are not (B, in_features), naming the backbone mismatch."""
    if features.dim() != 2 or features.shape[1] != in_features:
        raise ValueError(
            f"features must have shape (B, {in_features}), got {tuple(features.shape)}; the head was built "
            f"for {in_features}-d features of the evaluated backbone"
        )


class BatchedLinearHead(nn.Module):
    """``num_tasks`` independent linear classifiers R^D -> R^q as one module.

    ``forward(features (B, D)) -> logits (num_tasks, B, q)``. Initialisation equals ``nn.Linear``'s (weight and bias
    uniform in ±1/√D) for every task, drawn from ``generator`` when given.
    """

    def __init__(
        self,
        num_tasks: int,
        num_classes: int,
        in_features: int,
        *,
        generator: torch.Generator | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_tasks = check_int(num_tasks, "num_tasks", 1)
        self.num_classes = check_int(num_classes, "num_classes", 2, meaning="q-class labelings")
        self.in_features = check_int(in_features, "in_features", 1)
        self.weight = nn.Parameter(torch.empty(self.num_tasks, self.num_classes, self.in_features, dtype=dtype))
        self.bias = nn.Parameter(torch.empty(self.num_tasks, self.num_classes, dtype=dtype))
        self.reset_parameters(generator)

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        _uniform_init(self.weight, self.bias, self.in_features, generator)

    def forward(self, features: Tensor) -> Tensor:
        _check_head_input(features, self.in_features)
        return torch.einsum("tqd,bd->tbq", self.weight, features.to(self.weight.dtype)) + self.bias[:, None, :]

    def loss(self, features: Tensor, labels: Tensor) -> Tensor:
        """The training loss on ``features`` (B, D) with ``labels`` (T, B): :func:`task_probe_loss` of the logits."""
        return task_probe_loss(self(features), labels)

    def extra_repr(self) -> str:
        return f"num_tasks={self.num_tasks}, num_classes={self.num_classes}, in_features={self.in_features}"


class BatchedLogitHead(nn.Module):
    """``num_tasks`` binary linear probes with one logit each (the authors' probe: one ``nn.Linear(D, num_tasks)``).

    ``weight`` (num_tasks, D) and ``bias`` (num_tasks,) are those of ``nn.Linear(D, num_tasks)``, initialised as it
    is (uniform in ±1/√D, weight then bias) from ``generator`` when given. ``forward(features (B, D))`` returns the
    two-class logits (num_tasks, B, 2) = [0, z] with z = ``weight · x + bias``, so every scorer of a two-class head
    applies: argmax predicts class 1 exactly when z > 0 (the authors' ``logit > 0``; a tie predicts 0), and the
    softmax of [0, z] is σ(z). :meth:`loss` is ``BCEWithLogitsLoss`` of z against the labels, averaged over all
    batch × task entries, computed as theirs on the (B, num_tasks) matrix (no two-class logits are built in training).
    """

    num_classes = 2

    def __init__(
        self,
        num_tasks: int,
        in_features: int,
        *,
        generator: torch.Generator | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        super().__init__()
        self.num_tasks = check_int(num_tasks, "num_tasks", 1)
        self.in_features = check_int(in_features, "in_features", 1)
        self.weight = nn.Parameter(torch.empty(self.num_tasks, self.in_features, dtype=dtype))
        self.bias = nn.Parameter(torch.empty(self.num_tasks, dtype=dtype))
        self.reset_parameters(generator)

    def reset_parameters(self, generator: torch.Generator | None = None) -> None:
        _uniform_init(self.weight, self.bias, self.in_features, generator)

    def logit(self, features: Tensor) -> Tensor:
        """z (num_tasks, B): one logit per task and row."""
        _check_head_input(features, self.in_features)
        return F.linear(features.to(self.weight.dtype), self.weight, self.bias).T  # nn.Linear's product

    def forward(self, features: Tensor) -> Tensor:
        z = self.logit(features)
        return torch.stack([torch.zeros_like(z), z], -1)

    def loss(self, features: Tensor, labels: Tensor) -> Tensor:
        """mean over (row, task) of BCE-with-logits(z, label): ``features`` (B, D), ``labels`` (T, B) in {0, 1}; the
        logits stay in nn.Linear's (B, T) layout, as the authors' ``crit(head(feats), lbls)``."""
        z = self.logit(features).T  # (B, T), contiguous
        if labels.shape != z.shape[::-1]:
            raise ValueError(f"labels must be (T, B) = {tuple(z.shape[::-1])}, got {tuple(labels.shape)}")
        if z.shape[0] == 0:
            return z.sum() * 0.0
        return F.binary_cross_entropy_with_logits(z, labels.T.to(z.dtype))

    def extra_repr(self) -> str:
        return f"num_tasks={self.num_tasks}, in_features={self.in_features} (one logit per binary task)"


def make_probe_head(
    head: str,
    num_tasks: int,
    num_classes: int,
    in_features: int,
    *,
    generator: torch.Generator | None = None,
    dtype: torch.dtype | None = None,
) -> BatchedLinearHead | BatchedLogitHead:
    """The probes' head of kind ``head`` (:data:`~src.task_prior.conventions.PROBE_HEADS`): ``"softmax"`` = a
    :class:`BatchedLinearHead` with ``num_classes`` logits per task; ``"logit"`` = a :class:`BatchedLogitHead` (binary
    tasks only: ``num_classes`` must be 2)."""
    if head == "softmax":
        return BatchedLinearHead(num_tasks, num_classes, in_features, generator=generator, dtype=dtype)
    if head == "logit":
        if num_classes != 2:
            raise ValueError(
                f"probe_head='logit' (the authors' probe: one BCE logit per task) needs binary tasks, got "
                f"{num_classes} classes; use task_classes=2, or a convention with probe_head='softmax'"
            )
        return BatchedLogitHead(num_tasks, in_features, generator=generator, dtype=dtype)
    raise ValueError(f"probe_head must be one of {PROBE_HEADS}, got {head!r}")


def cosine_lr(lr: float, epoch: int, epochs: int, min_lr: float = COSINE_MIN_LR) -> float:
    """The learning rate of 0-based ``epoch`` of ``epochs`` under cosine annealing from ``lr`` to ``min_lr``:
    min_lr + (lr − min_lr)·(1 + cos(π·epoch/epochs))/2 (the closed form of torch's ``CosineAnnealingLR(T_max=epochs,
    eta_min=min_lr)`` stepped once per epoch; epoch 0 runs at ``lr``)."""
    return min_lr + (lr - min_lr) * (1.0 + math.cos(math.pi * epoch / epochs)) / 2.0


def check_task_labels(labels: Tensor, num_classes: int, num_samples: int | None = None, name: str = "labels") -> Tensor:
    """Validate a (num_tasks, n) integer label matrix with values in [0, num_classes)."""
    if not isinstance(labels, Tensor) or labels.dim() != 2:
        raise ValueError(f"{name} must be a (num_tasks, n) tensor, got {getattr(labels, 'shape', type(labels))}")
    if labels.dtype.is_floating_point or labels.dtype == torch.bool:
        raise TypeError(f"{name} must hold integer class indices, got dtype {labels.dtype}")
    if num_samples is not None and labels.shape[1] != num_samples:
        raise ValueError(
            f"{name} cover {labels.shape[1]} samples but the features have {num_samples} rows; sample the labels "
            "on the same image set as the features"
        )
    if labels.numel() and (int(labels.min()) < 0 or int(labels.max()) >= num_classes):
        raise ValueError(f"{name} lie in [{int(labels.min())}, {int(labels.max())}], outside [0, {num_classes})")
    return labels


def task_probe_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Σ_t mean_b CE(logits[t, b], labels[t, b]): logits (T, B, q), labels (T, B). The sum over tasks keeps each
    probe's gradient equal to that of its own mean cross-entropy."""
    if logits.dim() != 3 or labels.shape != logits.shape[:2]:
        raise ValueError(f"logits (T, B, q) and labels (T, B) disagree: {tuple(logits.shape)} vs {tuple(labels.shape)}")
    t, b, q = logits.shape
    if b == 0:
        return logits.sum() * 0.0
    return F.cross_entropy(logits.reshape(t * b, q), labels.reshape(t * b), reduction="sum") / b


def task_correct_counts(logits: Tensor, labels: Tensor) -> Tensor:
    """Correct predictions per task, (T,) float64: argmax over classes (ties -> lowest class index)."""
    return (logits.argmax(-1) == labels).sum(-1).to(torch.float64)


def task_positive_counts(logits: Tensor, labels: Tensor) -> Tensor:
    """Per task (T, 2) float64: [true positives, positives] of a binary task, the positive class being 1 (argmax
    over the two classes; a tie predicts 0, as the authors' ``logit > 0`` rule does)."""
    positive = labels == 1
    hits = (positive & (logits.argmax(-1) == 1)).sum(-1)
    return torch.stack([hits, positive.sum(-1)], -1).to(torch.float64)


def _batched_sums(head: nn.Module, features: Tensor, labels: Tensor, count, batch_size: int) -> Tensor:
    """Σ over row batches of ``count(head(features[batch]), labels[:, batch])`` (no gradients)."""
    if features.shape[0] != labels.shape[1]:
        raise ValueError(f"{features.shape[0]} feature rows but labels for {labels.shape[1]} samples")
    if features.shape[0] == 0:
        raise ValueError("no evaluation samples: the scored split is empty")
    total = None
    with torch.no_grad():
        for start in range(0, features.shape[0], batch_size):
            sl = slice(start, start + batch_size)
            part = count(head(features[sl]), labels[:, sl].to(features.device)).to(labels.device)
            total = part if total is None else total + part
    return total


def task_accuracies(head: nn.Module, features: Tensor, labels: Tensor, *, batch_size: int = 4096) -> Tensor:
    """Accuracy of every task's probe on ``features``/``labels``, (T,) float64."""
    return _batched_sums(head, features, labels, task_correct_counts, batch_size) / features.shape[0]


def task_positive_recalls(head: nn.Module, features: Tensor, labels: Tensor, *, batch_size: int = 4096) -> Tensor:
    """Recall of the positive class (label 1) of every binary task's probe, (T,) float64: the authors' probe score.

    Defined for binary tasks only; a task without any positive sample here has no recall (0/0): a ValueError names
    it rather than returning NaN."""
    q = getattr(head, "num_classes", None)
    if q != 2:
        raise ValueError(
            f"probe_metric='positive_recall' is the recall of class 1 of a binary task, but the probes have "
            f"{q} classes; use task_classes=2 or probe_metric='accuracy'"
        )
    counts = _batched_sums(head, features, labels, task_positive_counts, batch_size)
    empty = torch.nonzero(counts[:, 1] == 0).reshape(-1)
    if len(empty):
        raise ValueError(
            f"{len(empty)} task(s) (e.g. task {int(empty[0])}) have no positive sample (label 1) in the scored split, "
            "so their recall is undefined; use more samples, a higher sample_temperature or probe_metric='accuracy'"
        )
    return counts[:, 0] / counts[:, 1]


def task_scores(
    head: nn.Module, features: Tensor, labels: Tensor, *, metric: str = "accuracy", batch_size: int = 4096
) -> Tensor:
    """Every task's probe score, (T,) float64: ``metric="accuracy"`` (:func:`task_accuracies`) or
    ``"positive_recall"`` (:func:`task_positive_recalls`, the authors' score)."""
    if metric == "accuracy":
        return task_accuracies(head, features, labels, batch_size=batch_size)
    if metric == "positive_recall":
        return task_positive_recalls(head, features, labels, batch_size=batch_size)
    raise ValueError(f"probe_metric must be one of {PROBE_METRICS}, got {metric!r}")


def accuracy_summary(accuracies: Tensor, quantiles: Sequence[float] = DEFAULT_QUANTILES) -> dict[str, float]:
    """Mean, variance (population, ddof = 0: the spread of this set of tasks) and quantiles (linear interpolation,
    numpy's default) of per-task accuracies: keys ``acc_mean``, ``acc_var``, ``acc_std``, ``acc_q10`` ..."""
    acc = accuracies.detach().to(torch.float64).reshape(-1)
    if acc.numel() == 0:
        raise ValueError("no task accuracies to summarise")
    if not torch.isfinite(acc).all():
        raise FloatingPointError(f"non-finite task accuracies: {acc.tolist()}")
    out = {
        "acc_mean": float(acc.mean()),
        "acc_var": float(acc.var(correction=0)),
        "acc_std": float(acc.std(correction=0)),
    }
    for q in check_quantiles(quantiles):
        out[f"acc_q{round(100 * q):02d}"] = float(torch.quantile(acc, q))
    return out


def random_split(n: int, test_fraction: float, *, seed: int = 0) -> tuple[Tensor, Tensor]:
    """A fixed seeded split of range(n): (train indices, test indices), each sorted; the test size is
    round(test_fraction · n), at least 1 and at most n − 1."""
    test_fraction = check_fraction(test_fraction, "test_fraction")
    if n < 2:
        raise ValueError(f"need at least 2 samples to split, got {n}")
    n_test = min(n - 1, max(1, round(float(test_fraction) * n)))
    perm = torch.randperm(n, generator=torch.Generator().manual_seed(check_int(seed, "seed")))
    return perm[n_test:].sort().values, perm[:n_test].sort().values


@dataclass
class Standardizer:
    """z-scoring with statistics of the training features (so one learning rate suits every backbone)."""

    mean: Tensor
    std: Tensor

    @classmethod
    def fit(cls, features: Tensor, eps: float = 1e-6) -> Standardizer:
        if features.shape[0] == 0:
            raise ValueError("cannot standardize with zero training samples")
        f = features.to(torch.float64)
        return cls(f.mean(0), f.std(0, correction=0).clamp_min(eps))

    def __call__(self, features: Tensor) -> Tensor:
        return ((features.to(torch.float64) - self.mean) / self.std).to(features.dtype)


def fit_task_probes(
    features: Tensor,
    labels: Tensor,
    num_classes: int,
    *,
    epochs: int = 100,
    lr: float = 1e-2,
    weight_decay: float = 0.0,
    batch_size: int | None = None,
    seed: int = 0,
    head: str = "softmax",
    schedule: str = "constant",
) -> BatchedLinearHead | BatchedLogitHead:
    """Train ``labels.shape[0]`` linear probes at once with Adam on fixed features.

    Args:
        features: (n, D) training features (already standardized if wanted).
        labels: (num_tasks, n) integer labels in [0, num_classes).
        epochs: passes over the data; ``batch_size=None`` is full-batch (one step per epoch), else every epoch visits
            a fresh random permutation in batches of ``batch_size`` rows, the last one smaller when n is not a
            multiple (as ``DataLoader(shuffle=True)``).
        seed: head initialisation, then the minibatch orders (one generator).
        head: ``"softmax"`` (:class:`BatchedLinearHead`) or ``"logit"`` (:class:`BatchedLogitHead`, binary tasks).
        schedule: ``"constant"`` lr, or ``"cosine"``: epoch e runs at :func:`cosine_lr` (lr annealed to 1e-6).
    """
    if features.dim() != 2:
        raise ValueError(f"features must be (n, D), got {tuple(features.shape)}")
    if not torch.isfinite(features).all():
        raise ValueError("features contain NaN/inf; check the backbone output before probing")
    num_classes = check_int(num_classes, "num_classes", 2)
    check_task_labels(labels, num_classes, features.shape[0])
    if features.shape[0] == 0:
        raise ValueError("no training samples: the train split is empty")
    if schedule not in PROBE_SCHEDULES:
        raise ValueError(f"probe_schedule must be one of {PROBE_SCHEDULES}, got {schedule!r}")
    gen = torch.Generator().manual_seed(check_int(seed, "seed"))
    probe = make_probe_head(head, labels.shape[0], num_classes, features.shape[1], generator=gen, dtype=features.dtype)
    probe = probe.to(features.device)
    opt = torch.optim.Adam(probe.parameters(), lr=lr, weight_decay=weight_decay)
    n = features.shape[0]
    bs = n if batch_size is None else check_int(batch_size, "batch_size", 1, meaning="None = full batch")
    labels = labels.to(features.device)
    epochs = check_int(epochs, "epochs", 0)
    with torch.enable_grad():
        for epoch in range(epochs):
            if schedule == "cosine":
                for group in opt.param_groups:
                    group["lr"] = cosine_lr(lr, epoch, epochs)
            order = torch.randperm(n, generator=gen).to(features.device) if bs < n else None
            for start in range(0, n, bs):
                idx = order[start : start + bs] if order is not None else slice(None)
                loss = probe.loss(features[idx], labels[:, idx])
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"non-finite probe loss (lr={lr}); lower the learning rate")
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()
    return probe.eval()


def evaluate_task_probes(
    features: Tensor,
    labels: Tensor,
    train_index: Tensor,
    test_index: Tensor,
    num_classes: int,
    *,
    standardize: bool = True,
    metric: str = "accuracy",
    split: str = "test",
    **fit_options,
) -> Tensor:
    """Score (num_tasks,) of probes trained on rows ``train_index``: ``metric`` (``"accuracy"`` or the authors'
    ``"positive_recall"``) on rows ``test_index`` (``split="test"``, held out) or on the training rows themselves
    (``split="train"``, the authors' protocol).

    ``features`` (n, D) of the evaluated backbone, ``labels`` (num_tasks, n) from the Task Prior of a prior kernel
    on the same n images; ``standardize``: z-score with the training rows' statistics (False: the raw features, the
    authors'); ``fit_options`` go to :func:`fit_task_probes` (epochs, lr, weight_decay, batch_size, seed, head,
    schedule; a convention's are ``TaskPriorConvention.probe_options``). The same labels and split for every
    evaluated backbone make their scores comparable task by task.
    """
    check_task_labels(labels, int(num_classes), features.shape[0])
    if split not in PROBE_SPLITS:
        raise ValueError(f"probe_split must be one of {PROBE_SPLITS}, got {split!r}")
    if metric not in PROBE_METRICS:
        raise ValueError(f"probe_metric must be one of {PROBE_METRICS}, got {metric!r}")
    x_tr, x_te = features[train_index], features[test_index]
    if standardize:
        st = Standardizer.fit(x_tr)
        x_tr, x_te = st(x_tr), st(x_te)
    head = fit_task_probes(x_tr, labels[:, train_index], num_classes, **fit_options)
    x, index = (x_te, test_index) if split == "test" else (x_tr, train_index)
    return task_scores(head, x, labels[:, index], metric=metric)
