"""Reliability of backbones (issue 6, item 13): eval mode by default, NaN/float64 images, native sizes, and clear
errors for bad weights (unknown torchvision tag, corrupt files, checkpoints of another architecture)."""

from __future__ import annotations

import pytest
import torch

from src.backbones import check_images, create_backbone
from src.backbones.weights import CorruptCheckpointError


def _bn_stats(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in module.state_dict().items() if "running_" in k or "num_batches_tracked" in k}


def test_create_backbone_returns_eval_mode_and_embed_keeps_bn_statistics() -> None:
    """README's ``z = bb.embed(x)`` right after ``create_backbone``: no BatchNorm update, per-sample features."""
    bb = create_backbone("embedded:efficientnet_lite0")
    assert not bb.training and not any(m.training for m in bb.modules())
    before = _bn_stats(bb)
    assert len(before) > 0
    x = torch.rand(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        z = bb.embed(x)
        z0 = bb.embed(x[:1])
    after = _bn_stats(bb)
    for k, v in before.items():
        torch.testing.assert_close(after[k], v, rtol=0, atol=0, msg=k)  # untouched, bit for bit
    # eval-mode features do not depend on the rest of the batch; the only difference is the summation order of
    # batched vs single-sample kernels: float32 rounding, ~1e-6 relative, far below the ~1 change of train mode
    torch.testing.assert_close(z0, z[:1], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
def test_non_finite_pixels_are_refused(bad: float) -> None:
    x = torch.rand(2, 3, 8, 8)
    x[1, 2, 3, 4] = bad
    with pytest.raises(ValueError, match="non-finite"):
        check_images(x)
    bb = create_backbone("timm:test_efficientnet", pretrained=False)
    with pytest.raises(ValueError, match="non-finite"):
        bb.embed(x)


def test_float64_images_are_cast_to_the_network_dtype() -> None:
    torch.manual_seed(0)
    bb = create_backbone("timm:test_efficientnet", pretrained=False)
    x = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        z32 = bb.embed(x)
        z64 = bb.embed(x.double())
    assert z64.dtype == torch.float32
    # float32 -> float64 -> float32 is exact, so the network sees identical inputs: identical outputs
    torch.testing.assert_close(z64, z32, rtol=0, atol=0)
    xd = x.double().requires_grad_(True)
    bb.embed(xd).square().sum().backward()
    assert xd.grad is not None and xd.grad.dtype == torch.float64 and xd.grad.abs().sum() > 0


@pytest.mark.parametrize(
    "name, opts",
    [("timm:vit_tiny_patch16_224", {"pretrained": False}), ("open_clip:ViT-B-32", {"pretrained": None})],
)
def test_fixed_size_backbones_name_their_native_size(name: str, opts: dict) -> None:
    bb = create_backbone(name, **opts)
    assert bb.fixed_input_size
    with pytest.raises(ValueError, match=r"native input size 224x224.*resize"):
        bb.embed(torch.rand(1, 3, 32, 32))


def test_dynamic_size_vit_and_cnns_accept_any_size() -> None:
    vit = create_backbone("timm:test_vit", pretrained=False)  # built with dynamic_img_size=True
    cnn = create_backbone("timm:test_efficientnet", pretrained=False)
    assert not vit.fixed_input_size and not cnn.fixed_input_size
    with torch.no_grad():
        assert cnn.embed(torch.rand(1, 3, 40, 40)).shape == (1, cnn.embed_dim)


def test_unknown_torchvision_weights_list_the_valid_names() -> None:
    with pytest.raises(ValueError, match=r"'NOPE'.*IMAGENET1K_V1"):
        create_backbone("torchvision:mobilenet_v3_small", pretrained="NOPE")


def _corrupt_files(tmp_path, good: dict) -> list:
    real = tmp_path / "real.pth"
    torch.save(good, real)
    data = real.read_bytes()
    files = {
        "empty.pth": b"",
        "text.pth": b"not a checkpoint at all\n",
        "truncated.pth": data[: len(data) // 2],
        "zeros.pth": bytes(4096),
        "bad.safetensors": b"\x08\x00\x00\x00\x00\x00\x00\x00{broken}",
    }
    out = []
    for name, content in files.items():
        (tmp_path / name).write_bytes(content)
        out.append(tmp_path / name)
    return out


@pytest.mark.parametrize(
    "name, opts",
    [
        ("timm:test_efficientnet", {"pretrained": False}),
        ("embedded:efficientnet_lite0", {}),
        ("torchvision:mobilenet_v3_small", {"pretrained": False}),
    ],
)
def test_corrupt_checkpoint_file_gives_a_clear_error(tmp_path, name: str, opts: dict) -> None:
    good = create_backbone("timm:test_efficientnet", pretrained=False).model.state_dict()
    for path in _corrupt_files(tmp_path, good):
        with pytest.raises(CorruptCheckpointError, match=r"cannot read checkpoint .*corrupt") as info:
            create_backbone(name, checkpoint_path=str(path), **opts)
        assert str(path) in str(info.value)
        assert isinstance(info.value, ValueError)


def test_embedded_checkpoint_with_wrong_keys(tmp_path) -> None:
    other = tmp_path / "other_arch.pth"
    torch.save(create_backbone("timm:test_efficientnet", pretrained=False).model.state_dict(), other)
    with pytest.raises(ValueError, match=r"does not match the model: .*missing key"):
        create_backbone("embedded:efficientnet_lite0", checkpoint_path=str(other))
    # lukemelas layout with a foreign top-level key: named, not a bare KeyError
    from src.backbones.embedded import embedded_checkpoint_path
    from src.backbones.weights import load_state_dict

    sd = load_state_dict(embedded_checkpoint_path("efficientnet_lite0"))
    sd["_extra_layer.weight"] = torch.zeros(1)
    renamed = tmp_path / "extra.pth"
    torch.save(sd, renamed)
    with pytest.raises(ValueError, match=r"unexpected key.*_extra_layer"):
        create_backbone("embedded:efficientnet_lite0", checkpoint_path=str(renamed))
    # lite1 weights into lite0: another variant
    sd1 = load_state_dict(embedded_checkpoint_path("efficientnet_lite1"))
    lite1 = tmp_path / "lite1.pth"
    torch.save(sd1, lite1)
    with pytest.raises(ValueError, match="another EfficientNet variant|does not match"):
        create_backbone("embedded:efficientnet_lite0", checkpoint_path=str(lite1))


def test_torchvision_checkpoint_of_another_model(tmp_path) -> None:
    other = tmp_path / "resnet.pth"
    torch.save(create_backbone("timm:test_efficientnet", pretrained=False).model.state_dict(), other)
    with pytest.raises(ValueError, match="does not match the model"):
        create_backbone("torchvision:mobilenet_v3_small", pretrained=False, checkpoint_path=str(other))
