"""The audit loop's cache: a budget equal to the main n_train is the main run (one entry, reused)."""

from __future__ import annotations

from src.report.audit import AuditConfig, run_audit
from src.synbench import SynBenchConfig


def test_budget_equal_to_the_main_budget_reuses_its_entry(tmp_path) -> None:
    cfg = AuditConfig(
        parts=("synbench",),
        input_size=8,
        synbench=SynBenchConfig(s_values=(1.0,), n_train=32, n_test=16, eps=(0.0,)),
        budgets=(32, 48),
    )
    net = [{"name": "timm:test_efficientnet", "pretrained": False}]
    res = run_audit(net, cfg, cache_dir=str(tmp_path))
    v = res.values["timm:test_efficientnet"]
    assert res.cached["timm:test_efficientnet"] == {"synbench": False, "synbench@32": True, "synbench@48": False}
    assert v["synbench@32"] == v["synbench"] and v["synbench@48"] != v["synbench"]
    assert len(list((tmp_path / "synbench").iterdir())) == 2
