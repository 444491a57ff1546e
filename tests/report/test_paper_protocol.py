"""The paper's protocol in the report (issue 27, item 2): ``baselines.convention=paper`` runs the SynBench paper's
code on the proxy task (its values equal ``baseline_scores(convention="paper")`` on the same samples, which
tests/baselines/test_paper_convention.py checks against transcriptions of reprieve, LogME and SFDA);
``downstream.external=<csv>`` correlates every score with accuracies measured elsewhere; ``budgets.pair`` chooses
the pair of the consistency table. Bad settings are refused before any work, naming the fix."""

from __future__ import annotations

import json

import pytest

from src.report.audit import AuditConfig, AuditResults
from src.report.external import load_external
from src.report.render import audit_report, budget_choices
from tests.cli.conftest import compose_cfg
from tests.report.test_report_cli import NETS, TINY

LABELS = ["timm:test_efficientnet", "timm:test_vit"]


@pytest.mark.timeout(600)
def test_paper_convention_runs_the_papers_code_in_the_report(tmp_path) -> None:
    import torch

    from src.backbones.spec import build_backbone
    from src.baselines import ReprieveProbe, baseline_scores, synthetic_task
    from src.report.__main__ import run

    overrides = [f"backbones=[{NETS[0]}]", *TINY, "parts=[baselines]", "baselines.convention=paper",
                 "baselines.probe.train_steps=3",
                 "baselines.probe.n_seeds=2", "baselines.probe.n_points=3", "baselines.which=[logme,sfda,mdl,sdl]"]  # fmt: skip
    cfg = compose_cfg("report.yaml", overrides, tmp_path)
    cfg.paths.output_dir = str(tmp_path / "out")
    cfg.cache_dir = str(tmp_path / "cache")
    md = run(cfg)
    assert "No ground-truth column" in md and "| score |" not in md  # no downstream part: no empty agreement table
    data = json.loads((tmp_path / "out" / "report.json").read_text())
    got = data["values"][LABELS[0]]["baselines"]["values"]
    assert data["config"]["baseline_convention"] == "paper"
    assert data["config"]["baseline_probe"]["train_steps"] == 3
    # the same samples through the library call: equal (one code path; float64 JSON round trip is exact)
    from src.report.__main__ import audit_config

    config = audit_config(cfg)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.task_prior.seed)
        bb = build_backbone({"name": "timm:test_efficientnet", "pretrained": False}).eval()
    task = synthetic_task(bb.embed, (3, 16, 16), config.synbench, config.baseline_s)
    want = baseline_scores(*task, which=("logme", "sfda", "mdl", "sdl"), seed=config.synbench.seed,
                           convention="paper", probe=ReprieveProbe(train_steps=3, n_seeds=2, n_points=3))  # fmt: skip
    assert got == pytest.approx(dict(want), rel=1e-12)
    # the default convention's cache entry is another one (the settings name the convention)
    cfg2 = compose_cfg("report.yaml", [*overrides[:-5], "baselines.which=[logme,sfda,mdl,sdl]"], tmp_path)
    cfg2.paths.output_dir, cfg2.cache_dir = str(tmp_path / "out2"), str(tmp_path / "cache")
    run(cfg2)
    data2 = json.loads((tmp_path / "out2" / "report.json").read_text())
    assert not any(data2["cached"][LABELS[0]].values())
    assert data2["values"][LABELS[0]]["baselines"]["values"]["logme"] != got["logme"]  # exact vs authors' LogME


def test_paper_settings_are_checked_before_any_work(tmp_path) -> None:
    from src.report.__main__ import run

    for override, match in (
        ("baselines.convention=papers", r"baselines\.convention\) must be one of \['repbench', 'paper'\]"),
        ("baselines.probe.train_steps=5", r"only the paper convention trains; set baselines\.convention=paper"),
        ("budgets.pair=[a]", r"budgets\.pair must be two different backbone labels"),
        ("budgets.pair=[timm:test_vit,timm:test_efficientnet]", r"budgets\.sizes is empty"),
    ):
        cfg = compose_cfg("report.yaml", [f"backbones=[{','.join(NETS)}]", *TINY, override], tmp_path)
        with pytest.raises(ValueError, match=match):
            run(cfg)
    cfg = compose_cfg("report.yaml", [f"backbones=[{','.join(NETS)}]", *TINY, "baselines.convention=paper",
                                      "baselines.probe.train_steps=0"], tmp_path)  # fmt: skip
    with pytest.raises(ValueError, match=r"baselines\.probe: train_steps must be an integer >= 1, got 0"):
        run(cfg)
    cfg = compose_cfg("report.yaml", [f"backbones=[{','.join(NETS)}]", *TINY, "budgets.sizes=[64]",
                                      "budgets.pair=[timm:test_vit,timm:nope]"], tmp_path)  # fmt: skip
    with pytest.raises(ValueError, match=r"budgets\.pair names \['timm:nope'\], not backbones of this report"):
        run(cfg)
    csv_path = tmp_path / "acc.csv"
    csv_path.write_text("backbone,task,accuracy\nsomething_else,cifar10,0.9\n")
    cfg = compose_cfg("report.yaml", [f"backbones=[{','.join(NETS)}]", *TINY, f"downstream.external={csv_path}"],
                      tmp_path)  # fmt: skip
    with pytest.raises(ValueError, match=r"none of its backbones \['something_else'\] is a backbone of this report"):
        run(cfg)
    assert not list(tmp_path.glob("**/report.json"))  # refused before anything was written


def test_external_csv_is_read_checked_and_averaged(tmp_path) -> None:
    path = tmp_path / "acc.csv"
    path.write_text("backbone,task,accuracy,source\na,t1,0.5,x\na,t2,0.7,x\nb,t1,0.6,x\nzz,t1,0.1,x\n")
    ext = load_external(path, ["a", "b", "c"])
    assert ext.columns == ("average/external", "t1/external", "t2/external")
    assert ext.values["a"] == {"average/external": pytest.approx(0.6), "t1/external": 0.5, "t2/external": 0.7}
    assert ext.values["b"] == {"t1/external": 0.6}  # no average without every task
    assert ext.unmatched == ("zz",) and ext.missing == ("c",)
    note = ext.note()
    assert "no accuracy for c" in note and "ignored: zz" in note
    for text, match in (
        ("backbone,task\na,t1\n", r"lacks \['accuracy'\]"),
        ("backbone,task,accuracy\na,t1,nan\n", r"line 2: accuracy 'nan' is not finite"),
        ("backbone,task,accuracy\na,t1,x\n", r"line 2: accuracy 'x' is not a number"),
        ("backbone,task,accuracy\na,t1,1\na,t1,2\n", r"line 3 repeats backbone 'a', task 't1'"),
        ("backbone,task,accuracy\na,average,1\na,t1,2\n", r"a task is named 'average'"),
        ("backbone,task,accuracy\n", r"it has no rows"),
    ):
        path.write_text(text)
        with pytest.raises(ValueError, match=match):
            load_external(path, ["a"])
    with pytest.raises(FileNotFoundError, match=r"no such file"):
        load_external(tmp_path / "missing.csv", ["a"])


def _results(external=None, pair=None) -> AuditResults:
    """Four backbones with the baselines at two budgets and one downstream set, by hand: logme ranks d > c > b > a at
    n = 32 and a > b > c > d at n = 64; the downstream accuracy ranks a first."""
    labels = ["a", "b", "c", "d"]
    small, large = [0.1, 0.2, 0.3, 0.4], [0.4, 0.3, 0.2, 0.1]

    def part(v: float) -> dict:
        return {"values": {"logme": v}, "seconds": {}, "lower_bounds": [], "errors": {}}

    values = {
        lab: {"baselines": part(large[i]), "baselines@32": part(small[i]), "baselines@64": part(large[i]),
              "downstream": {"toy": {"clean_acc": 0.9 - 0.1 * i}}}
        for i, lab in enumerate(labels)
    }  # fmt: skip
    cfg = AuditConfig(parts=("baselines", "downstream"), baselines=("logme",), budgets=(32, 64), budget_pair=pair)
    seconds = {lab: {} for lab in labels}
    return AuditResults(cfg, labels, values, seconds, seconds, ["toy"], external=external)


def test_budget_pair_chooses_the_compared_backbones() -> None:
    default = budget_choices(_results())  # the two best by the downstream accuracy: a and b
    assert default == [{"score": "logme", "n=32": "b", "n=64": "a", "flips": True}]
    chosen = budget_choices(_results(pair=("c", "d")))
    assert chosen == [{"score": "logme", "n=32": "d", "n=64": "c", "flips": True}]


def test_external_ground_truth_comes_first_and_is_correlated(tmp_path) -> None:
    path = tmp_path / "acc.csv"
    # the external accuracies rank d > c > b (a has none): the reverse of the downstream accuracy
    path.write_text("backbone,task,accuracy\nb,x,60\nb,y,62\nc,x,70\nc,y,72\nd,x,80\nd,y,82\n")
    report, html = audit_report(_results(external=load_external(path, ["a", "b", "c", "d"])), n_boot=100)
    assert report.rows[1]["average/external"] == 61.0
    ranking = report.markdown.split("## Ranking")[1].split("##")[0]
    header, _, *lines = [line for line in ranking.splitlines() if line.startswith("|")]
    assert [h.strip() for h in header.split("|")[1:5]] == ["backbone", "average/external", "x/external", "y/external"]
    assert [line.split("|")[1].strip() for line in lines] == ["d", "c", "b", "a"]  # by the external average; a last
    agree = {(a["score"], a["target"]): a for a in report.data["agreement"]}
    assert agree[("logme", "average/external")]["n"] == 3  # a has no external accuracy: left out, not the column
    assert agree[("logme", "average/external")]["kendall"] == pytest.approx(-1.0)
    assert agree[("logme", "toy/clean_acc")]["n"] == 4
    assert "## Verdict (against average/external)" in report.markdown
    assert "External ground truth from acc.csv: 2 task(s)" in report.markdown and "no accuracy for a" in html
    assert list(report.data["external"]["columns"]) == ["average/external", "x/external", "y/external"]


def test_the_bundled_table_matches_the_synbench_paper_preset(tmp_path) -> None:
    # the paper's Table 7 "Real-life accuracy (%)" row, under the preset's labels (the SimCLRv2 ResNets: their timm
    # architectures, which a user adds with checkpoint_path)
    cfg = compose_cfg("report.yaml", ["report_preset=synbench_paper"], tmp_path)
    from omegaconf import OmegaConf

    from src.backbones.spec import backbone_labels, backbone_list

    labels = backbone_labels(backbone_list(OmegaConf.to_container(cfg.backbones, resolve=True)))
    ext = load_external(cfg.downstream.external, labels)
    assert {lab: v["27_tasks_mean/external"] for lab, v in ext.values.items()} == {
        "timm:vit_base_patch16_224.augreg_in21k_ft_in1k": 74.3,
        "timm:vit_large_patch16_224.augreg_in21k_ft_in1k": 75.5,
        "timm:vit_base_patch32_224.augreg_in21k_ft_in1k": 72.6,
    }
    assert ext.unmatched == ("timm:resnet101", "timm:resnet50")
    assert cfg.baselines.convention == "paper" and list(cfg.budgets.pair) == [
        "timm:vit_base_patch16_224.augreg_in21k_ft_in1k",
        "timm:vit_base_patch16_224.augreg_in21k",
    ]
