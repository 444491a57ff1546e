"""SynBenchResult: per-(s, ε) accuracy and mean scaled bound with the reference, scores (eq. 3), tables,
curves (eq. 2), figures and JSON round trip."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from .config import SynBenchConfig
from .score import expected_bound_curve, official_grid, synbench_score
from .theory import reference_curve

Tensor = torch.Tensor


@dataclass
class SynBenchResult:
    """Per-(s, ε) accuracy and mean scaled bound (S × E, float64), the reference pairs per s, the config.

    Scores are eq. 3 ratios and are *not* clipped: finite-sample noise can push a near-perfect representation
    slightly above 1; a useless one gives 0. ``proxy``: the paper's Table 1 SA / RA on the proxy task when the config
    asked for it (:func:`src.synbench.proxy.proxy_accuracy`), else None.
    """

    config: SynBenchConfig
    input_shape: tuple[int, ...]
    feature_dim: int
    accuracy: Tensor
    bound: Tensor
    ref_accuracy: Tensor
    ref_bound: Tensor
    timings: dict[str, float] = field(default_factory=dict)
    proxy: dict[str, Any] | None = None

    @classmethod
    def from_sums(
        cls,
        config: SynBenchConfig,
        input_shape: Sequence[int],
        feature_dim: int,
        n_correct: Tensor,
        sum_bound: Tensor,
        n_total: Tensor,
        margin_scale: float = 1.0,
        timings: dict[str, float] | None = None,
    ) -> SynBenchResult:
        """The result of summed test statistics (Algorithm 1 lines 15-16): accuracy = n_correct / n_total, mean
        scaled bound = sum_bound / n_correct (0 where nothing is correct); reference Φ(κs) pairs (Theorem 3.1)."""
        from .plan import reference_prior

        n_total = torch.as_tensor(n_total, dtype=torch.float64).cpu()
        if not bool((n_total > 0).all()):
            missing = [s for s, n in zip(config.s_values, n_total.tolist()) if n <= 0]
            raise ValueError(f"SynBench has no test samples for s = {missing}")
        n_correct = torch.as_tensor(n_correct, dtype=torch.float64).cpu()
        sum_bound = torch.as_tensor(sum_bound, dtype=torch.float64).cpu()
        acc = n_correct / n_total[:, None]
        bound = torch.where(n_correct > 0, sum_bound / n_correct.clamp_min(1e-300), torch.zeros_like(acc))
        ref_a, ref_b = reference_curve(np.asarray(config.s_values), reference_prior(config), margin_scale)
        return cls(
            config,
            tuple(int(v) for v in input_shape),
            int(feature_dim),
            acc,
            bound,
            torch.as_tensor(ref_a, dtype=torch.float64),
            torch.as_tensor(ref_b, dtype=torch.float64),
            dict(timings or {}),
        )

    @property
    def s_values(self) -> tuple[float, ...]:
        return self.config.s_values

    @property
    def eps(self) -> tuple[float, ...]:
        return self.config.eps

    def _eps_index(self, eps: float) -> int:
        for j, e in enumerate(self.eps):
            if abs(e - float(eps)) <= 1e-9:
                return j
        raise ValueError(f"eps={eps} is not on this result's grid {list(self.eps)}")

    def score(self, eps: float = 0.0, a_T: float | None = None, integral: str | None = None) -> float:
        """SynBench-Score(θ, ε, a_T), eq. 3 (a_T defaults to config.a_T[0], integral to config.integral)."""
        j = self._eps_index(eps)
        return synbench_score(
            self.accuracy[:, j],
            self.bound[:, j],
            self.ref_accuracy,
            self.ref_bound,
            self.config.a_T[0] if a_T is None else a_T,
            integral or self.config.integral,
        )

    def table(self, integral: str | None = None) -> list[dict[str, float]]:
        """One row {"eps", "a_T", "score"} per (ε, a_T) of the config."""
        return [{"eps": e, "a_T": t, "score": self.score(e, t, integral)} for t in self.config.a_T for e in self.eps]

    def to_markdown(self, integral: str | None = None) -> str:
        """Scores as a markdown table: one row per a_T, one column per ε (the layout of the paper's Table 6)."""
        head = "| a_T | " + " | ".join(f"ε = {e:g}" for e in self.eps) + " |"
        rows = [head, "|" + " --- |" * (len(self.eps) + 1)]
        for t in self.config.a_T:
            rows.append(f"| {t:g} | " + " | ".join(f"{self.score(e, t, integral):.3f}" for e in self.eps) + " |")
        return "\n".join(rows)

    def best_eps(self, a_T: float | None = None, integral: str | None = None) -> float:
        """argmax_ε SynBench-Score(ε, a_T) (ties: the smallest ε) - the ε for ε-robust probing (paper §4.3)."""
        scores = [self.score(e, a_T, integral) for e in self.eps]
        return self.eps[int(np.argmax(scores))]

    def curves(self, a_t: Sequence[float] | None = None) -> dict[str, Any]:
        """E(a_t) (eq. 2) on ``a_t`` (default official grid): {"a_t", "reference", "eps": {ε: curve}}."""
        t = official_grid() if a_t is None else np.asarray(a_t, dtype=np.float64)
        return {
            "a_t": t,
            "reference": expected_bound_curve(self.ref_accuracy, self.ref_bound, t),
            "eps": {e: expected_bound_curve(self.accuracy[:, j], self.bound[:, j], t) for j, e in enumerate(self.eps)},
        }

    def figure(self, a_t: Sequence[float] | None = None, title: str | None = None) -> Any:
        """matplotlib Figure of :meth:`curves` (paper Fig. 3, left)."""
        from .plots import result_figure

        return result_figure(self, a_t, title)

    def to_dict(self) -> dict[str, Any]:
        """JSON-serializable dict (plain lists and numbers; ``proxy`` only when computed); inverse :meth:`from_dict`."""
        out = {
            "config": self.config.to_dict(),
            "input_shape": list(self.input_shape),
            "feature_dim": self.feature_dim,
            "accuracy": self.accuracy.tolist(),
            "bound": self.bound.tolist(),
            "ref_accuracy": self.ref_accuracy.tolist(),
            "ref_bound": self.ref_bound.tolist(),
            "timings": dict(self.timings),
        }
        if self.proxy is not None:
            out["proxy"] = dict(self.proxy)
        return out

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> SynBenchResult:
        t = lambda v: torch.tensor(v, dtype=torch.float64)  # noqa: E731
        return cls(
            SynBenchConfig.from_dict(d["config"]),
            tuple(d["input_shape"]),
            int(d["feature_dim"]),
            t(d["accuracy"]),
            t(d["bound"]),
            t(d["ref_accuracy"]),
            t(d["ref_bound"]),
            dict(d.get("timings", {})),
            None if d.get("proxy") is None else dict(d["proxy"]),
        )
