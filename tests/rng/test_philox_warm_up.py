"""The sampler's compilation made visible (src/rng/philox.py): ``sampler_ready`` says whether the kernels a SynBench
run draws with are built in this process, ``warm_up_sampler`` builds exactly those (a SynBench run afterwards builds
nothing more). ``torch.compile`` is replaced by the identity so that "compiling" is instant and the test cheap; the
kernels' equality with eager is tested in test_philox.py."""

from __future__ import annotations

import pytest
import torch

from src.rng import philox
from src.synbench import SynBenchConfig, synbench


@pytest.fixture
def instant_compile(monkeypatch):
    monkeypatch.setenv("REPBENCH_PHILOX_COMPILE", "1")
    monkeypatch.setattr(philox, "_FUSED", {})
    monkeypatch.setattr(torch, "compile", lambda fn, **kwargs: fn)


def test_warm_up_builds_what_synbench_uses(instant_compile):
    assert not philox.sampler_ready("cpu")
    seconds = philox.warm_up_sampler("cpu")
    assert seconds >= 0.0 and philox.sampler_ready("cpu") and philox.sampler_ready(torch.device("cpu"))
    built = set(philox._FUSED)
    assert built == {("range_words", "cpu"), ("range_normals", "cpu", "torch.float32")}
    assert not philox.sampler_ready("cpu", torch.float64)  # another sample dtype: another kernel
    cfg = SynBenchConfig(s_values=(1.0,), n_train=64, n_test=64, eps=(0.0,), chunk_size=32, batch_size=64)
    synbench(lambda x: x.flatten(1)[:, :8], input_shape=(3, 4, 4), config=cfg)
    assert set(philox._FUSED) == built  # the run drew with exactly the warmed kernels
    assert philox.warm_up_sampler("cpu") < 1.0  # built already: a look-up


def test_a_run_alone_builds_the_same_kernels(instant_compile):
    cfg = SynBenchConfig(s_values=(1.0,), n_train=32, n_test=32, eps=(0.0,), chunk_size=32, batch_size=32)
    synbench(lambda x: x.flatten(1)[:, :4], input_shape=(3, 4, 4), config=cfg)
    assert philox.sampler_ready("cpu")


def test_nothing_to_compile_is_ready(monkeypatch):
    monkeypatch.setattr(philox, "_FUSED", {})
    monkeypatch.setenv("REPBENCH_PHILOX_COMPILE", "0")
    assert philox.sampler_ready("cpu") and philox.sampler_ready("meta")
    assert philox.warm_up_sampler("cpu") >= 0.0
    with pytest.raises(ValueError, match="floating"):
        philox.sampler_ready("cpu", torch.int64)
