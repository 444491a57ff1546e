"""The extractor's precision policy (src/features/precision.py): validation, the deprecated ``autocast`` alias, the
process-wide TF32 settings set only inside the forward and restored (also on an exception), float32 features."""

from __future__ import annotations

import contextlib

import pytest
import torch
from torch import nn

from src.features import FeatureExtractor
from src.features.precision import DEFAULT_PRECISION, PRECISIONS, _restore, check_precision, tf32_mode, tf32_settings

from ._reference import U32, float64_features, make_backbone, rel_errors


@contextlib.contextmanager
def caller_settings(setup: str):
    """Put the process in one of the states a caller may leave it in; undo it afterwards (this test's own
    change of process-wide state must not leak into other tests)."""
    before = tf32_settings()
    try:
        if setup == "matmul_high":  # what src/train.py does (legacy API)
            torch.set_float32_matmul_precision("high")
        elif setup == "legacy_cudnn_off":
            torch.backends.cudnn.allow_tf32 = False
        elif setup == "new_api_mixed":  # the new API alone: the legacy getters then refuse to answer
            torch.backends.cudnn.conv.fp32_precision = "ieee"
            torch.backends.cuda.matmul.fp32_precision = "tf32"
        yield
    finally:
        _restore(before)


SETUPS = ["torch_default", "matmul_high", "legacy_cudnn_off", "new_api_mixed"]


def test_validation_and_alias():
    assert [check_precision(p) for p in PRECISIONS] == list(PRECISIONS)
    assert check_precision(None) == DEFAULT_PRECISION == "tf32"  # measured: same scores as fp32, 3.4x faster on a GPU
    for bad in ("int8", "FP32", 32):
        with pytest.raises(ValueError, match="precision"):
            check_precision(bad)
    with pytest.raises(ValueError, match="precision"):
        FeatureExtractor(lambda t: t.flatten(1), precision="half")
    with pytest.warns(DeprecationWarning, match="precision='bf16'"):
        assert FeatureExtractor(lambda t: t.flatten(1), autocast="bf16").precision == "bf16"
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="disagree"):
        FeatureExtractor(lambda t: t.flatten(1), autocast="bf16", precision="fp16")
    with pytest.warns(DeprecationWarning):  # the same wish twice is no conflict
        assert check_precision("fp16", autocast="fp16") == "fp16"
    ext = FeatureExtractor(lambda t: t.flatten(1))
    assert ext.precision == "tf32" and ext.autocast is None  # the old attribute still answers
    assert FeatureExtractor(lambda t: t.flatten(1), precision="fp16").autocast == "fp16"


@pytest.mark.parametrize("setup", SETUPS)
@pytest.mark.parametrize("precision", PRECISIONS)
def test_tf32_set_inside_the_forward_and_restored(setup, precision):
    seen = []

    def fn(t):
        # as the forward sees them, through the legacy getters (torch.compile's inductor reads these: they must
        # answer, i.e. both of torch's views agree) and the new per-operator strings
        b = torch.backends
        strings = (b.cuda.matmul.fp32_precision, b.cudnn.conv.fp32_precision, b.cudnn.rnn.fp32_precision)
        if setup == "new_api_mixed":  # the caller's legacy view is unreadable; it is left alone
            seen.append((None, None, strings[0], strings[1] == strings[2]))
        else:
            seen.append((b.cuda.matmul.allow_tf32, b.cudnn.allow_tf32, strings[0], strings[1] == strings[2]))
        return t.flatten(1)

    with caller_settings(setup):
        before = tf32_settings()
        FeatureExtractor(fn, precision=precision, max_batch=2)(torch.rand(3, 3, 4, 4))
        assert tf32_settings() == before
    on = precision == "tf32"
    legacy = (None, None) if setup == "new_api_mixed" else (on, on)
    assert seen == [(*legacy, "tf32" if on else "ieee", True)] * 2  # two chunks, each under the policy


@pytest.mark.parametrize("setup", SETUPS)
def test_settings_restored_on_an_exception(setup):
    def boom(t):
        raise RuntimeError("forward failed")

    with caller_settings(setup):
        before = tf32_settings()
        for precision in PRECISIONS:
            with pytest.raises(RuntimeError, match="forward failed"):
                FeatureExtractor(boom, precision=precision)(torch.rand(2, 3, 4, 4))
            assert tf32_settings() == before
        with pytest.raises(KeyError), tf32_mode(True):
            raise KeyError("inside the block")
        assert tf32_settings() == before


def test_iter_chunks_does_not_hold_the_settings_between_chunks():
    """A generator suspended between chunks must not leave TF32 switched on in the caller's code."""
    before = tf32_settings()
    it = FeatureExtractor(lambda t: t.flatten(1), precision="tf32", max_batch=1).iter_chunks(torch.rand(2, 3, 4, 4))
    next(it)
    assert tf32_settings() == before
    list(it)
    assert tf32_settings() == before


def test_features_float32_and_cpu_tf32_is_fp32():
    """On the CPU "tf32" runs the very same float32 kernels as "fp32" (the TF32 switches only reach cuBLAS and
    cuDNN): features are bitwise equal. bf16 and fp16 features come back as float32."""
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 5))
    x = torch.rand(4, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    z = {p: FeatureExtractor(net, precision=p)(x) for p in PRECISIONS}
    assert all(v.dtype == torch.float32 and v.shape == (4, 5) for v in z.values())
    assert torch.equal(z["tf32"], z["fp32"])
    with pytest.warns(DeprecationWarning):
        assert torch.equal(FeatureExtractor(net, autocast="bf16")(x), z["bf16"])  # the alias is the same policy


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA path: needs a GPU")
def test_cuda_precisions(tmp_path):  # pragma: no cover - no GPU in CI
    """fp32 on CUDA is IEEE float32: another order of the same float32 operations, so its error to the float64
    forward is of the size e_ref of the CPU's float32 error (within C_ORDER = 4, the derivation at the top of
    test_extractor.py; floor 8·u32). TF32 rounds each conv/linear layer's two operands to u = 2⁻¹¹ with float32
    accumulation: ≲ 2·u per layer, adding over L layers, e ≤ 2·L·2⁻¹¹; bf16 the same with u = 2⁻⁹."""
    bb = make_backbone("timm", tmp_path)
    x = torch.rand(6, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        z_cpu = bb.embed(x)
    z64 = float64_features(bb, x)
    e_ref = float(rel_errors(z_cpu, z64).max())
    layers = sum(isinstance(m, (nn.Conv2d, nn.Linear)) for m in bb.modules())
    bb = bb.cuda()
    z = {p: FeatureExtractor(bb.embed, device="cuda", precision=p)(x).cpu() for p in ("fp32", "tf32", "bf16")}
    assert all(v.dtype == torch.float32 for v in z.values())
    assert float(rel_errors(z["fp32"], z64).max()) <= 4 * e_ref + 8 * U32
    assert float(rel_errors(z["tf32"], z_cpu).max()) <= 2 * layers * 2.0**-11
    assert float(rel_errors(z["bf16"], z_cpu).max()) <= 2 * layers * 2.0**-9
