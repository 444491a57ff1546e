"""The distributed seams (src/utils/distributed.py): shards, reductions and the collective failure check, in one
process and in 2 gloo processes."""

from __future__ import annotations

import pytest
import torch

from src.utils.distributed import Shard, all_reduce_sum, no_reduce, process_seams, raise_if_any_failed
from tests._multiprocess import run_in_processes


def test_shards_partition_the_items() -> None:
    for world in (1, 2, 3, 5):
        got = sorted(i for r in range(world) for i in Shard(r, world).indices(7))
        assert got == list(range(7))
        assert all(Shard(r, world).owns(i) == (i in Shard(r, world).indices(7)) for r in range(world) for i in range(7))
    assert list(Shard(4, 5).indices(3)) == []  # ranks beyond the items get an empty share
    for rank, world in ((0, 0), (2, 2), (-1, 2)):
        with pytest.raises(ValueError, match="invalid shard"):
            Shard(rank, world)


def test_single_process_seams() -> None:
    shard, reduce = process_seams()
    assert shard == Shard() and reduce is no_reduce
    t = torch.arange(3.0)
    assert no_reduce(t) is t
    out = all_reduce_sum(t)
    assert torch.equal(out, t) and out is not t  # a new tensor, as under torch.distributed
    raise_if_any_failed(None)
    with pytest.raises(KeyError, match="mine"):
        raise_if_any_failed(KeyError("mine"))


def _worker(rank: int, world: int) -> dict:
    shard, reduce = process_seams()
    total = reduce(torch.tensor([float(rank + 1)], dtype=torch.float64))
    messages = []
    for bad in (None, 1):
        try:
            raise_if_any_failed(ValueError(f"rank {rank} broke") if rank == bad else None, reduce)
            messages.append("ok")
        except Exception as err:
            messages.append(f"{type(err).__name__}: {err}")
    return {"shard": (shard.rank, shard.world_size), "total": float(total), "messages": messages}


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_two_processes() -> None:
    outs = run_in_processes(_worker, 2)
    for rank, out in enumerate(outs):
        assert out["shard"] == (rank, 2)
        assert out["total"] == 3.0  # 1 + 2, exact in float64
        assert out["messages"][0] == "ok"
    assert outs[1]["messages"][1] == "ValueError: rank 1 broke"
    assert outs[0]["messages"][1].startswith("RuntimeError: 1 other rank(s) failed")


def test_one_seed_mixer_keeps_the_streams_it_replaced():
    """mix_seed replaced the data modules' 64-bit mixer (identical by construction) and the DivergenceRadius sweep's
    32-bit-masked one: for every value below 2^32 (seeds, chunk indices, CRC32 name keys) the 32-bit mask is the
    identity, so the sweep's random draws are unchanged; above it the old mask aliased seed 2^32 to seed 0."""
    import numpy as np

    from src.utils.numerics import mix_seed

    def old32(*v: int) -> int:
        return int(np.random.SeedSequence([int(x) & 0xFFFFFFFF for x in v]).generate_state(1, np.uint64)[0] >> 1)

    for a in (0, 1, 7, 2**31, 2**32 - 1):
        for b in (0, 3, 0x5EED, 2**32 - 1):
            assert mix_seed(a, b) == old32(a, b)
    assert mix_seed(2**32, 5) != mix_seed(0, 5)  # no aliasing of large seeds any more
    assert 0 <= mix_seed(-1, 2**70) < 2**63


def test_one_seed_hash_behind_mix_seed_and_synbench_chunk_keys() -> None:
    """Both seed derivations are reductions of the one hash (utils.numerics.seed_word); SynBench's chunk keys keep
    their published values (a hard-coded known value of the SeedSequence formula they were measured with)."""
    import numpy as np

    from src.synbench.sampling import chunk_seed
    from src.utils.numerics import mix_seed, seed_word

    key = (12, 2_500_000, 1, 7)  # seed 12, s = 2.5, split "test", chunk 7
    word = int(np.random.SeedSequence(list(key)).generate_state(1, np.uint64)[0])
    assert seed_word(*key) == word
    assert chunk_seed(12, 2.5, "test", 7) == word & (2**63 - 1)
    assert mix_seed(*key) == word >> 1
