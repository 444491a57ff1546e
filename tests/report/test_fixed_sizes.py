"""A backbone with a fixed input size (a ViT's positional embedding) fed other sizes by the report's parts is refused
before any work, naming each part's setting and the fix — it used to fail at DivergenceRadius, after SynBench and the
baselines had run (timm:vit_base_patch16_224 with the default dr_image_size=64)."""

from __future__ import annotations

import pytest
import torch

from src.report.audit import AuditConfig, check_fixed_sizes, part_image_sizes, run_audit
from tests.report.test_report_cli import TINY


def test_sizes_per_part_and_the_message() -> None:
    cfg = AuditConfig(input_size=None, dr_image_size=64, tp_image_size=224)
    sizes = part_image_sizes(cfg, {}, None)
    assert sizes == {"divergence_radius": 64, "task_prior": 224}  # SynBench at native size: any backbone is fed its own
    check_fixed_sizes(["a", "b"], [None, (64, 64)], {"divergence_radius": 64})  # fine: nothing to say
    with pytest.raises(ValueError, match=r"b accepts only 224x224 images but the report feeds it dr_image_size=64 "
                                         r"\(divergence_radius\); set dr_image_size=224"):  # fmt: skip
        check_fixed_sizes(["a", "b"], [None, (224, 224)], sizes)


def test_a_fixed_size_vit_is_refused_before_any_part_runs(tmp_path, monkeypatch) -> None:
    import src.methods.audit_parts as parts
    from src.report.__main__ import run
    from tests.cli.conftest import compose_cfg

    def refuse(*args, **kwargs):
        raise AssertionError("a part ran")

    for name in ("synbench_run", "baselines_run", "divergence_radius_run", "task_prior_run"):
        monkeypatch.setattr(parts, name, refuse)
    net = "{name:timm:vit_tiny_patch16_224,pretrained:false}"  # accepts 224 px only
    cfg = compose_cfg("report.yaml", [f"backbones=[{net}]", *TINY], tmp_path)
    with pytest.raises(ValueError, match=r"accepts only 224x224 images but the report feeds it input_size=16 "
                                         r"\(synbench\), input_size=16 \(baselines\), dr_image_size=16"):  # fmt: skip
        run(cfg)
    # the library call too, with every part's fix in one sentence
    x, y = torch.rand(4, 3, 16, 16), torch.arange(4) % 2
    config = AuditConfig(input_size=16, tp_image_size=16, dr_image_size=16)
    fix = r"set downstream\.image_size=224 dr_image_size=224 input_size=224 tp_image_size=224"
    with pytest.raises(ValueError, match=fix):
        run_audit(
            [{"name": "timm:vit_tiny_patch16_224", "pretrained": False}], config, downstream={"t": ((x, y), (x, y))}
        )
