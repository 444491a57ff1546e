"""The embedded EfficientNet-Lite weights are real ImageNet weights, with the right preprocessing."""

from __future__ import annotations

import pytest
import torch


def _top5(backbone, image) -> list[str]:
    import timm
    from PIL import Image

    x = backbone.eval_transform()(Image.fromarray(image))[None]
    assert 0.0 <= float(x.min()) and float(x.max()) <= 1.0 and x.shape[-1] == backbone.input_size[-1]
    with torch.no_grad():
        idx = backbone.classify(x)[0].topk(5).indices.tolist()
    info = timm.data.ImageNetInfo()
    return [info.index_to_description(i) for i in idx]


def test_lite0_sees_a_cat_in_chelsea(lite0) -> None:
    import skimage.data

    top5 = _top5(lite0, skimage.data.chelsea())
    assert any(c in " ".join(top5) for c in ("tiger cat", "Egyptian cat", "tabby")), top5


def test_lite0_sees_espresso_in_coffee(lite0) -> None:
    import skimage.data

    assert any("espresso" in c or "cup" in c for c in _top5(lite0, skimage.data.coffee()))


@pytest.mark.parametrize("variant, size", [("efficientnet_lite1", 240), ("efficientnet_lite2", 260)])
def test_larger_variants_load_strictly_and_see_the_cat(variant: str, size: int) -> None:
    import skimage.data

    from src.backbones import create_backbone

    bb = create_backbone(f"embedded:{variant}").eval()
    assert bb.input_size == (3, size, size) and bb.embed_dim == 1280
    assert "cat" in " ".join(_top5(bb, skimage.data.chelsea())[:3])


def test_key_conversion_covers_every_tensor() -> None:
    import timm

    from src.backbones.embedded import convert_lukemelas_state_dict, embedded_checkpoint_path
    from src.backbones.weights import load_state_dict

    model = timm.create_model("tf_efficientnet_lite0")
    converted = convert_lukemelas_state_dict(load_state_dict(embedded_checkpoint_path("efficientnet_lite0")), model)
    assert set(converted) == set(model.state_dict())
    for k, v in model.state_dict().items():
        assert converted[k].shape == v.shape, k
