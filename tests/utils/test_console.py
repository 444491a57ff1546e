"""src.utils.console: what a CLI prints (issue 25). Advertisements and known-harmless warnings are silenced inside
``quiet_cli`` only, and everything is restored after it; the first lines say what runs; the config goes to the log file."""

from __future__ import annotations

import logging
import subprocess
import sys
import warnings
from pathlib import Path

from src.utils.console import (
    ADVERTISEMENT_PREFIXES,
    announce_run,
    config_summary,
    log_config_to_files,
    quiet_cli,
    short_path,
)

ROOT = Path(__file__).resolve().parents[2]


def test_importing_the_console_module_changes_no_warning_filter_or_logger() -> None:
    code = (
        "import logging, warnings; import lightning\n"
        "before = (list(warnings.filters), [list(logging.getLogger(n).filters) for n in "
        "('lightning.pytorch.utilities.rank_zero', 'lightning.fabric.utilities.rank_zero')])\n"
        "import src.utils.console, src.utils.run_summary, src.utils.hparams\n"
        "after = (list(warnings.filters), [list(logging.getLogger(n).filters) for n in "
        "('lightning.pytorch.utilities.rank_zero', 'lightning.fabric.utilities.rank_zero')])\n"
        "print(before == after)"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "True", out.stderr


def test_quiet_cli_ignores_the_leafspec_warning_inside_only() -> None:
    message = "`isinstance(treespec, LeafSpec)` is deprecated, use `isinstance(treespec, TreeSpec)` instead."
    before = list(warnings.filters)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        with quiet_cli():
            warnings.warn(message, FutureWarning, stacklevel=1)
            warnings.warn("something the user must see", UserWarning, stacklevel=1)
        warnings.warn(message, FutureWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == ["something the user must see", message]
    assert warnings.filters == before


def test_quiet_cli_drops_lightning_advertisements_but_keeps_its_other_messages() -> None:
    import lightning.pytorch  # noqa: F401  (configures its loggers, as in a run)

    lg = logging.getLogger("lightning.pytorch.utilities.rank_zero")
    tip = f"{ADVERTISEMENT_PREFIXES[0]} For seamless cloud logging, try installing [litlogger](https://pypi.org/)"
    seen: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    lg.addHandler(handler)
    level = lg.level
    lg.setLevel(logging.INFO)  # setLevel, not .level =: it clears the loggers' isEnabledFor caches
    try:
        with quiet_cli():
            lg.info(tip)
            lg.info("GPU available: False, used: False")
        lg.info(tip)  # outside: Lightning's own behaviour is untouched
    finally:
        lg.removeHandler(handler)
        lg.setLevel(level)
    assert seen == ["GPU available: False, used: False", tip]
    assert lg.filters == []


def test_quiet_cli_drops_open_clips_build_steps_but_keeps_its_warnings() -> None:
    """open_clip logs six INFO lines per model built through the root logger: dropped inside, its warnings kept,
    other modules' INFO kept, nothing left on the root logger after."""
    root = logging.getLogger()
    seen: list[str] = []
    handler = logging.Handler(logging.INFO)
    handler.emit = lambda record: seen.append(record.getMessage())  # type: ignore[method-assign]
    root.addHandler(handler)
    level = root.level
    root.setLevel(logging.INFO)

    def record(msg: str, lvl: int, path: str) -> None:
        rec = root.makeRecord("root", lvl, path, 1, msg, (), None)
        if root.filter(rec):
            root.handle(rec)

    clip = "/site-packages/open_clip/factory.py"
    try:
        with quiet_cli():
            record("Parsing model identifier. Schema: None, Identifier: RN50", logging.INFO, clip)
            record("No pretrained weights loaded for model 'RN50'.", logging.WARNING, clip)
            record("our own line", logging.INFO, "/repo/src/x.py")
        record("Parsing model identifier (outside)", logging.INFO, clip)
    finally:
        root.removeHandler(handler)
        root.setLevel(level)
    assert seen == [
        "No pretrained weights loaded for model 'RN50'.",
        "our own line",
        "Parsing model identifier (outside)",
    ]
    assert root.filters == []


def test_quiet_cli_works_as_a_decorator_and_restores_after_an_exception() -> None:
    before = list(warnings.filters)

    @quiet_cli()
    def job(fail: bool) -> int:
        if fail:
            raise RuntimeError("boom")
        return 1

    assert job(False) == 1
    try:
        job(True)
    except RuntimeError:
        pass
    assert warnings.filters == before
    assert logging.getLogger("lightning.pytorch.utilities.rank_zero").filters == []


def test_config_summary_is_one_line_of_what_runs() -> None:
    cfg = {
        "task_name": "train",
        "seed": 0,
        "train": True,
        "backbone": {"name": "timm:test_efficientnet"},
        "model": {"_target_": "repbench.models.RobustLinearProbe"},
        "data": {"_target_": "repbench.data.DigitsDataModule", "image_size": 16},
        "trainer": {"max_epochs": 1},
    }
    assert config_summary(cfg) == (
        "RobustLinearProbe · backbone timm:test_efficientnet · DigitsDataModule 16 px · 1 epoch · seed 0"
    )
    ev = {**cfg, "task_name": "eval", "ckpt_path": "/x/last.ckpt"}
    del ev["train"]
    assert config_summary(ev) == "DigitsDataModule 16 px · checkpoint /x/last.ckpt · seed 0"


def test_the_resolved_config_goes_to_the_log_file_only(tmp_path, capsys) -> None:
    from omegaconf import OmegaConf

    lg = logging.getLogger("repbench.test_console")
    lg.propagate = False
    console, file = logging.StreamHandler(sys.stdout), logging.FileHandler(tmp_path / "train.log")
    lg.addHandler(console)
    lg.addHandler(file)
    try:
        assert log_config_to_files("model:\n  lr: 0.003\n", lg) == 1
    finally:
        lg.removeHandler(console)
        lg.removeHandler(file)
        file.close()
    assert "lr: 0.003" in (tmp_path / "train.log").read_text()
    assert "lr: 0.003" not in capsys.readouterr().out

    # announce_run: a few lines naming the run folder and the config's file, never the YAML
    cfg = OmegaConf.create({"task_name": "train", "seed": 3, "paths": {"output_dir": str(tmp_path)}})
    records: list[str] = []
    handler = logging.Handler()
    handler.emit = lambda record: records.append(record.getMessage())  # type: ignore[method-assign]
    repbench = logging.getLogger("repbench")
    repbench.addHandler(handler)
    level = repbench.level
    repbench.setLevel(logging.INFO)
    try:
        announce_run(cfg)
    finally:
        repbench.removeHandler(handler)
        repbench.setLevel(level)
    assert records[0].startswith(f"RepBench train → {short_path(tmp_path)}") and "--cfg job" in records[0]
    assert records[1:] == ["seed 3"]


def test_lightnings_worker_advice_is_dropped_for_in_process_data_only(monkeypatch) -> None:
    """On a machine with more than two cores Lightning advises workers for every loader; RepBench's in-memory data
    sets load in-process on purpose (num_workers=0), a data module with workers keeps the advice."""
    from types import SimpleNamespace

    import lightning.fabric.utilities.data as fabric_data
    from lightning.pytorch.trainer.connectors import data_connector
    from torch.utils.data import DataLoader

    from src.utils.console import ignore_worker_advice

    monkeypatch.setattr(fabric_data, "_num_cpus_available", lambda: 16)
    trainer = SimpleNamespace(num_devices=1)
    loader = DataLoader(list(range(4)), num_workers=0)
    for workers, shown in ((0, 0), (1, 1)):
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            ignore_worker_advice(SimpleNamespace(num_workers=workers))
            data_connector._worker_check(trainer, loader, "train_dataloader")
        assert sum("does not have many workers" in str(w.message) for w in seen) == shown
