"""The report CLIs (``python -m src.synbench``, ``src.divergence_radius``, ``src.task_prior``), in-process: bad settings and
unwritable output directories are refused before any backbone is built, naming the key and the fix; broken row files
of ``aggregate=<dir>`` are named; result tables are shown once."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from src.divergence_radius.report import digits_split
from src.synbench.compare import compare_backbones
from src.task_prior.report import collect_rows
from src.utils.run_dir import check_writable_dir

from .conftest import compose_cfg


def _run(module: str):
    """The ``run(cfg)`` of a report CLI."""
    import importlib

    return importlib.import_module(f"src.{module}.__main__").run


@pytest.fixture
def no_backbone(monkeypatch):
    """Building a backbone is the first piece of work: fail the test if a refused run gets there."""

    import src.models.base  # noqa: F401  (imported before the patch: its `create_backbone` stays the real one)

    def refuse(*args, **kwargs):
        raise AssertionError("a backbone was built: the bad setting was not refused first")

    monkeypatch.setattr("src.backbones.create_backbone", refuse)
    monkeypatch.setattr("src.backbones.spec.create_backbone", refuse)  # build_backbone: every CLI's one builder
    monkeypatch.setattr("src.models.base.build_backbone", refuse)


SYNBENCH = ["backbones=[{name:timm:test_efficientnet,pretrained:false}]", "progress=false"]
SYNBENCH_TINY = SYNBENCH + [
    "input_size=16",
    "reduced.s_values=[1.0,3.0]",
    "reduced.n_train=64",
    "reduced.n_test=32",
    "synbench.eps=[0.0,0.4]",
    "synbench.a_T=[0.7]",
]
ROBUSTNESS = [
    'backbones=[{name: "timm:test_efficientnet", pretrained: false}]',
    "image_size=16",
    "divergence_radius.m=1",
    "divergence_radius.perturbations=[brightness]",
    "divergence_radius.chunk_size=4",
]
TASKPRIOR = [
    'backbones=[{name: "timm:test_vit", pretrained: false}]',
    'task_prior.prior_backbone={name: "timm:test_efficientnet", pretrained: false}',
    "data.num_images=40",
    "data.image_size=16",
    "task_prior.epochs=5",
    "task_prior.num_tasks=4",
    "progress=false",
]


# --- SC04: input_size=0 silently ran at the backbone's native size ---------------------------------------------


def test_sc04_synbench_input_size_zero_is_refused(tmp_path, no_backbone) -> None:
    cfg = compose_cfg("synbench.yaml", SYNBENCH + ["input_size=0"], tmp_path)
    with pytest.raises(
        ValueError, match=r"input_size must be an integer >= 1 .*got 0 \(int\); set input_size=null for each"
    ):
        _run("synbench")(cfg)
    assert not (tmp_path / "synbench.md").exists()
    with pytest.raises(ValueError, match="input_size must be an integer >= 1"):
        compare_backbones(["timm:test_efficientnet"], input_size=0)  # the library call too, before building


def test_sc04_synbench_input_size_null_means_native(tmp_path, monkeypatch) -> None:
    seen = []
    monkeypatch.setattr("src.synbench.compare.synbench", lambda fn, input_shape, **kw: seen.append(input_shape))
    monkeypatch.setattr("src.synbench.compare.comparison_report", lambda results: results)  # no real results here
    tiny = [{"name": "timm:test_efficientnet", "pretrained": False}]
    compare_backbones(tiny, {"n_train": 8}, input_size=None)
    compare_backbones(tiny, {"n_train": 8}, input_size=24)
    assert seen == [(3, 160, 160), (3, 24, 24)]  # timm's test_efficientnet is native 160 px


# --- RC03 / RC04 / RC05: n_test < 2 and negative sizes ------------------------------------------------------------


@pytest.mark.parametrize("n_test", [0, 1])
def test_rc03_rc04_robustness_n_test_below_two_is_refused_first(tmp_path, no_backbone, n_test) -> None:
    cfg = compose_cfg("divergence_radius.yaml", ROBUSTNESS + ["n_train=200", f"n_test={n_test}"], tmp_path)
    with pytest.raises(ValueError, match=rf"n_test must be >= 2, got {n_test}: the robustness -> ACC_p regression"):
        _run("divergence_radius")(cfg)


def test_rc05_negative_sizes_are_refused(tmp_path, no_backbone) -> None:
    with pytest.raises(ValueError, match=r"n_train must be >= 0 .*got -1"):
        digits_split(16, -1, 5)
    with pytest.raises(ValueError, match=r"n_test must be >= 0 .*got -3"):
        digits_split(16, 10, -3)
    with pytest.raises(ValueError, match=r"n_train \+ n_test = 1790 \+ 10 is too many"):
        digits_split(16, 1790, 10)
    cfg = compose_cfg("divergence_radius.yaml", ROBUSTNESS + ["n_train=-1", "n_test=5"], tmp_path)
    with pytest.raises(ValueError, match=r"n_train must be >= 0"):
        _run("divergence_radius")(cfg)


def test_robustness_linear_probe_needs_training_images(tmp_path, no_backbone) -> None:
    cfg = compose_cfg("divergence_radius.yaml", ROBUSTNESS + ["n_train=0", "n_test=5"], tmp_path)
    with pytest.raises(ValueError, match=r"classifier=linear fits a probe on n_train .* >= 2, got 0"):
        _run("divergence_radius")(cfg)


# --- TC12: data.image_size=0 ----------------------------------------------------------------------------------------


def test_tc12_taskprior_image_size_zero_names_the_key(tmp_path, no_backbone) -> None:
    cfg = compose_cfg("task_prior.yaml", TASKPRIOR + ["data.image_size=0"], tmp_path)
    with pytest.raises(ValueError, match=r"data\.image_size must be an integer >= 1 .*got 0"):
        _run("task_prior")(cfg)
    cfg = compose_cfg("task_prior.yaml", TASKPRIOR + ["data.num_images=5000"], tmp_path)
    with pytest.raises(ValueError, match=r"data\.num_images must be an integer in \[2, 1797\] .*got 5000"):
        _run("task_prior")(cfg)  # once silently the 1797 bundled digits


@pytest.mark.parametrize(
    "override,error,match",
    [
        ("task_prior.temperature=0", ValueError, r"temperature must be a finite number > 0, got 0"),
        ("task_prior.convention=mine", ValueError, r"convention must be one of \('paper', 'authors', 'repbench'\)"),
        ("task_prior.eval_scale=fro", ValueError, r"eval_scale must be one of \('frobenius', 'none'\), got 'fro'"),
        ("max_batch=0", ValueError, r"max_batch must be an integer >= 1, got 0"),
    ],
)
def test_taskprior_block_is_the_config_checked_before_any_backbone(tmp_path, no_backbone, override, error, match):
    """The task_prior: block is TaskPriorConfig (every option checked first, naming the field)."""
    cfg = compose_cfg("task_prior.yaml", TASKPRIOR + [override], tmp_path)
    with pytest.raises(error, match=match):
        _run("task_prior")(cfg)
    assert not (tmp_path / "task_prior.md").exists()


def test_taskprior_cli_writes_the_report_files(tmp_path) -> None:
    table = _run("task_prior")(compose_cfg("task_prior.yaml", TASKPRIOR, tmp_path))
    names = {p.name for p in tmp_path.iterdir()}
    assert {"task_prior.md", "task_prior.csv", "task_prior.json", "e_vs_accuracy.png"} <= names
    assert (tmp_path / "task_prior.md").read_text() == table and "| timm:test_vit |" in table


# --- TA03 / TA04 / TA05: broken task_prior_row.json files in aggregate=<dir> ---------------------------------------

GOOD_ROW = {"backbone": "timm:resnet10t", "acc_mean": 0.7, "acc_var": 0.01, "mean": 0.2, "var": 0.003, "z": 3.6}


def _multirun(tmp_path: Path, broken: str) -> Path:
    root = tmp_path / "agg" / "run"
    for job, text in (("0", json.dumps(GOOD_ROW, indent=1)), ("1", broken)):
        (root / job).mkdir(parents=True)
        (root / job / "task_prior_row.json").write_text(text)
    return root


@pytest.mark.parametrize(
    "case,broken,match",
    [
        ("TA03", json.dumps(GOOD_ROW, indent=1)[:60], r"is not valid JSON \(truncated or corrupt\?"),
        (
            "TA04",
            json.dumps({"backbone": "timm:resnet10t"}),
            r"keys \['acc_mean', 'acc_var', 'mean', 'var'\] are missing",
        ),
        ("TA05", "[1, 2, 3]", r"holds a JSON list, not a Task-Prior row object"),
        ("TA04b", json.dumps({**GOOD_ROW, "mean": "high"}), r"\{'mean': 'high'\} must be numbers"),
    ],
)
def test_ta03_ta04_ta05_broken_row_files_are_named(tmp_path, no_backbone, case, broken, match) -> None:
    root = _multirun(tmp_path, broken)
    bad = str(root / "1" / "task_prior_row.json")
    cfg = compose_cfg("task_prior.yaml", [f"aggregate={root}"], tmp_path / "out")
    with pytest.raises(ValueError, match=match) as info:
        _run("task_prior")(cfg)
    assert bad in str(info.value) and "delete the file" in str(info.value), case
    assert not (root / "task_prior.md").exists()


def test_ta06_a_row_file_of_random_bytes_is_named(tmp_path, no_backbone) -> None:
    """Bytes that are not UTF-8 fail before the JSON parse (UnicodeDecodeError): named like TA03."""
    root = _multirun(tmp_path, "")
    bad = root / "1" / "task_prior_row.json"
    bad.write_bytes(b"\x8f\xae\xff" + bytes(range(256)))  # 0x8f: a UTF-8 continuation byte with no lead byte
    cfg = compose_cfg("task_prior.yaml", [f"aggregate={root}"], tmp_path / "out")
    with pytest.raises(ValueError, match=r"is not valid JSON \(truncated or corrupt\? 'utf-8' codec") as info:
        _run("task_prior")(cfg)
    assert str(bad) in str(info.value) and "delete the file" in str(info.value)
    assert not (root / "task_prior.md").exists()


def test_aggregate_of_a_missing_folder_creates_nothing(tmp_path) -> None:
    missing = tmp_path / "no_such_run"
    with pytest.raises(FileNotFoundError, match="no_such_run is not a directory"):
        _run("task_prior")(compose_cfg("task_prior.yaml", [f"aggregate={missing}"], tmp_path / "out"))
    assert not missing.exists()


def test_aggregate_tabulates_good_rows(tmp_path) -> None:
    root = _multirun(tmp_path, json.dumps({**GOOD_ROW, "backbone": "timm:test_vit", "mean": 0.1}))
    assert [r["backbone"] for r in collect_rows(root)] == ["timm:resnet10t", "timm:test_vit"]
    table = _run("task_prior")(compose_cfg("task_prior.yaml", [f"aggregate={root}"], tmp_path / "out"))
    assert "timm:test_vit" in table and (root / "task_prior.md").read_text() == table


# --- unwritable output directories are found before the work --------------------------------------------------------


@pytest.mark.parametrize(
    "config,overrides",
    [("synbench.yaml", SYNBENCH), ("divergence_radius.yaml", ROBUSTNESS), ("task_prior.yaml", TASKPRIOR)],
)
def test_unwritable_output_dir_is_refused_before_the_work(tmp_path, no_backbone, config, overrides) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("not a folder")
    cfg = compose_cfg(config, overrides, tmp_path)
    cfg.paths.output_dir = str(blocker / "run")  # cannot be created: its parent is a file
    module = {
        "synbench.yaml": "synbench",
        "divergence_radius.yaml": "divergence_radius",
        "task_prior.yaml": "task_prior",
    }[config]
    with pytest.raises(
        OSError, match=r"output directory .*a_file/run is not writable .*nothing was computed\. Fix: .*hydra\.run\.dir="
    ):
        _run(module)(cfg)


@pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_output_dir_is_refused(tmp_path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    ro.chmod(0o555)
    try:
        with pytest.raises(OSError, match=r"output directory .*ro is not writable \(Permission denied\)"):
            check_writable_dir(ro, "set hydra.run.dir=<a writable folder>")
    finally:
        ro.chmod(0o755)


def test_writable_check_leaves_nothing_behind(tmp_path) -> None:
    out = check_writable_dir(tmp_path / "new" / "run", "unused")
    assert out.is_dir() and list(out.iterdir()) == []


# --- the result table is shown once -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "module,config,overrides,header",
    [
        ("synbench", "synbench.yaml", SYNBENCH_TINY, "| backbone | ε=0 | ε=0.4 | best ε |"),
        (
            "divergence_radius",
            "divergence_radius.yaml",
            ROBUSTNESS + ["n_train=30", "n_test=4"],
            "| perturbation | mean R_dr |",
        ),
        ("task_prior", "task_prior.yaml", TASKPRIOR, "| backbone | acc_mean | acc_var |"),
    ],
)
def test_result_table_is_shown_once(tmp_path, capsys, caplog, module, config, overrides, header) -> None:
    import logging

    cfg = compose_cfg(config, overrides, tmp_path)
    with caplog.at_level(logging.INFO, logger="repbench"):
        _run(module)(cfg)
    shown = capsys.readouterr().out.count(header) + caplog.text.count(header)
    assert shown == 1, f"the table was shown {shown} times"


def test_correlations_with_too_few_backbones_are_shown_as_undefined(tmp_path):
    """Two backbones: the Pearson/Spearman columns are undefined; the table says n/a and the JSON holds null (JSON has
    no NaN), never a bare 'nan'."""
    import json

    from src.task_prior.report import write_table

    rows = [
        {"backbone": b, "acc_mean": a, "acc_var": 0.01, "mean": m, "var": 2.0, "acc_q10": 0, "acc_q50": 0, "acc_q90": 0}
        for b, a, m in (("x", 0.6, 1.0), ("y", 0.7, 2.0))
    ]
    paths = write_table(rows, tmp_path)
    md = paths["md"].read_text()
    assert "nan" not in md.lower() and "n/a" in md
    assert all(v is None for v in json.loads(paths["json"].read_text())["correlations"].values())


# --- data=: the training CLI's data group for src.divergence_radius and src.task_prior ------------------------------


def test_divergence_radius_without_data_is_the_bundled_digits_split(tmp_path, monkeypatch) -> None:
    """No data= (the default): compare_backbones gets the digits sizes and no images, exactly as before data=, and
    the CLI's table equals the library call's under the same seed."""
    import torch

    from src.divergence_radius import compare

    seen = []
    real = compare.compare_backbones

    def spy(*args, **kwargs):
        seen.append({k: kwargs.get(k) for k in ("images", "train_images", "image_size", "n_train", "n_test")})
        return real(*args, **kwargs)

    monkeypatch.setattr(compare, "compare_backbones", spy)
    cfg = compose_cfg("divergence_radius.yaml", ROBUSTNESS + ["n_train=30", "n_test=4"], tmp_path)
    assert cfg.get("data") is None
    torch.manual_seed(0)  # the random-weight backbone's initialisation
    _run("divergence_radius")(cfg)
    assert seen == [{"images": None, "train_images": None, "image_size": 16, "n_train": 30, "n_test": 4}]
    torch.manual_seed(0)
    direct = real(
        [{"name": "timm:test_efficientnet", "pretrained": False}],
        {"m": 1, "perturbations": ["brightness"], "chunk_size": 4, "mode": "equal", "seed": 0},
        image_size=16, n_train=30, n_test=4,
    )  # fmt: skip
    assert (tmp_path / "divergence_radius.md").read_text() == direct.markdown


def test_divergence_radius_data_group_trains_on_train_and_sweeps_test(tmp_path, monkeypatch) -> None:
    """data=digits (the training CLI's digits module): n_train seeded images of its train split train the probe, n_test
    of its held-out test split are swept."""
    from src.divergence_radius import compare
    from src.utils.data_tensors import dataset_tensors, load_data_config, open_splits

    seen = {}
    monkeypatch.setattr(compare, "compare_backbones", lambda *a, **kw: seen.update(kw) or _Written())
    cfg = compose_cfg("divergence_radius.yaml", ROBUSTNESS + ["data=digits", "n_train=30", "n_test=4"], tmp_path)
    _run("divergence_radius")(cfg)
    splits = open_splits(load_data_config("digits", seed=0, image_size=16), ("train", "test"))
    assert seen["image_size"] is None and seen["n_train"] is None and seen["n_test"] is None
    for images, labels, split, n in (("train_images", "train_labels", "train", 30), ("images", "labels", "test", 4)):
        x, y = dataset_tensors(splits[split], n, seed=0)
        assert seen[images].shape == (n, 3, 16, 16) and torch_equal(seen[images], x) and torch_equal(seen[labels], y)


class _Written:
    """A stand-in Report (the data given to compare_backbones is what these tests look at)."""

    markdown = ""

    def write(self, out) -> None:
        pass


def torch_equal(a, b) -> bool:
    import torch

    return bool(torch.equal(a, b))


@pytest.mark.parametrize(
    "module,config,overrides",
    [
        ("divergence_radius", "divergence_radius.yaml", ROBUSTNESS),
        ("task_prior", "task_prior.yaml", TASKPRIOR),
    ],
)
def test_data_group_missing_files_fail_before_any_backbone(tmp_path, no_backbone, module, config, overrides) -> None:
    cfg = compose_cfg(config, overrides + ["data=cifar10"], tmp_path)
    with pytest.raises(
        FileNotFoundError, match=r"cifar10 \(train split\) not found in .*data\. Fix: pass download=True"
    ):
        _run(module)(cfg)
    cfg = compose_cfg(config, overrides + ["data=imagefolder"], tmp_path)
    with pytest.raises(ValueError, match=r"leaves \['num_classes', 'root'\] unset; set them: data.num_classes=<value>"):
        _run(module)(cfg)
    cfg = compose_cfg(
        config, overrides + ["data=imagefolder", f"data.root={tmp_path}/none", "data.num_classes=3"], tmp_path
    )
    with pytest.raises(FileNotFoundError, match=r"imagefolder: folder .*none does not exist\. Fix: pass root="):
        _run(module)(cfg)


def test_data_sizes_beyond_a_split_are_refused_not_clamped(tmp_path, no_backbone) -> None:
    cfg = compose_cfg("divergence_radius.yaml", ROBUSTNESS + ["data=digits", "n_test=400"], tmp_path)
    with pytest.raises(ValueError, match=r"n_test \(test-split images swept\) must be an integer in \[2, 359\]"):
        _run("divergence_radius")(cfg)
    cfg = compose_cfg("task_prior.yaml", TASKPRIOR + ["data=photos", "data.split=val", "data.num_images=65"], tmp_path)
    with pytest.raises(
        ValueError, match=r"data.num_images \(images of the val split\) must be an integer in \[2, 64\]"
    ):
        _run("task_prior")(cfg)


def test_task_prior_data_split_needs_a_data_set(tmp_path, no_backbone) -> None:
    cfg = compose_cfg("task_prior.yaml", TASKPRIOR + ["data.split=test"], tmp_path)
    with pytest.raises(ValueError, match=r"data.split='test' picks a split of a data set, and the bundled digits"):
        _run("task_prior")(cfg)


def test_task_prior_data_group_uses_the_chosen_split(tmp_path, monkeypatch) -> None:
    """Without data=: the first data.num_images bundled digits (as before); data=digits data.split=test: seeded
    draws from the digits module's held-out test split at data.image_size."""
    import src.task_prior.__main__ as cli
    from src.task_prior.report import digits_images
    from src.utils.data_tensors import dataset_tensors, load_data_config, open_splits

    seen = []
    monkeypatch.setattr(cli, "compare_backbones", lambda b, c, images, **kw: seen.append(images) or _Written())
    cli.run(compose_cfg("task_prior.yaml", TASKPRIOR, tmp_path))
    assert torch_equal(seen[-1], digits_images(40, 16))
    cli.run(compose_cfg("task_prior.yaml", TASKPRIOR + ["data=digits", "data.split=test"], tmp_path))
    test = open_splits(load_data_config("digits", seed=0, image_size=16), ("test",))["test"]
    assert seen[-1].shape == (40, 3, 16, 16) and torch_equal(seen[-1], dataset_tensors(test, 40, seed=0)[0])
