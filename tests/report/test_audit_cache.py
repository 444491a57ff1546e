"""The audit loop's cache: a budget equal to the main n_train is the main run (one entry, reused); an edited entry is
recomputed; a broken cache_dir and bad settings are refused before any work (cases R04, R05, R09, R10, R11, R26, R33
of the reliability audit)."""

from __future__ import annotations

import json
import math

import pytest

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


NET = [{"name": "timm:test_efficientnet", "pretrained": False}]
TINY_SYNBENCH = AuditConfig(
    parts=("synbench",), input_size=8, synbench=SynBenchConfig(s_values=(1.0,), n_train=32, n_test=16, eps=(0.0,))
)


@pytest.mark.parametrize("edit", [lambda e: 5, lambda e: {"seconds": 1.0}, lambda e: {**e, "seconds": "fast"}])
def test_r04_r05_r09_an_edited_entry_is_recomputed_not_a_crash(tmp_path, caplog, edit) -> None:
    """The cases' reproduction at unit size: a filled cache, one entry's value edited by hand, the same audit again."""
    first = run_audit(NET, TINY_SYNBENCH, cache_dir=str(tmp_path))
    (path,) = (tmp_path / "synbench").iterdir()
    entry = json.loads(path.read_text())
    path.write_text(json.dumps({**entry, "value": edit(entry["value"])}))
    again = run_audit(NET, TINY_SYNBENCH, cache_dir=str(tmp_path))
    assert str(path) in caplog.text and "recomputed" in caplog.text
    assert again.cached["timm:test_efficientnet"] == {"synbench": False}
    untimed = lambda v: {k: x for k, x in v["timm:test_efficientnet"]["synbench"].items() if k != "timings"}  # noqa: E731
    assert untimed(again.values) == untimed(first.values)  # recomputed: the same numbers (seeded), other timings
    assert json.loads(path.read_text())["value"]["value"] == again.values["timm:test_efficientnet"]["synbench"]


def test_r10_r11_a_broken_cache_dir_is_refused_before_any_backbone(tmp_path, monkeypatch) -> None:
    def refuse(*args, **kwargs):
        raise AssertionError("a backbone was built before the cache_dir was checked")

    monkeypatch.setattr("src.report.audit.build_backbone", refuse)
    monkeypatch.setattr("src.report.audit.check_buildable", refuse)
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(NotADirectoryError, match=r"cache_dir=.*a_file"):
        run_audit(NET, TINY_SYNBENCH, cache_dir=str(blocker))
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "synbench").write_text("x")
    with pytest.raises(NotADirectoryError, match=r"the synbench folder of cache_dir"):
        run_audit(NET, TINY_SYNBENCH, cache_dir=str(tmp_path / "cache"))


# --- R33: baselines.eps <= 0 is a configuration error, refused before any work (never a per-backbone n/a) ----------
@pytest.mark.parametrize("eps", [(0,), (-1.0,), (1.0, math.nan), (), ("x",), (True,)])
def test_r33_baseline_eps_must_be_positive_and_is_refused_up_front(eps) -> None:
    with pytest.raises(ValueError, match=r"baseline_eps \(python -m src.report: baselines\.eps\) must be .* > 0"):
        AuditConfig(baseline_eps=eps)
    assert AuditConfig(baseline_eps=(1, 0.5)).baseline_eps == (1.0, 0.5)


def test_r33_part_baselines_raises_a_configuration_error_instead_of_filing_it(tmp_path) -> None:
    """Called directly with a bad ε, the part raises (before it embeds anything: no backbone needed) instead of
    returning an ``errors`` entry that the audit would cache and the report would show as n/a."""
    from types import SimpleNamespace

    from src.methods import PartContext
    from src.methods.audit_parts import baselines_run

    audit = SimpleNamespace(baseline_eps=(0.0,), baseline_s=1.0, baselines=("val_loss", "sdl"), input_size=8)
    with pytest.raises(ValueError, match=r"baselines\.eps"):
        baselines_run(None, PartContext(SynBenchConfig(), audit))


# --- R26: tp_images beyond the bundled digits names the key ----------------------------------------------------------
def test_r26_tp_images_beyond_the_bundled_digits_names_the_key() -> None:
    with pytest.raises(
        ValueError, match=r"tp_images must be an integer in \[2, 1797\] .*got 100000; set tp_images<=1797"
    ):
        AuditConfig(tp_images=100000)
    assert AuditConfig(tp_images=1797).tp_images == 1797
