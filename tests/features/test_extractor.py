"""FeatureExtractor: features equal the plain forward for timm, open_clip and torchvision backbones; chunking,
flags, bad input.

Tolerance (one derivation for every equality test below). The engine changes only the *order* of float32
operations (NHWC convolutions, other oneDNN kernels, chunk sizes). The rounding error of a float32 dot product of
length K is ≲ √K·u·Σ|w_i x_i| (probabilistic bound, Higham, "Accuracy and Stability of Numerical Algorithms",
§3.1 and §4.2), and every summation order obeys the same law; through a deep network these per-layer errors add
up with each layer's gain, which we do not model: instead we *measure* the float32 error scale of the very network
as e_ref = max_i ‖z_plain,i − z64,i‖ / ‖z64,i‖ (z64: the same network in float64, whose own rounding is 2^29
times smaller and negligible). The engine's float32 evaluation is another realisation of the same error law, so
its error to z64 must be of the same size: we allow c·e_ref with c = 4 (the ratio of the largest of two draws of
the same error distribution over ≤ 16 samples; observed ratios are 0.5-1.6). The direct comparison engine vs
plain follows by the triangle inequality: ≤ (c + 1)·e_ref. A floor of 8·u keeps the bound meaningful when the
reference error happens to be exactly 0.
"""

from __future__ import annotations

import pytest
import torch
from torch import nn

from src.features import FeatureExtractor, as_extractor, resolve_memory_format

from ._reference import U32, float64_features, make_backbone, rel_errors

C_ORDER = 4.0
SOURCES = ["timm", "torchvision", "open_clip"]


@pytest.fixture(scope="module")
def resnet10t(tmp_path_factory):
    """timm:resnet10t, random init, eval mode; shared by the tests that only read it."""
    return make_backbone("timm", tmp_path_factory.mktemp("timm"))


def _check_against_reference(bb, z_engine, z_plain, x, z64=None):
    z64 = float64_features(bb, x) if z64 is None else z64
    e_ref = float(rel_errors(z_plain, z64).max())
    bound = C_ORDER * e_ref + 8 * U32
    e_eng = rel_errors(z_engine, z64)
    assert float(e_eng.max()) <= bound, (float(e_eng.max()), e_ref)
    assert float(rel_errors(z_engine, z_plain).max()) <= (C_ORDER + 1) * e_ref + 8 * U32


@pytest.mark.parametrize("source", SOURCES)
def test_engine_equals_plain_forward(source, tmp_path):
    """channels_last forced (for the ViT too: its patch convolution then runs NHWC); "auto" picks the same for
    the CNNs and plain NCHW for the ViT (test_memory_format_auto_rule)."""
    bb = make_backbone(source, tmp_path)
    x = torch.rand(6, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        z_plain = bb.embed(x)
    ext = FeatureExtractor(bb.embed, max_batch=4, memory_format="channels_last")
    z = ext(x)
    assert z.shape == z_plain.shape and z.dtype == torch.float32
    _check_against_reference(bb, z, z_plain, x)


@pytest.mark.parametrize("source", ["timm", "open_clip"])
def test_memory_format_auto_rule(source, tmp_path, resnet10t):
    bb = resnet10t if source == "timm" else make_backbone(source, tmp_path)
    expected = "channels_last" if source == "timm" else "contiguous"  # CNN vs ViT (a single patch conv)
    assert FeatureExtractor(bb.embed).memory_format == expected
    assert resolve_memory_format("auto", None, None) == "contiguous"  # a plain function: nothing to know
    assert resolve_memory_format("channels_last", None, None) == "channels_last"
    assert FeatureExtractor(bb.embed, memory_format="contiguous").memory_format == "contiguous"


def test_chunking_exact_and_ordered():
    """An exact per-sample function (scaling by 2 is exact in binary floating point) gives bitwise identical
    results in the right order whatever the chunk size."""
    x = torch.randn(23, 3, 4, 4, generator=torch.Generator().manual_seed(0))
    fn = lambda t: t.flatten(1) * 2  # noqa: E731
    for b in (1, 3, 7, 23, 100):
        z = FeatureExtractor(fn, max_batch=b)(x)
        assert torch.equal(z, x.flatten(1) * 2)
    chunks = list(FeatureExtractor(fn, max_batch=10).iter_chunks(x))
    assert [c.shape[0] for c in chunks] == [10, 10, 3]
    assert torch.equal(torch.cat(chunks), x.flatten(1) * 2)


def test_chunking_invariance_on_a_network(resnet10t):
    bb = resnet10t
    x = torch.rand(5, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        z_plain = bb.embed(x)
    z64 = float64_features(bb, x)
    for b in (1, 2, 5):
        _check_against_reference(bb, FeatureExtractor(bb.embed, max_batch=b)(x), z_plain, x, z64)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"max_batch": 0}, "max_batch"),
        ({"max_batch": -3}, "max_batch"),
        ({"max_batch": 2.5}, "max_batch"),
        ({"max_batch": True}, "max_batch"),
        ({"memory_format": "nhwc"}, "memory_format"),
        ({"autocast": "int8"}, "autocast"),
        ({"precision": "int8"}, "precision"),
        ({"threads": 0}, "threads"),
        ({"compile": "yes"}, "compile"),
    ],
)
def test_bad_options(kwargs, match):
    with pytest.raises(ValueError, match=match):
        FeatureExtractor(lambda t: t.flatten(1), **kwargs)


def test_bad_calls():
    with pytest.raises(TypeError, match="callable"):
        FeatureExtractor("embed")
    ext = FeatureExtractor(lambda t: t.flatten(1))
    with pytest.raises(TypeError, match="torch.Tensor"):
        ext([[0.0]])
    with pytest.raises(TypeError, match="float"):
        ext(torch.zeros(2, 3, 4, 4, dtype=torch.uint8))
    with pytest.raises(TypeError, match="must return a tensor"):
        FeatureExtractor(lambda t: (t.flatten(1), None))(torch.zeros(2, 3, 4, 4))
    with pytest.raises(ValueError, match="batch of 2"):
        FeatureExtractor(lambda t: t.flatten(1)[:1])(torch.zeros(2, 3, 4, 4))


def test_inference_flag():
    lin = nn.Linear(12, 5)
    x = torch.randn(6, 3, 2, 2)
    z = FeatureExtractor(lambda t: lin(t.flatten(1)), inference=True)(x)
    assert z.is_inference() and not z.requires_grad
    w = torch.ones(5, requires_grad=True)
    with pytest.raises(RuntimeError):  # inference tensors cannot be saved for backward
        (z * w).sum().backward()
    z = FeatureExtractor(lambda t: lin(t.flatten(1)), inference=False)(x)
    assert not z.is_inference() and not z.requires_grad
    (z * w).sum().backward()  # no_grad outputs are ordinary tensors: usable in a later autograd graph
    assert torch.allclose(w.grad, z.sum(0))  # d/dw Σ z·w = Σ_i z_i: same float32 sum on both sides


def test_eval_mode_restored_and_running_stats_untouched():
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.AdaptiveAvgPool2d(1), nn.Flatten()).train()
    net[1].running_mean.fill_(0.3)
    before = net[1].running_mean.clone()
    x = torch.randn(5, 3, 8, 8)
    z = FeatureExtractor(net, memory_format="contiguous")(x)
    assert net.training and net[1].training  # modes restored
    assert torch.equal(net[1].running_mean, before)  # no BatchNorm drift
    with torch.no_grad():
        expected = net.eval()(x)
    assert torch.equal(z, expected)  # same kernels, same layout, same batch: bitwise equal
    assert FeatureExtractor(net.train(), eval_mode=False)(x).shape == (5, 4)


def test_attribute_pass_through_and_as_extractor(resnet10t):
    bb = resnet10t
    ext = as_extractor(bb.embed, max_batch=8, threads=None, autocast=None)
    assert (ext.mean, ext.std, ext.embed_dim) == (bb.mean, bb.std, bb.embed_dim)
    assert as_extractor(ext) is ext
    assert ext.max_batch == 8
    with pytest.raises(AttributeError):
        _ = ext.not_an_attribute
    with pytest.raises(AttributeError):
        _ = FeatureExtractor(lambda t: t).mean  # a plain function has no normalisation to report


def test_extract_loader(tmp_path):
    from torch.utils.data import DataLoader, TensorDataset

    x = torch.rand(11, 3, 8, 8)
    y = torch.arange(11)
    fn = lambda t: t.flatten(1) * 2  # noqa: E731
    z, (labels,) = FeatureExtractor(fn, max_batch=4).extract_loader(DataLoader(TensorDataset(x, y), batch_size=3))
    assert torch.equal(z, x.flatten(1) * 2) and torch.equal(labels, y)
    z2, rest = FeatureExtractor(fn).extract_loader([x[:5], x[5:]])
    assert torch.equal(z2, z) and rest == ()
    with pytest.raises(ValueError, match="empty"):
        FeatureExtractor(fn).extract_loader([])


def test_threads_set_once():
    prev = torch.get_num_threads()
    try:
        FeatureExtractor(lambda t: t.flatten(1), threads=1)
        assert torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(prev)


def test_bf16_error_within_derived_bound(resnet10t):
    """precision="bf16": autocast rounds each conv/linear layer's inputs and weights to 8 significant bits (u_bf16 = 2^-9)
    and accumulates in float32: each layer adds a relative error ≲ 2·u_bf16 (two rounded operands), and over L
    such layers the errors add, e ≤ 2·L·u_bf16 (layer gains of a BN-normalised net are O(1))."""
    bb = resnet10t
    x = torch.rand(6, 3, 32, 32, generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        z32 = bb.embed(x)
    layers = sum(isinstance(m, (nn.Conv2d, nn.Linear)) for m in bb.modules())
    z16 = FeatureExtractor(bb.embed, precision="bf16")(x)
    assert z16.dtype == torch.float32
    err = float(rel_errors(z16, z32).max())
    assert err <= 2 * layers * 2.0**-9
    assert err > 100 * U32  # the lever is active: far above float32 reordering noise


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA path: needs a GPU (not measured on this machine)")
def test_cuda_path_matches_cpu(tmp_path):  # pragma: no cover - no GPU in CI
    bb = make_backbone("timm", tmp_path)
    x = torch.rand(6, 3, 32, 32)
    with torch.no_grad():
        z_cpu = bb.embed(x)
    z = FeatureExtractor(bb.cuda().embed, device="cuda", precision="tf32")(x).cpu()
    # TF32 for CUDA matmuls and convolutions: 10-bit mantissa, the bf16 argument above with u = 2^-11
    layers = sum(isinstance(m, (nn.Conv2d, nn.Linear)) for m in bb.modules())
    assert float(rel_errors(z, z_cpu).max()) <= 2 * layers * 2.0**-11


def test_code_defaults_equal_the_yaml():
    """Defaults live once in configs/: the extractor block of configs/run_options/default.yaml (every comparison CLI's)
    equals the code defaults (null = the code default, e.g. max_batch = FORWARD_BATCH = synbench.batch_size = 256)."""
    import inspect
    from pathlib import Path

    from omegaconf import OmegaConf

    cfg = OmegaConf.load(Path(__file__).resolve().parents[2] / "configs" / "run_options" / "default.yaml")
    defaults = {k: p.default for k, p in inspect.signature(FeatureExtractor).parameters.items()}
    for key, value in OmegaConf.to_container(cfg.extractor).items():
        assert value is None or value == defaults[key], key
    assert defaults["max_batch"] == 256 and defaults["memory_format"] == "auto"
    assert defaults["compile"] is False and defaults["autocast"] is None and defaults["precision"] is None  # tf32
