"""python -m src.sweep_report on a hand-written multirun folder whose Pareto front is known."""

from __future__ import annotations

import json

import pytest

from src.sweep_report import choose, pareto_front, run, sweep_report

# (lambda, teacher cosine = val/utility (max, given), R_dr = val/divergence_radius/mean (min, from the metric))
TRIALS = {
    "0_lam-0": ("0", 0.50, 0.007),  # the collapsed point: lowest R_dr, on the front but far below any floor use
    "1_lam-1": ("1", 0.87, 0.19),
    "2_lam-10": ("10", 0.93, 0.23),
    "3_lam-3": ("3", 0.85, 0.25),  # dominated by lam=1 (lower utility, higher R_dr)
}


def _multirun(tmp_path, trials=TRIALS, pruned=()):
    for job, (lam, util, rdr) in trials.items():
        folder = tmp_path / job
        (folder / ".hydra").mkdir(parents=True)
        (folder / ".hydra" / "overrides.yaml").write_text(f"- model.lam={lam}\n- seed=0\n")
        metrics = {"val/utility": util, "val/divergence_radius/mean": rdr}
        info = {"run_dir": str(folder), "pruned_epoch": 0 if job in pruned else None}
        (folder / "metrics.json").write_text(json.dumps({"metrics": metrics, **info}))
    return tmp_path


def test_front_and_choice(tmp_path):
    report = sweep_report(_multirun(tmp_path), "val/utility", "val/divergence_radius/mean", {"val/utility": "max"})
    assert report.data["modes"] == ["max", "min"]  # R_dr's direction from DivergenceRadius.higher_is_better
    assert report.data["front"] == ["0_lam-0", "1_lam-1", "2_lam-10"]
    assert [r["pareto"] for r in report.rows] == [True, True, True, False]
    # knee, front scaled to [0, 1]: lam=1 at (0.86, 0.18), distance 0.83 to (1, 1); lam=0 (0, 1) and lam=10 (1, 0): 1
    assert report.data["chosen"]["job"] == "1_lam-1"


def test_floor_rule_and_cli_files(tmp_path):
    root = _multirun(tmp_path)
    out = run(
        [
            str(root),
            "--x",
            "val/utility",
            "--direction",
            "val/utility=max",
            "--floor",
            "0.2",
            "--out",
            str(tmp_path / "r"),
        ]
    )
    data = json.loads((out / "sweep_report.json").read_text())
    assert data["chosen"]["job"] == "1_lam-1"  # R_dr <= 0.2: lam=0 and lam=1 pass; lam=1 has the higher utility
    assert {p.name for p in out.iterdir()} >= {"sweep_report.md", "sweep_report.csv", "pareto.png"}


def test_pure_pieces_and_errors(tmp_path):
    assert pareto_front([(1, 1), (2, 2), (float("nan"), 3)], ("max", "max")) == [1]
    assert choose([(1.0, 5.0), (2.0, 1.0)], [0, 1], ("max", "max"), floor=3.0)[0] == 0
    with pytest.raises(ValueError, match=r"no Pareto point has its second metric >= 9"):
        choose([(1.0, 5.0)], [0], ("max", "max"), floor=9.0)
    with pytest.raises(ValueError, match=r"direction of 'val/utility' is unknown"):
        sweep_report(_multirun(tmp_path), "val/utility", "val/divergence_radius/mean")
    with pytest.raises(FileNotFoundError, match=r"no job folder .* holds a metrics.json"):
        sweep_report(tmp_path / "0_lam-0" / ".hydra", "val/acc", "val/divergence_radius/mean")


def test_limit_and_pruned_trials_leave_the_front(tmp_path):
    # --limit val/utility=0.8 takes the collapsed lam=0 off the front; the knee is then over lam=1 and lam=10
    root = _multirun(tmp_path)
    out = run([str(root), "--x", "val/utility", "--direction", "val/utility=max", "--limit", "val/utility=0.8"])
    data = json.loads((out / "sweep_report.json").read_text())
    assert data["front"] == ["1_lam-1", "2_lam-10"] and data["limits"] == {"val/utility": 0.8}
    assert "seed" not in (out / "sweep_report.csv").read_text().splitlines()[0]  # same in every trial: not a column
    # a trial OptunaPruning stopped is listed as pruned, never on the front, even when it looks best
    trials = {**TRIALS, "4_lam-5": ("5", 0.99, 0.001)}
    report = sweep_report(
        _multirun(tmp_path / "p", trials, pruned={"4_lam-5"}), "val/utility", "val/divergence_radius/mean",
        {"val/utility": "max"},
    )  # fmt: skip
    assert "4_lam-5" not in report.data["front"] and report.rows[-1]["pruned_epoch"] == 0
    assert "| epoch 0 |" in report.markdown
    with pytest.raises(KeyError, match=r"limits name \['val/acc'\], which are not the report's metrics"):
        sweep_report(root, "val/utility", "val/divergence_radius/mean", {"val/utility": "max"}, limits={"val/acc": 1})
    with pytest.raises(SystemExit):
        run([str(root), "--limit", "val/utility=high"])


def test_a_truncated_metrics_json_is_named(tmp_path):
    """SR04: the file is named, with the fix."""
    root = _multirun(tmp_path)
    path = root / "1_lam-1" / "metrics.json"
    path.write_text(path.read_text()[:30])
    with pytest.raises(ValueError, match=r"1_lam-1/metrics.json is not valid JSON .*rerun the job"):
        sweep_report(root, "val/utility", "val/divergence_radius/mean", {"val/utility": "max"})


def test_a_null_metric_names_the_job_and_the_metric(tmp_path):
    """SR05: metrics.json with ``"val/utility": null``."""
    root = _multirun(tmp_path)
    path = root / "2_lam-10" / "metrics.json"
    payload = json.loads(path.read_text())
    payload["metrics"]["val/utility"] = None
    path.write_text(json.dumps(payload))
    with pytest.raises(ValueError, match=r"job '2_lam-10' logged 'val/utility' = null in its metrics.json"):
        sweep_report(root, "val/utility", "val/divergence_radius/mean", {"val/utility": "max"})


def test_a_metric_no_job_logged_is_named_before_its_direction(tmp_path):
    """SR09: a typo in --x: missing from every job (with the logged names), not an unknown direction."""
    root = _multirun(tmp_path)
    with pytest.raises(KeyError, match=r"'val/nope' is missing from every job.*\['val/divergence_radius/mean', "):
        run([str(root), "--x", "val/nope"])
    (root / "3_lam-3" / "metrics.json").write_text(json.dumps({"metrics": {"val/utility": 0.85}}))
    with pytest.raises(KeyError, match=r"jobs \['3_lam-3'\] did not log"):  # missing from some jobs: they are named
        run([str(root), "--x", "val/utility", "--direction", "val/utility=max"])


def test_an_unknown_direction_names_the_cli_fix(tmp_path):
    """SR08: --y val/loss (no metric direction) without --direction: the CLI's option is named."""
    root = _multirun(tmp_path)
    for job in TRIALS:
        path = root / job / "metrics.json"
        payload = json.loads(path.read_text())
        payload["metrics"]["val/loss"] = 0.1
        path.write_text(json.dumps(payload))
    with pytest.raises(ValueError, match=r"direction of 'val/loss' is unknown.*--direction val/loss=min\|max"):
        run([str(root), "--x", "val/divergence_radius/mean", "--y", "val/loss"])


def test_an_invalid_overrides_yaml_is_named(tmp_path):
    """SR14: a job's .hydra/overrides.yaml that is not YAML."""
    root = _multirun(tmp_path)
    (root / "0_lam-0" / ".hydra" / "overrides.yaml").write_text("[model.lam=0,\n- seed: [\n")
    with pytest.raises(ValueError, match=r"0_lam-0/.hydra/overrides.yaml is not valid YAML"):
        sweep_report(root, "val/utility", "val/divergence_radius/mean", {"val/utility": "max"})


def test_a_non_finite_floor_is_refused(tmp_path):
    """SR07: ``--floor nan`` made every comparison false, so every front point "passed" and a job was chosen."""
    root = _multirun(tmp_path)
    base = [str(root), "--x", "val/utility", "--direction", "val/utility=max"]
    for bad in ("nan", "inf", "-inf", "high"):
        with pytest.raises(SystemExit):
            run([*base, "--floor", bad])
    assert not (root / "sweep_report").exists()
    points = [(0.5, 0.1), (0.9, 0.2)]
    for bad in (float("nan"), float("inf"), True, "0.1"):
        with pytest.raises(ValueError, match=r"floor must be a finite number"):
            choose(points, [0, 1], ("max", "min"), bad)
    assert choose(points, [0, 1], ("max", "min"), 0.15)[0] == 0
