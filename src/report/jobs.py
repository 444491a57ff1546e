"""One report, many processes: what a job of ``python -m src.report`` does (``stage``), which backbones it computes
(``shard``) and which GPU of its machine it takes (:func:`gpu_for_job`, the one rule) — docs/report.md, "Many
backbones: jobs, GPUs and clusters".

A report is a set of cache entries, one per (backbone weights, part, settings) (:mod:`src.report.cache`, each written
atomically), and a page built from them. ``stage=compute shard=<i>`` fills the entries of backbone ``i``; a Hydra
multirun over ``shard`` (``hydra/launcher=joblib`` on one machine, ``hydra/launcher=submitit_slurm`` on a cluster)
runs one job per backbone into the shared ``cache_dir``; ``stage=page`` then builds the page from the entries alone,
computing nothing, and fails before writing anything while an entry is missing (:class:`MissingEntries`).
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import tempfile
from collections.abc import Collection, Iterator, Sequence
from pathlib import Path
from typing import Any

__all__ = ["STAGES", "MissingEntries", "check_stage", "compute_command", "gpu_for_job", "job_device", "shard_indices"]

#: all: compute what the cache lacks, then write the page; compute: fill the cache only; page: the page from the cache
STAGES = ("all", "compute", "page")


class MissingEntries(LookupError):
    """``stage=page`` (``run_audit(..., compute=False)``) found entries absent from the cache: nothing was computed and
    nothing written. ``missing``: (backbone index, label, part) of each; the message names each and the fix."""

    def __init__(self, missing: Sequence[tuple[int, str, str]], cache_dir: Any, fix: str = "") -> None:
        self.missing = list(missing)
        self.cache_dir = cache_dir
        self.fix = fix
        shown = "; ".join(f"({label}, {part})" for _, label, part in self.missing)
        how = fix or "compute them with stage=compute (the same settings), then build the page again"
        super().__init__(
            f"stage=page: {len(self.missing)} (backbone, part) entr{'y is' if len(self.missing) == 1 else 'ies are'} "
            f"missing from cache_dir={cache_dir}: {shown}. The page computes nothing and wrote nothing; {how}"
        )

    @property
    def indices(self) -> list[int]:
        """The indices (into ``backbones``) of the backbones with a missing entry, in order."""
        return sorted({i for i, _, _ in self.missing})


def check_stage(stage: Any, shard: Any, cache_dir: Any) -> str:
    """``stage`` checked against :data:`STAGES` and against ``shard`` and ``cache_dir``, before any work: a shard
    computes part of a report, so it needs ``stage=compute`` (the page is built from every backbone's entries by
    ``stage=page``); ``compute`` and ``page`` need a cache (``cache_dir`` not null)."""
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {list(STAGES)}, got {stage!r}")
    if shard is not None and stage != "compute":
        raise ValueError(
            f"shard={shard!r} computes part of the report's backbones, so it needs stage=compute (got stage={stage}): "
            "add stage=compute to each job, then build the page from the cache with stage=page (docs/report.md, "
            "'Many backbones')"
        )
    if stage != "all" and cache_dir is None:
        raise ValueError(
            f"stage={stage} goes through the cache (compute fills it, page reads it), but cache_dir is null: point "
            "cache_dir at a folder every job can reach, e.g. cache_dir=/shared/report_cache"
        )
    return stage


def shard_indices(shard: Any, labels: Sequence[str]) -> list[int] | None:
    """The indices into the backbone list that ``shard`` names: None (every backbone) for None; an integer ``i``
    (0-based: ``range(0, n)`` in a Hydra sweep), a backbone's label (``timm:resnet10t``, as the report's rows name
    it), or a list of them — in list order, each once. Anything else is a ValueError naming the backbones."""
    if shard is None:
        return None
    items = list(shard) if isinstance(shard, (list, tuple)) else [shard]
    known = ", ".join(f"{i}: {lab}" for i, lab in enumerate(labels))
    out: list[int] = []
    for item in items:
        if isinstance(item, int) and not isinstance(item, bool) and 0 <= item < len(labels):
            index = item
        elif isinstance(item, str) and item in labels:
            index = labels.index(item)
        else:
            raise ValueError(
                f"shard={shard!r}: {item!r} is neither an index in [0, {len(labels)}) nor a label of backbones "
                f"({known})"
            )
        if index not in out:
            out.append(index)
    if not out:
        raise ValueError(f"shard={shard!r} names no backbone; backbones: {known}")
    return out


def compute_command(indices: Sequence[int], overrides: Sequence[str]) -> str:
    """``python -m src.report stage=compute shard=[...] <overrides>``: the command that computes the entries of the
    backbones at ``indices`` with this run's other command-line ``overrides`` (``stage`` and ``shard`` replaced)."""
    kept = [o for o in overrides if not re.match(r"^~?\+{0,2}(stage|shard)=", o)]
    shard = str(indices[0]) if len(indices) == 1 else "[" + ",".join(map(str, indices)) + "]"
    return " ".join(["python -m src.report", "stage=compute", f"shard={shard}", *map(shlex.quote, kept)])


# ----------------------------------------------------------------------------------------------- the GPU of a job
def gpu_for_job(first: int, n_gpus: int, busy: Collection[int] = ()) -> int:
    """THE rule for the GPU of a sharded job on a machine with ``n_gpus`` visible GPUs: the first GPU, counting
    round-robin from ``first % n_gpus`` (``first``: the job's first backbone index), that no other job of this machine
    holds (``busy``); if every GPU is held, ``first % n_gpus`` (shared). So N jobs on N GPUs spread one per GPU
    whatever order they start and finish in, and a job that follows a finished one takes the GPU it freed."""
    if n_gpus < 1:
        raise ValueError(f"n_gpus must be >= 1, got {n_gpus}")
    order = [(first + k) % n_gpus for k in range(n_gpus)]
    return next((i for i in order if i not in busy), order[0])


def _gpu_ids(n_gpus: int) -> list[str]:
    """The machine-wide identity of each visible GPU (``CUDA_VISIBLE_DEVICES``' entries, else its index): jobs that see
    different subsets of the GPUs still name the same GPU alike."""
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    return visible[:n_gpus] if len(visible) >= n_gpus else [str(i) for i in range(n_gpus)]


def _lock_dir() -> Path:
    uid = os.getuid() if hasattr(os, "getuid") else 0
    return Path(tempfile.gettempdir()) / f"repbench-gpus-{uid}"


@contextlib.contextmanager
def _held(path: Path) -> Iterator[bool]:
    """An exclusive, non-blocking ``flock`` on ``path`` (True = taken) for the ``with`` block; the kernel drops it when
    the process ends, even by SIGKILL, so a killed job never leaves a GPU marked busy."""
    try:
        import fcntl
    except ImportError:  # no flock (Windows): no claim, the rule's first choice
        yield False
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_CREAT | os.O_RDWR, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


@contextlib.contextmanager
def job_device(device: str, shard: Sequence[int] | None, n_gpus: int | None = None) -> Iterator[str]:
    """The device a job runs on, held for the ``with`` block: ``device`` itself, unless it is a bare ``cuda``, the job
    is a shard (``shard``: its backbone indices) and the machine shows several GPUs (``n_gpus``; None =
    ``torch.cuda.device_count()``); then ``cuda:<i>`` by :func:`gpu_for_job`, the GPUs other jobs of this machine hold
    being those whose lock file (in the temp folder, one per GPU) another process holds. Under SLURM each job sees
    its own GPU (``n_gpus`` 1): ``cuda``."""
    if device != "cuda" or not shard:
        yield device
        return
    if n_gpus is None:
        import torch

        n_gpus = torch.cuda.device_count()
    if n_gpus < 2:
        yield device
        return
    ids = _gpu_ids(n_gpus)
    busy: set[int] = set()
    with contextlib.ExitStack() as stack:
        for _ in range(n_gpus):
            i = gpu_for_job(shard[0], n_gpus, busy)
            if i in busy:  # every GPU held by another job: share the rule's first choice
                break
            name = re.sub(r"[^A-Za-z0-9_.-]", "-", ids[i])
            if stack.enter_context(_held(_lock_dir() / f"gpu-{name}.lock")):
                yield f"cuda:{i}"
                return
            busy.add(i)
        yield f"cuda:{gpu_for_job(shard[0], n_gpus, busy)}"


def page_command(overrides: Sequence[str]) -> str:
    """``python -m src.report stage=page <overrides>``: the page of the report this job's ``overrides`` belong to
    (``stage`` and ``shard`` replaced)."""
    kept = [o for o in overrides if not re.match(r"^~?\+{0,2}(stage|shard)=", o)]
    return " ".join(["python -m src.report", "stage=page", *map(shlex.quote, kept)])


def computed_message(labels: Sequence[str], hits: int, misses: int, seconds: float, cache_dir: Any,
                     overrides: Sequence[str]) -> str:  # fmt: skip
    """What a ``stage=compute`` job says when it is done: what it computed, where, and the command of the page."""
    return (
        f"Computed {len(labels)} backbone(s) ({', '.join(labels)}) into cache_dir={Path(cache_dir).resolve()} "
        f"({seconds:.0f} s; cache: {hits} reused, {misses} computed). This job writes no page: once every backbone's "
        f"job has run, build the page from the cache (it computes nothing) with: {page_command(overrides)}"
    )
