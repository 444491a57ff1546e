"""The synthetic proxy task of the baselines and every baseline score on it.

:func:`synthetic_task` draws EXACTLY SynBench's samples (one sampling plan, :class:`src.synbench.plan.SamplingPlan`):
the training chunks and test chunks of one separation s, through the same pixel transform and the same feature
extractor (:func:`src.synbench.protocol.make_extract`, eval mode as :func:`src.synbench.protocol.frozen`). The SynBench
paper's baselines (Ko et al., ICML 2024, arXiv:2210.02989, Appendix A.11 Table 7 and Table 8) use n = 2048, 8192,
32768 training samples and 2048 test samples: set ``SynBenchConfig(n_train=…, n_test=2048)``; chunks are
counter-based, so the 2048 samples are a prefix of the 8192. Neither the paper nor the authors' released code
(IBM/synbench holds only ``evaluate_synbench.py``) says which s the baselines use: ``s`` is a required argument,
and the report should state the one it passes.

:func:`baseline_scores` computes the scores with the time each took (seconds, wall clock; the paper claims
SynBench is about 50x cheaper, Appendix A.9). The loss-data-curve scores share one curve, timed once as
``"loss_data_curve"``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from typing import Any

import torch
from torch import Tensor

from ..synbench.config import SynBenchConfig
from ..synbench.plan import SamplingPlan
from ..synbench.protocol import frozen, make_extract
from ..synbench.runner import sampling_device
from ..utils.checks import check_features, check_labels, check_real
from ..utils.threads import torch_threads
from .conventions import check_convention
from .loss_data import UNITS, Bound, LossDataCurve, loss_data_curve
from .registry import ALL_BASELINES, BaselineSpec, select_baselines
from .reprieve import ReprieveProbe, reprieve_curve

__all__ = ["synthetic_task", "baseline_scores", "BaselineScores", "ALL_BASELINES"]


def synthetic_task(
    feature_fn: Callable[[Tensor], Tensor],
    input_shape: Sequence[int],
    config: SynBenchConfig,
    s: float,
    device: Any = "cpu",
    extractor: Mapping[str, Any] | None = None,
) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """(train_features, train_labels, test_features, test_labels) of SynBench's samples at separation ``s``:
    ``config.n_train`` and ``config.n_test`` samples through ``feature_fn`` (features (n, D), labels int64 in
    {0, 1}). ``s`` need not be on ``config.s_values`` (the chunk seeds depend on s itself). ``extractor``:
    FeatureExtractor options of the forwards, as :func:`src.synbench.synbench`'s (None = the defaults)."""
    if not isinstance(config, SynBenchConfig):
        raise TypeError(f"config must be a SynBenchConfig, got {type(config).__name__}")
    s = check_real(s, "s", low=0.0, low_open=False)
    dev = torch.device(device)
    plan = SamplingPlan.from_config(config, input_shape, feature_fn, None, sampling_device(config, dev))
    extract = make_extract(feature_fn, dev, dict(extractor or {}), config.batch_size)
    out: list[Tensor] = []
    with frozen(feature_fn):
        for split in ("train", "test"):
            zs, ys = [], []
            for x, y in plan.batches(s, split):
                zs.append(extract(x).cpu())
                ys.append(y.cpu())
            out += [torch.cat(zs), torch.cat(ys).long()]
    return out[0], out[1], out[2], out[3]


class BaselineScores(dict):
    """``{name: value}`` (floats) with two attributes: ``seconds`` ({name or "loss_data_curve": wall seconds}) and
    ``lower_bounds`` (the names whose value is only a lower bound, printed "> value": SDL/ε-SC when the curve never
    reaches ε). Keys: "logme", "sfda", "rankme", "alpha_req", "val_loss", "mdl", "sdl@ε", "esc@ε"."""

    def __init__(self, values: dict[str, float], seconds: dict[str, float], lower_bounds: frozenset[str]) -> None:
        super().__init__(values)
        self.seconds = dict(seconds)
        self.lower_bounds = frozenset(lower_bounds)


def _timed(seconds: dict[str, float], name: str, fn: Callable[[], Any], threads: int | None) -> Any:
    with torch_threads(threads):
        t0 = time.perf_counter()
        out = fn()
        seconds[name] = time.perf_counter() - t0
    return out


def baseline_scores(
    train_z: Tensor,
    train_y: Tensor,
    test_z: Tensor,
    test_y: Tensor,
    which: Sequence[str] | None = None,
    *,
    eps: Sequence[float] = (1.0,),
    seed: int = 0,
    convention: str = "repbench",
    mdl_convention: str | None = None,
    units: str = "nats",
    curve_sizes: Sequence[int] | None = None,
    probe: ReprieveProbe | None = None,
    device: Any = "cpu",
    threads: int | None = 1,
) -> BaselineScores:
    """Every baseline in ``which`` (None: every row of :data:`src.baselines.registry.BASELINES`) on one task, in table
    order: LogME, SFDA, RankMe and α-ReQ on the training set, then the loss-data-curve scores (val loss, MDL, SDL and
    ε-SC at each ε of ``eps``; the paper's Table 7 uses ε = 1). Keys: the scores without ε, then per ε of ``eps`` the
    ``name@ε`` ones. See :class:`BaselineScores`.

    ``convention`` (:data:`src.baselines.conventions.CONVENTIONS`): ``"repbench"`` — the curve of a logistic
    regression trained on the training set and validated on the test set (sizes ``curve_sizes``, default
    :func:`~src.baselines.log_grid`; subsets from ``seed``), online MDL, the exact LogME / SFDA; ``"paper"`` — the
    SynBench paper's code: reprieve's MLP curve on its split of the training set (``probe``: its settings, default
    :class:`~src.baselines.reprieve.ReprieveProbe`, trained on ``device``; the test set is not used; ``curve_sizes``
    and ``seed`` do not apply), reprieve's MDL, the authors' LogME and SFDA. ``mdl_convention``: override the
    convention's MDL convention ("online" / "reprieve"). ``threads``: torch CPU threads while scoring (1, default,
    as SynBench's ``linalg_threads``: robust on a busy CPU, and the timings compare like with like; None leaves
    torch's setting); reprieve's MLP trains with torch's setting."""
    conv = check_convention(convention)
    if conv.curve == "reprieve" and curve_sizes is not None:
        raise ValueError(
            "curve_sizes does not apply to convention='paper' (reprieve chooses its sizes: probe.n_points); "
            "pass curve_sizes=None, or convention='repbench'"
        )
    specs = select_baselines(which)
    z = check_features(train_z, "train_z", min_rows=2, dtype=torch.float64)
    y, _ = check_labels(train_y, z.shape[0], None, "train_y")
    values: dict[str, float] = {}
    seconds: dict[str, float] = {}
    lower: set[str] = set()
    inputs: dict[str, tuple[Any, ...]] = {"features": (z,), "features+labels": (z, y)}

    def curve() -> LossDataCurve:
        if conv.curve == "logistic":
            return loss_data_curve(z, y, test_z, test_y, sizes=curve_sizes, seed=seed, units=units)
        if units not in UNITS:
            raise ValueError(f"units must be one of {sorted(UNITS)}, got {units!r}")
        nats = reprieve_curve(train_z, y, probe, device=device)
        return LossDataCurve(nats.sizes, tuple(v * UNITS[units] for v in nats.losses), nats.num_classes, units)

    def needs(spec: BaselineSpec) -> tuple[Any, ...]:
        if spec.needs not in inputs:  # the curve: computed once, by the first score that needs it
            on_threads = threads if conv.curve == "logistic" else None
            inputs["curve"] = (_timed(seconds, "loss_data_curve", curve, on_threads),)
        return inputs[spec.needs]

    def record(key: str, out: Any) -> None:
        if isinstance(out, Bound):
            values[key] = out.value
            if out.lower_bound:
                lower.add(key)
        else:
            values[key] = float(out)

    options = {"convention": mdl_convention or conv.mdl, "authors": conv.authors}
    for spec in specs:
        args = needs(spec)
        if spec.takes_eps:
            continue  # keyed per ε below
        kwargs = {o: options[o] for o in spec.options}
        if spec.needs == "curve":  # cheap: the curve is timed
            record(spec.name, spec.fn(*args, **kwargs))
        else:
            record(spec.name, _timed(seconds, spec.name, partial(spec.fn, *args, **kwargs), threads))
    for e in eps:
        for spec in specs:
            if spec.takes_eps:
                kwargs = {o: e if o == "eps" else options[o] for o in spec.options}
                record(f"{spec.name}@{e:g}", spec.fn(*needs(spec), **kwargs))
    return BaselineScores(values, seconds, frozenset(lower))
