"""The named SynBench budgets are stated once (SYNBENCH_BUDGETS of src/synbench/config.py) and each equals the values
its users stated before the table (hard-coded here as the regression reference); the callback, epsilon=auto, the
monitoring study, the SynBench CLI, the report and the YAML blocks that repeat a budget use it."""

from __future__ import annotations

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf

from src.synbench import SYNBENCH_BUDGETS, SynBenchConfig, synbench_budget
from src.synbench.__main__ import protocol_fields
from src.utils.resources import config_dir

CONFIGS = config_dir()
S9 = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5]
S6 = [0.5, 1.0, 1.5, 2.0, 3.0, 4.0]
EPS5 = [0.0, 0.2, 0.4, 0.6, 0.8]
# the values before the table, where each was stated
BEFORE = {
    "official": {},  # SynBenchConfig() defaults
    "cpu": {"s_values": S9, "n_train": 2048, "n_test": 1024},  # configs/synbench.yaml reduced:
    "report": {"s_values": S9, "n_train": 2048, "n_test": 1024, "eps": [0.0, 0.2, 0.4]},  # audit.REDUCED_SYNBENCH
    "callback": {  # src/callbacks/synbench_callback.py CALLBACK_BUDGET, configs/callbacks/synbench.yaml
        "s_values": S6, "n_train": 2048, "n_test": 512, "eps": EPS5, "a_T": [0.7], "normalization": "backbone",
        "eig_tol_mode": "relative",
    },
    "monitor": {  # src/monitor_study/runner.py MONITORS over the callback budget, configs/experiment/monitor_*.yaml
        "s_values": [1.0, 2.0, 3.0, 4.0], "n_train": 512, "n_test": 256, "eps": [0.0], "a_T": [0.6],
        "normalization": "backbone", "eig_tol_mode": "relative",
    },
    "auto_epsilon": {"s_values": S6, "n_train": 2048, "n_test": 512, "eps": EPS5, "a_T": [0.7, 0.6]},
}  # fmt: skip


def _compose(name: str, overrides: list[str] | None = None):
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONFIGS)):
        cfg = compose(config_name=name, overrides=overrides or [])
    GlobalHydra.instance().clear()
    return cfg


def test_each_budget_is_the_values_used_before() -> None:
    assert list(SYNBENCH_BUDGETS) == list(BEFORE)
    for name, before in BEFORE.items():
        assert synbench_budget(name) == before, name
        assert list(synbench_budget(name)) == list(before), name  # key order too
        assert SynBenchConfig.budget(name) == SynBenchConfig(**before), name
    assert SynBenchConfig.budget("official") == SynBenchConfig()
    # the three sample budgets stay different: cpu/report 9 x (2048 + 1024), callback/auto 6 x (2048 + 512), monitor
    assert len({(len(b.get("s_values", ())), b.get("n_test")) for b in BEFORE.values() if b}) == 3


def test_budgets_are_read_only_and_a_fresh_copy_is_handed_out() -> None:
    with pytest.raises(TypeError):
        SYNBENCH_BUDGETS["cpu"]["n_train"] = 1  # type: ignore[index]
    mine = synbench_budget("callback")
    mine["s_values"].append(9.0)
    assert synbench_budget("callback")["s_values"] == S6
    assert SynBenchConfig.budget("report", n_train=8192, n_test=None).n_train == 8192  # None: the budget's value
    assert SynBenchConfig.budget("report", n_test=None).n_test == 1024
    with pytest.raises(ValueError, match="unknown SynBench budget 'tiny'; the budgets are official, cpu, report"):
        SynBenchConfig.budget("tiny")


def test_the_users_read_their_budget() -> None:
    from src.callbacks import SynBenchCallback
    from src.callbacks.synbench_callback import callback_budget
    from src.models.auto_epsilon import auto_epsilon_defaults
    from src.monitor_study.runner import MONITORS
    from src.report.audit import AuditConfig

    assert callback_budget() == BEFORE["callback"] and SynBenchCallback().config == SynBenchConfig.budget("callback")
    assert auto_epsilon_defaults() == {"input_size": 64, "scale": 1.0, **BEFORE["auto_epsilon"]}
    assert SynBenchCallback(**MONITORS["synbench"][1]).config == SynBenchConfig.budget("monitor")
    assert AuditConfig().synbench == SynBenchConfig.budget("report")


def test_the_synbench_cli_resolves_its_budget() -> None:
    official = {"eps": [round(k * 0.1, 10) for k in range(9)], "a_T": [0.7, 0.75, 0.8, 0.85, 0.9]}
    fields, size = protocol_fields(_compose("synbench.yaml"))
    assert SynBenchConfig(**fields) == SynBenchConfig.budget("cpu", **official) and size == 64
    # the documented overrides (README, docs/synbench.md) still set the budget's fields
    cfg = _compose("synbench.yaml", ["reduced.n_train=128", "reduced.s_values=[0.5,1.0,2.0]", "synbench.eps=[0.0]"])
    fields, _ = protocol_fields(cfg)
    assert SynBenchConfig(**fields) == SynBenchConfig.budget("cpu", n_train=128, s_values=(0.5, 1.0, 2.0), eps=(0.0,))
    fields, _ = protocol_fields(_compose("synbench.yaml", ["budget=report"]))  # the synbench: block still on top
    assert SynBenchConfig(**fields) == SynBenchConfig.budget("report", **official)
    with pytest.raises(ValueError, match="budget must be one of official, cpu, report.*got 'tiny'"):
        protocol_fields(_compose("synbench.yaml", ["budget=tiny"]))


def test_the_yaml_copies_equal_the_table() -> None:
    """Where Hydra instantiates a class with a budget (its arguments are literal), the YAML repeats the table."""
    train = _compose("train.yaml", ["callbacks=synbench", "experiment=monitor_pretraining"])
    monitor = OmegaConf.to_container(train.callbacks.synbench.config, resolve=True)
    assert SynBenchConfig(**monitor) == SynBenchConfig.budget("monitor")
    simclr = _compose("train.yaml", ["experiment=monitor_simclr"])
    assert SynBenchConfig(**simclr.callbacks.synbench.config) == SynBenchConfig.budget("monitor")
    callback = OmegaConf.load(CONFIGS / "callbacks" / "synbench.yaml").synbench.config
    assert OmegaConf.to_container(callback) == synbench_budget("callback")
    report = OmegaConf.to_container(OmegaConf.load(CONFIGS / "report.yaml").synbench)
    assert SynBenchConfig(**report) == SynBenchConfig.budget("report")
    auto = dict(OmegaConf.to_container(OmegaConf.load(CONFIGS / "model" / "robust_probe.yaml").auto_epsilon))
    assert (auto.pop("input_size"), auto.pop("scale")) == (64, 1.0) and auto == synbench_budget("auto_epsilon")
