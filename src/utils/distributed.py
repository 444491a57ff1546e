"""The two seams of every protocol loop (design principle "one loop per protocol"): which chunks this process
computes (``Shard``) and how partial statistics combine (``Reduce``: identity in one process, a sum all_reduce
under torch.distributed). Every rank calls every collective, whatever its share (empty shares contribute zeros),
so no rank count can deadlock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.distributed as dist

Tensor = torch.Tensor
Reduce = Callable[[Tensor], Tensor]


@dataclass(frozen=True)
class Shard:
    """Round-robin share of ``n`` work items for process ``rank`` of ``world_size``."""

    rank: int = 0
    world_size: int = 1

    def __post_init__(self) -> None:
        if self.world_size < 1 or not 0 <= self.rank < self.world_size:
            raise ValueError(f"invalid shard rank={self.rank} world_size={self.world_size}")

    def indices(self, n: int) -> range:
        """Items ``rank, rank + world_size, ...`` below ``n`` (possibly empty)."""
        return range(self.rank, n, self.world_size)

    def owns(self, i: int) -> bool:
        return i % self.world_size == self.rank


def no_reduce(tensor: Tensor) -> Tensor:
    """The single-process reduction: identity."""
    return tensor


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def all_reduce_sum(tensor: Tensor) -> Tensor:
    """Sum ``tensor`` over all ranks (a new tensor; the input is not modified). Moves to the GPU for NCCL."""
    if not _distributed():
        return tensor.clone()
    device = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else tensor.device
    out = tensor.detach().to(device, copy=True).contiguous()
    dist.all_reduce(out, op=dist.ReduceOp.SUM)
    return out.to(tensor.device)


def process_seams() -> tuple[Shard, Reduce]:
    """(this process's shard, its reduction): ``(Shard(), no_reduce)`` outside torch.distributed."""
    if not _distributed():
        return Shard(), no_reduce
    return Shard(dist.get_rank(), dist.get_world_size()), all_reduce_sum


def raise_if_any_failed(error: BaseException | None, reduce: Reduce = no_reduce) -> None:
    """Collective failure check: every rank calls it once at the same point; if any rank failed, every rank
    raises (its own error, or a RuntimeError naming how many ranks failed) instead of blocking in the next
    collective."""
    flag = reduce(torch.tensor([1.0 if error is not None else 0.0], dtype=torch.float64))
    if error is not None:
        raise error
    failed = int(flag.item())
    if failed:
        raise RuntimeError(f"{failed} other rank(s) failed; see their error messages")
