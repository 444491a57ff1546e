"""SynBench's class-conditional Gaussian binary task in pixel space (the "Gaussian proxy task", Table 1 of Ko et al.,
"What Would Gauss Say About Representations?", ICML 2024, arXiv:2210.02989): x = mean_offset + y·s·1/√d + N(0, I) per pixel, y ∈ {−1, +1} → labels {0, 1}.

The Bayes classifier reaches accuracy Φ(s) on it (Thm 3.1 iii with ε = 0, Σ = I), which is the number a probe
can be compared with. Samples come from :mod:`src.synbench.sampling` (seeded, independent of batch size).
"""

from __future__ import annotations

import torch
from torch.utils.data import TensorDataset

from ..synbench.sampling import sample
from ..utils.checks import check_int
from .common import IndexedDataset, SplitsDataModule

__all__ = ["GaussianTaskDataModule"]


class GaussianTaskDataModule(SplitsDataModule):
    """Args: ``s`` separation (> 0), ``image_size`` (3, S, S inputs), ``n_train``/``n_val``/``n_test`` samples,
    ``mean_offset`` (pixel mean, official 0.5), ``class_prior`` τ, ``seed``. Values leave [0, 1] on purpose (no
    clipping); probes need ``check_input_range=False``.

    Splits: train = samples 0 … n_train − 1 of the sampler's "train" stream; val = samples 0 … n_val − 1 and test =
    samples n_val … n_val + n_test − 1 of its independent "test" stream (counter-based draws: disjoint, independent
    samples, and val is the same whatever ``n_test``)."""

    def __init__(
        self,
        s: float = 1.0,
        image_size: int = 32,
        n_train: int = 2048,
        n_val: int = 1024,
        n_test: int = 1024,
        mean_offset: float = 0.5,
        class_prior: float = 0.5,
        batch_size: int = 128,
        seed: int = 0,
        num_workers: int = 0,
        num_classes: int | None = None,
    ) -> None:
        super().__init__()
        if not s > 0:
            raise ValueError(f"s must be > 0 (Bayes accuracy Phi(s)), got {s}")
        for key, n in (("n_train", n_train), ("n_val", n_val), ("n_test", n_test)):
            check_int(n, key, 1, meaning="samples", fix=f"set data.{key}")
        if num_classes not in (None, 2):
            raise ValueError(f"the Gaussian task is binary: num_classes must be 2, got {num_classes}")
        self.save_hyperparameters()
        self.num_classes = 2
        self.batch_size, self.num_workers = batch_size, num_workers  # checked by the properties (never truncated)
        self.seed = check_int(seed, "data.seed", fix="set seed=<integer> (data.seed follows it)")

    @property
    def bayes_accuracy(self) -> float:
        """Φ(s): the accuracy of the Bayes classifier in pixel space."""
        return float(torch.distributions.Normal(0.0, 1.0).cdf(torch.tensor(float(self.hparams.s))))

    def _draw(self, n: int, split: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Samples 0 … n − 1 of the sampler's ``split`` stream ("train" or "test")."""
        hp = self.hparams
        return sample(
            n,
            s=float(hp.s),
            input_shape=(3, hp.image_size, hp.image_size),
            seed=int(hp.seed),
            split=split,
            mean_offset=float(hp.mean_offset),
            class_prior=float(hp.class_prior),
        )

    def setup(self, stage: str | None = None) -> None:
        if self.train_dataset is not None:
            return
        n_val, n_test = int(self.hparams.n_val), int(self.hparams.n_test)
        self.train_dataset = IndexedDataset(TensorDataset(*self._draw(int(self.hparams.n_train), "train")))
        x, y = self._draw(n_val + n_test, "test")
        self.val_dataset = IndexedDataset(TensorDataset(x[:n_val], y[:n_val]))
        self.test_dataset = IndexedDataset(TensorDataset(x[n_val:], y[n_val:]))
