"""One backbone-list vocabulary for every CLI and compare_backbones (src.backbones.spec)."""

from __future__ import annotations

import pytest
import torch
from omegaconf import OmegaConf

from src.backbones.spec import backbone_labels, backbone_list, check_buildable, spec_name


def test_names_and_mappings_normalise_to_one_form() -> None:
    cfg = OmegaConf.create({"b": ["x:a", {"name": "x:b", "pretrained": False}]})
    assert backbone_list(cfg.b) == [{"name": "x:a"}, {"name": "x:b", "pretrained": False}]
    assert [spec_name(s) for s in backbone_list(["x:a", {"name": "x:b"}])] == ["x:a", "x:b"]


@pytest.mark.parametrize("bad", ["embedded:efficientnet_lite0", [], {"name": "x:a"}, [3], [{"pretrained": True}], None])
def test_bad_lists_are_refused_with_the_fix(bad) -> None:
    with pytest.raises(ValueError, match=r"backbones(\[0\])? must be .*e\.g\. \[embedded:efficientnet_lite0"):
        backbone_list(bad)


def test_labels_tell_same_named_entries_apart_and_refuse_exact_duplicates() -> None:
    specs = backbone_list(["x:a", {"name": "x:a", "pretrained": False}, "x:b"])
    assert backbone_labels(specs) == ["x:a", "x:a[pretrained=False]", "x:b"]
    with pytest.raises(ValueError, match=r"lists \['x:b'\] more than once"):
        backbone_labels(backbone_list(["x:b", "x:b"]))


def test_check_buildable_fails_early_and_leaves_the_global_generator_alone() -> None:
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    check_buildable(backbone_list([{"name": "timm:test_efficientnet", "pretrained": False}]))
    assert torch.equal(torch.rand(3), expected)  # random-weight builds afterwards see the same stream
    with pytest.raises(Exception, match="unknown|not|Unknown"):
        check_buildable(backbone_list(["nosuchsource:model"]))
