"""The report's opt-in ``depth`` part (DivergenceRadius's depth task, Liu et al., arXiv:2604.14973, App. D–F): its value
is ``compare_backbones(task="depth")``'s on the same scenes and seed; it is not in the default parts; a backbone without
a feature map and a missing ``depth_data`` file are refused before any work; a rerun reads it from the cache; and
``python -m src.report parts=[depth]`` runs it. Tiny settings: 32-px scenes, 8 to fit, 4 swept, two perturbations."""

from __future__ import annotations

import csv
import json

import pytest

from tests.cli.conftest import compose_cfg

NET = {"name": "timm:test_efficientnet", "pretrained": False}
NETS = [NET, {"name": "timm:resnet10t", "pretrained": False}]
SWEEP = {"perturbations": ["brightness", "fog"], "m": 2}
HEAD = {"epochs": 2, "n_bins": 8}
SCENES = {"train": 8, "test": 4}
TINY = [
    "parts=[depth]",
    "backbones=[{name:timm:test_efficientnet,pretrained:false}]",
    "divergence_radius.perturbations=[brightness,fog]",
    "divergence_radius.m=2",
    "depth.epochs=2",
    "depth.n_bins=8",
    "depth_images.train=8",
    "depth_images.test=4",
    "depth_image_size=32",
    "agreement.n_boot=20",
    "progress=false",
]


def _config(**over):
    from src.report.audit import AuditConfig

    kw = dict(parts=("depth",), divergence_radius=SWEEP, depth=HEAD, depth_images=SCENES, depth_image_size=32)
    return AuditConfig(**{**kw, **over})


@pytest.fixture
def no_work(monkeypatch):
    """Any backbone built, depth data prepared or part run is a failure: the refusals must come before."""

    def refuse(*args, **kwargs):
        raise AssertionError("work started before the refusal")

    for name in ("depth_prepare", "depth_run", "divergence_radius_prepare", "task_prior_prepare"):
        monkeypatch.setattr(f"src.methods.audit_parts.{name}", refuse)
    monkeypatch.setattr("src.report.audit.build_backbone", refuse)
    monkeypatch.setattr("src.report.audit.part_downstream", refuse)


@pytest.mark.timeout(120)
def test_the_depth_part_is_compare_backbones_depth_on_the_same_scenes() -> None:
    """An independent path to the same numbers: ``compare_backbones(task="depth")`` draws its own scenes
    (``scenes_split`` of the sweep's seed), builds the backbones under that seed and fits the heads; its per-image
    RMSE_p, R_dr and R_cs are averaged here, not read from its summary rows.

    Tolerance: both paths run the same float operations on the same tensors and weights (the run's seed 0 is the
    sweep's, the Task-Prior's and the weights' seed), so the per-image values are equal bit for bit. Only the means
    differ in summation order: float64 means of at most 4 images x 2 perturbations, relative error <= 8 * 2^-53
    ~ 1e-15; rel 1e-12 leaves three orders of magnitude."""
    from src.divergence_radius import compare_backbones
    from src.report.audit import run_audit

    res = run_audit(NETS, _config())
    ref = compare_backbones(NETS, SWEEP, task="depth", depth=HEAD, image_size=32, n_train=8, n_test=4)
    for label, rep in ref.results.items():
        got, sweep = res.values[label]["depth"], rep.sweep
        assert got["clean_rmse"] == pytest.approx(float(sweep.clean_rmse.mean()), rel=1e-12)
        assert got["mean_rmse_p"] == pytest.approx(float(sweep.rmse_p.mean()), rel=1e-12)
        assert got["mean_r_dr"] == pytest.approx(float(sweep.r_dr.mean()), rel=1e-12)
        assert got["mean_r_cs"] == pytest.approx(float(sweep.r_cs.mean()), rel=1e-12)
        for j, name in enumerate(sweep.names):
            assert got["rmse_p"][name] == pytest.approx(float(sweep.rmse_p[:, j].mean()), rel=1e-12)
            assert got["r_dr"][name] == pytest.approx(float(sweep.r_dr[:, j].mean()), rel=1e-12)
            assert got["r_cs"][name] == pytest.approx(float(sweep.r_cs[:, j].mean()), rel=1e-12)
        assert list(got["rmse_p"]) == list(SWEEP["perturbations"]) and got["head"] == "bins readout"
        json.dumps(got)  # JSON-able (the cache entry)


def test_depth_is_opt_in_and_its_columns_read_lower_is_better(tmp_path) -> None:
    from src.methods import column_direction
    from src.report.__main__ import audit_config
    from src.report.audit import DEPTH_SETTINGS, PARTS, AuditConfig, all_parts, part_image_sizes
    from src.report.render import _jsonable_config

    default = ("synbench", "baselines", "divergence_radius", "task_prior", "downstream")
    assert PARTS == default and AuditConfig().parts == default  # the default report as before
    assert all_parts() == ("synbench", "baselines", "divergence_radius", "depth", "task_prior", "downstream")
    assert audit_config(compose_cfg("report.yaml", [], tmp_path)).parts == default
    every = audit_config(compose_cfg("report.yaml", [f"parts=[{','.join(default)},depth]"], tmp_path))
    assert every.parts == (*default, "depth") and every.depth_images == {"train": 64, "test": 32}
    # report.json of a report without the depth part holds none of its settings (as before they existed)
    assert not set(DEPTH_SETTINGS) & set(_jsonable_config(AuditConfig()))
    assert _jsonable_config(every)["depth"]["epochs"] == 20  # DepthHeadConfig's default (null in report.yaml)
    assert column_direction("depth_rmse") is False and column_direction("depth_rmse_p") is False
    assert part_image_sizes(_config(depth_image_size=48), {}, None) == {"depth": 48}  # fixed-size backbones: checked
    with pytest.raises(ValueError, match=r"depth_images.test must be an integer >= 2, got 1"):
        _config(depth_images={"train": 8, "test": 1})
    with pytest.raises(ValueError, match=r"depth_images.train must be an integer >= 2, got None"):
        _config(depth_images={"train": None, "test": 4})  # null (the whole split) is for depth_data only
    with pytest.raises(ValueError, match=r"depth \(the depth part's head, DepthHeadConfig\): .*epochs"):
        _config(depth={"epochs": 0})


def test_a_backbone_without_a_feature_map_is_refused_before_any_work(tmp_path, no_work) -> None:
    from src.report.__main__ import run
    from src.report.audit import run_audit

    nets = [NET, {"name": "torchvision:resnet18", "pretrained": False}]
    fix = r"\['torchvision:resnet18'\] do not expose.*drop depth from parts, or drop those backbones"
    with pytest.raises(ValueError, match=fix):
        run_audit(nets, _config(), cache_dir=str(tmp_path / "cache"))
    cfg = compose_cfg("report.yaml", [*TINY, "backbones=[{name:torchvision:resnet18,pretrained:false}]"], tmp_path)
    cfg.paths.output_dir = str(tmp_path / "out")
    with pytest.raises(ValueError, match=fix):
        run(cfg)
    assert not (tmp_path / "out").exists() and not (tmp_path / "cache").exists()


def test_a_missing_depth_data_file_is_refused_before_any_work(tmp_path, no_work) -> None:
    from src.report.__main__ import run

    cfg = compose_cfg("report.yaml", [*TINY, "depth_data=nyu_depth_v2"], tmp_path)
    cfg.cache_dir = str(tmp_path / "cache")
    with pytest.raises(FileNotFoundError, match=r"depth_data: NYU-Depth V2: .*data/nyu_depth_v2.* does not exist"):
        run(cfg)
    assert not (tmp_path / "cache").exists()


def test_a_rerun_reads_the_depth_part_from_the_cache(tmp_path) -> None:
    from src.report.audit import run_audit

    cache = str(tmp_path / "cache")
    first = run_audit([NET], _config(), cache_dir=cache)
    again = run_audit([NET], _config(), cache_dir=cache)
    label = "timm:test_efficientnet"
    assert first.cached[label]["depth"] is False and again.cached[label]["depth"] is True
    assert again.values[label]["depth"] == json.loads(json.dumps(first.values[label]["depth"]))
    # every setting that decides the value is in the key: the head's options, the scenes, the sweep's seed
    for other in (_config(depth={**HEAD, "lr": 1e-2}), _config(depth_images={"train": 6, "test": 4}),
                  _config(divergence_radius={**SWEEP, "seed": 1})):  # fmt: skip
        assert run_audit([NET], other, cache_dir=cache).cached[label]["depth"] is False


@pytest.mark.timeout(120)
def test_the_cli_runs_parts_depth(tmp_path) -> None:
    from src.report.__main__ import run

    cfg = compose_cfg("report.yaml", TINY, tmp_path)
    cfg.paths.output_dir = str(tmp_path / "out")
    cfg.cache_dir = str(tmp_path / "cache")
    md = run(cfg)
    assert "depth_rmse" in md and "depth_rmse_p" in md
    (row,) = csv.DictReader(open(tmp_path / "out" / "report.csv"))
    assert float(row["depth_rmse"]) > 0 and float(row["depth_rmse_p"]) > 0 and float(row["time_depth_s"]) >= 0
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    assert data["config"]["depth_images"] == SCENES and data["config"]["depth"]["n_bins"] == 8
    assert (tmp_path / "out" / "depth_rmse_p_by_perturbation.png").stat().st_size > 1000
    assert "DivergenceRadius depth task (App. D-F)" in (tmp_path / "out" / "report.html").read_text()
    # the intro describes the parts that ran: no SynBench / baselines budget for a depth-only report; one backbone
    # defines no rank agreement, so no (empty) agreement figure is drawn
    assert "parts depth." in md and "SynBench at" not in md and "proxy task" not in md
    assert not (tmp_path / "out" / "agreement.png").exists()
