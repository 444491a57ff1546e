"""THE SynBench protocol loop (ICML 2024 paper, Algorithm 1), shared by ``synbench()``, ``SynBenchScore``, the
callback and ``epsilon="auto"``. Two seams (src/utils/distributed.py): ``shard`` (which sample chunks this process
draws) and ``reduce`` (how partial statistics combine: identity in one process, a sum all_reduce under DDP).

Per s value (Algorithm 1 lines 8 and 11-16):

1. each process forwards its first training batch; collective **C1** (one-hot-by-rank sum) gives every process
   rank 0's first-batch feature mean, the common shift of the float64 statistics (avoids the cancellation of raw
   moments when |mean| ≫ spread);
2. each process accumulates shifted class counts, class sums and the sum of outer products over its chunks;
   collective **C2** sums them; every process solves the same eigendecomposition and ε-robust classifiers;
3. each process scores its test chunks (correct count, sum of scaled bounds, total per ε); collective **C3**
   carries only the failure flags. Test sums stay per process: the caller sums them (one process: nothing to
   do; the torchmetric: its sum-reduced states).

Before the first C1, one header collective **C0** agrees on the feature dimension (a process without chunks does
not know it). Every process runs every collective whatever its share (no chunks = zeros), and every collective
carries a failure flag, so a failure on any process raises on all of them at the same point instead of leaving
the others blocked: 1 + 3 collectives per s value on every process.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

from ..features.extractor import FORWARD_BATCH
from ..utils.allocator import freed_memory_kept
from ..utils.distributed import Reduce, Shard, no_reduce
from ..utils.modes import eval_mode
from ..utils.threads import torch_threads
from .bayes import TestStats, TrainStats, classifier_from_statistics, test_statistics
from .config import SynBenchConfig
from .plan import SamplingPlan, reference_prior

Tensor = torch.Tensor
F64 = torch.float64

__all__ = ["ProtocolStatistics", "run_protocol", "make_extract", "frozen", "draw_ahead"]


@dataclass
class ProtocolStatistics:
    """This process's test sums per (s, ε) (float64): n_correct (S, E) (ties count 1/2), sum_bound (S, E) (scaled
    bounds of correct samples), n_total (S,); feature_dim; timings (seconds)."""

    n_correct: Tensor
    sum_bound: Tensor
    n_total: Tensor
    feature_dim: int
    timings: dict[str, float] = field(default_factory=dict)


def frozen(feature_fn: Any) -> contextlib.AbstractContextManager:
    """Frozen means frozen: an nn.Module behind ``feature_fn`` (``bb.embed``, ``bb`` or a FeatureExtractor of
    either) runs in eval mode (no BatchNorm batch statistics or running-stat drift) and gets every submodule's
    mode back afterwards."""
    inner = getattr(feature_fn, "feature_fn", feature_fn)
    owner = getattr(inner, "__self__", inner)
    return eval_mode(owner) if isinstance(owner, torch.nn.Module) else contextlib.nullcontext()


def _not_a_tensor(out: Any) -> TypeError:
    kind = type(out).__name__
    hint = " (select the features, e.g. lambda x: model(x)[0])" if isinstance(out, tuple | list | dict) else ""
    return TypeError(f"SynBench: feature_fn must return a tensor of features (N, D), got a {kind}{hint}")


def make_extract(
    feature_fn: Callable[[Tensor], Tensor],
    device: Any = "cpu",
    extractor: dict[str, Any] | None = None,
    batch_size: int = FORWARD_BATCH,
    clock: list[float] | None = None,
) -> Callable[[Tensor], Tensor]:
    """x (B, *input_shape) → features (B, D) through :class:`src.features.FeatureExtractor` (inference mode, chunks
    of ``extractor["max_batch"]`` samples, default ``batch_size``), with the caller's CPU thread count (the protocol
    runs its own algebra with ``linalg_threads``). Clear errors for a non-tensor output or a wrong batch size.
    Adds the forward time to ``clock[0]``."""
    from ..features import FeatureExtractor

    dev = torch.device(device)
    threads = torch.get_num_threads()
    if isinstance(feature_fn, FeatureExtractor):
        ext = feature_fn
    else:
        opts = {k: v for k, v in dict(extractor or {}).items() if v is not None}
        opts.setdefault("max_batch", batch_size)
        opts.setdefault("output_dtype", None)  # keep the forward's dtype: float64 features stay float64
        ext = FeatureExtractor(feature_fn, device=dev, **opts)
    raw = getattr(ext, "feature_fn", feature_fn)

    def extract(x: Tensor) -> Tensor:
        t0 = time.perf_counter()
        with torch_threads(threads):
            try:
                z = ext(x.to(dev, non_blocking=True))
            except TypeError:
                with torch.inference_mode():  # diagnose: did feature_fn itself return a non-tensor?
                    probe = raw(x[:1].to(dev))
                if not isinstance(probe, Tensor):
                    raise _not_a_tensor(probe) from None
                raise
        if not isinstance(z, Tensor):
            raise _not_a_tensor(z)
        if z.ndim < 1 or z.shape[0] != x.shape[0]:
            raise ValueError(
                f"SynBench: feature_fn returned shape {tuple(z.shape)} for a batch of {x.shape[0]} images; "
                "expected (N, D) features"
            )
        if dev.type == "cuda":
            torch.cuda.synchronize(dev)
        if clock is not None:
            clock[0] += time.perf_counter() - t0
        return z.reshape(z.shape[0], -1)

    return extract


def draw_ahead(
    batches: Iterator[tuple[Tensor, Tensor]], threads: int | None = None, device: Any = "cpu"
) -> Iterator[tuple[Tensor, Tensor]]:
    """The batches of ``batches`` (one shard's sample batches), drawn with ``threads`` torch CPU threads (None:
    unchanged) and, on CUDA, one batch ahead on a side stream: batch k + 1 is enqueued before batch k is handed to
    the caller, so its draw runs on the GPU while batch k's forwards do. The caller's stream waits for the side
    stream before it uses a batch (``wait_stream``) and ``record_stream`` keeps the batch's memory from being reused
    until the caller's work on it has run. The order and content of the batches never change (each is the same
    counter-based draw), so every rank still draws exactly its own chunks. On the CPU the batch is drawn in the
    caller's thread (the Philox blocks already use every thread; a prefetch thread would only compete with the
    forwards for the same cores)."""

    def draw() -> tuple[Tensor, Tensor] | None:
        with torch_threads(threads):
            return next(batches, None)

    dev = torch.device(device)
    if dev.type != "cuda":
        while (batch := draw()) is not None:
            yield batch
        return
    main = torch.cuda.current_stream(dev)
    side = torch.cuda.Stream(dev)
    side.wait_stream(main)  # inputs the caller prepared before the loop (factor, affine) are ready
    with torch.cuda.stream(side):
        ahead = draw()
    while ahead is not None:
        main.wait_stream(side)
        for t in ahead:
            t.record_stream(main)
        batch = ahead
        with torch.cuda.stream(side):
            ahead = draw()
        yield batch


class _Failure:
    """The first error of this process and the collective check that turns any process's failure into an
    exception on every process at the same collective."""

    def __init__(self, world_size: int) -> None:
        self.error: BaseException | None = None
        self.world_size = world_size

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        if self.error is not None:
            yield  # pragma: no cover - callers skip work after a failure
            return
        try:
            yield
        except Exception as err:  # carried to the next collective, raised there on every process
            self.error = err

    @property
    def flag(self) -> float:
        return 1.0 if self.error is not None else 0.0

    def check(self, failed: float, s: float) -> None:
        """Raise when this process (its own error) or another one (``failed`` = reduced flag sum) failed."""
        if self.error is not None:
            err = self.error
            if isinstance(err, ValueError):
                raise ValueError(f"{err} (s = {s})") from err
            raise err
        if failed > 0:
            raise RuntimeError(f"SynBench: {int(round(failed))} other process(es) failed at s = {s}; see their errors")


def run_protocol(
    extract: Callable[[Tensor], Tensor],
    plan: SamplingPlan,
    config: SynBenchConfig,
    shard: Shard = Shard(),
    reduce: Reduce = no_reduce,
    progress: Callable[[int], None] = lambda n: None,
    device: Any = "cpu",
) -> ProtocolStatistics:
    """Run Algorithm 1 for every s of ``plan`` on this process's ``shard`` (module docstring); returns this
    process's test sums (equal to the totals in one process). ``extract``: x → (B, D) features (see
    :func:`make_extract`); ``progress(n)`` is called with the number of samples of each processed batch;
    ``device``: where the float64 statistics live and the classifiers are solved (the feature device).

    Every process of a ``reduce`` group must call it with the same plan and config. Malloc keeps freed memory for
    the duration of the call (:func:`src.utils.allocator.freed_memory_kept`).
    """
    with freed_memory_kept():
        return _run_protocol(extract, plan, config, shard, reduce, progress, device)


def _run_protocol(
    extract: Callable[[Tensor], Tensor],
    plan: SamplingPlan,
    config: SynBenchConfig,
    shard: Shard,
    reduce: Reduce,
    progress: Callable[[int], None],
    device: Any,
) -> ProtocolStatistics:
    cfg = config
    tau = reference_prior(cfg)
    n_s, n_e = len(plan.s_values), len(cfg.eps)
    n_correct = torch.zeros(n_s, n_e, dtype=F64)
    sum_bound = torch.zeros(n_s, n_e, dtype=F64)
    n_total = torch.zeros(n_s, dtype=F64)
    world, rank = shard.world_size, shard.rank
    fail = _Failure(world)
    dim = 0
    dev = torch.device(device)
    threads = torch.get_num_threads()  # sampling uses the caller's threads, the algebra ``linalg_threads``
    t_start = time.perf_counter()
    with torch_threads(cfg.linalg_threads):
        for i, s in enumerate(plan.s_values):
            train = draw_ahead(plan.batches(s, "train", shard), threads, dev)
            first: tuple[Tensor, Tensor] | None = None
            with fail.guard():
                batch = next(train, None)
                if batch is not None:
                    first = (extract(batch[0]), batch[1])
                    if dim and first[0].shape[1] != dim:
                        raise ValueError(f"feature_fn returned {first[0].shape[1]} features, earlier {dim}")
            if not dim:  # C0: the feature dimension (rank 0 always holds training chunk 0)
                header = torch.zeros(world, 2, dtype=F64)
                header[rank, 0] = fail.flag
                header[rank, 1] = float(first[0].shape[1]) if first is not None else 0.0
                header = reduce(header)
                fail.check(float(header[:, 0].sum()), s)
                dims = {int(d) for d in header[:, 1].tolist() if d > 0}
                if len(dims) != 1:
                    raise ValueError(f"feature_fn returned different feature dimensions on different processes: {dims}")
                dim = dims.pop()
            # C1: common shift = rank 0's first-batch mean (one-hot by rank), with failure flags
            c1 = torch.zeros(world, dim + 2, dtype=F64)
            c1[rank, dim + 1] = fail.flag
            if first is not None and fail.error is None:
                c1[rank, :dim] = first[0].to(F64).mean(0).cpu()
                c1[rank, dim] = 1.0
            c1 = reduce(c1)
            fail.check(float(c1[:, dim + 1].sum()), s)
            owner = int(torch.nonzero(c1[:, dim] > 0)[0, 0])
            shift = c1[owner, :dim]
            # training statistics of this shard, C2: their sum
            stats = TrainStats.zeros(dim, shift, dev)
            with fail.guard():
                if first is not None:
                    stats.update(first[0], first[1])
                    progress(len(first[1]))
                first = None
                for x, y in train:
                    z = extract(x)
                    stats.update(z, y)
                    progress(len(y))
            stats_shift = stats.shift
            packed = torch.cat(
                [
                    stats.count,
                    stats.sum.reshape(-1),
                    stats.sum_outer.reshape(-1),
                    torch.tensor([fail.flag], dtype=F64, device=dev),
                ]
            )
            del stats
            packed = reduce(packed)
            fail.check(float(packed[-1]), s)
            total = TrainStats(
                packed[:2], packed[2 : 2 + 2 * dim].view(2, dim), packed[2 + 2 * dim : -1].view(dim, dim), stats_shift
            )
            del packed
            # classifiers (identical on every process), test pass of this shard, C3: failure flags
            ts = TestStats(torch.zeros(n_e, dtype=F64), torch.zeros(n_e, dtype=F64), torch.zeros((), dtype=F64))
            with fail.guard():
                clf = classifier_from_statistics(
                    total,
                    cfg.eps,
                    cfg.eps_mode,
                    norm=cfg.norm,
                    eig_tol=cfg.eig_tol,
                    eig_tol_mode=cfg.eig_tol_mode,
                    cov_divisor=cfg.cov_divisor,
                    class_prior=tau,
                )
                del total
                for x, y in draw_ahead(plan.batches(s, "test", shard), threads, dev):
                    part = test_statistics(extract(x), y, clf)
                    ts = ts + TestStats(*(t.cpu() for t in part))
                    progress(len(y))
            fail.check(float(reduce(torch.tensor([fail.flag], dtype=F64))[0]), s)
            n_correct[i], sum_bound[i], n_total[i] = ts.n_correct, ts.sum_bound, ts.n_total
    timings = {"total_s": time.perf_counter() - t_start}
    return ProtocolStatistics(n_correct, sum_bound, n_total, dim, timings)
