"""compare_backbones (issue 14): the per-backbone downstream reports gathered into one Report, equal to
robustness_report of each backbone; every check before a backbone is built; the CLI writing the Report's files."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from src.backbones.spec import build_backbone
from src.divergence_radius import DivergenceRadiusConfig, compare_backbones
from src.divergence_radius.compare import DIGITS_SPLIT, check_comparison
from src.divergence_radius.report import digits_split, figure_prefixes, robustness_report

ROOT = Path(__file__).resolve().parents[2]
TINY = [{"name": "timm:test_efficientnet", "pretrained": False}, {"name": "timm:test_vit", "pretrained": False}]
SWEEP = {"perturbations": ["brightness", "gaussian_noise"], "m": 2, "chunk_size": 4}
DATA = {"image_size": 16, "n_train": 30, "n_test": 6}


@pytest.fixture
def no_build(monkeypatch):
    """Building a backbone is the first piece of work: fail the test if a refused comparison gets there."""

    def refuse(*args, **kwargs):
        raise AssertionError("a backbone was built: the bad setting was not refused first")

    monkeypatch.setattr("src.divergence_radius.compare.build_backbone", refuse)
    monkeypatch.setattr("src.divergence_radius.compare.check_buildable", refuse)


@pytest.fixture(scope="module")
def two() -> tuple[list, object]:
    """Two tiny random backbones built once (random weights: the reference below must use the same objects), and
    their comparison."""
    torch.manual_seed(0)
    backbones = [build_backbone(spec).eval() for spec in TINY]
    lines: list[str] = []
    report = compare_backbones(backbones, SWEEP, **DATA, progress=lines.append)
    return backbones, report, lines


def test_issue14_report_agrees_with_robustness_report_per_backbone(two) -> None:
    """Rows, data, per-image table and results are each backbone's robustness_report (same computation on the same
    objects and data: equal exactly)."""
    backbones, report, lines = two
    x_tr, y_tr, x_te, y_te = digits_split(**DATA, seed=0)
    labels = ["timm:test_efficientnet", "timm:test_vit"]
    assert report.method == "divergence_radius" and list(report.results) == labels and list(report.data) == labels
    rows, per_image = [], []
    for label, bb in zip(labels, backbones):
        ref = robustness_report(bb.embed, x_tr, y_tr, x_te, y_te, SWEEP, backbone_name=label, device="cpu")
        assert report.data[label] == ref.to_dict()
        assert torch.equal(report.results[label].sweep.r_dr, ref.sweep.r_dr)
        rows += [{"backbone": label, **r} for r in ref.rows]
        per_image += [
            {"backbone": label, "image": int(ref.sweep.index[i]), "perturbation": p, "r_dr": float(ref.sweep.r_dr[i, j]),
             "r_cs": float(ref.sweep.r_cs[i, j]), "acc_p": float(ref.sweep.acc_p[i, j])}
            for i in range(DATA["n_test"]) for j, p in enumerate(ref.sweep.names)
        ]  # fmt: skip
        assert ref.markdown() in report.markdown
    assert report.rows == rows and len(rows) == 2 * 2
    assert report.tables == {"per_image.csv": per_image} and len(per_image) == 2 * 6 * 2
    assert report.data[labels[0]]["config"] == DivergenceRadiusConfig(**SWEEP).to_dict()
    assert [line.split(":")[0] for line in lines] == ["DivergenceRadius timm", "DivergenceRadius timm"]


def test_issue14_markdown_summary_row_per_backbone(two) -> None:
    _, report, _ = two
    head = "| backbone | classifier | clean ACC | mean R_dr | mean R_cs | mean ACC_p | Pearson R_dr vs drop |"
    assert report.markdown.startswith(head)
    for label, rep in report.results.items():
        mean_dr = sum(r["mean_r_dr"] for r in rep.rows) / len(rep.rows)
        # two perturbations: the Table 7 correlation is undefined (n/a, never 'nan')
        assert f"| {label} | linear-probe | {rep.clean_accuracy:.3f} | {mean_dr:.4f} |" in report.markdown
        assert f"## {label}\n" in report.markdown
    assert "nan" not in report.markdown.lower() and "| n/a | n/a |" in report.markdown


def test_issue14_figure_names(two) -> None:
    """One backbone keeps the single-report names; several get their label as a prefix (a file-name-safe slug)."""
    import matplotlib.pyplot as plt

    _, report, _ = two
    names = sorted(report.figures())
    plt.close("all")
    per = ["acc_p_vs_cosine_robustness.png", "acc_p_vs_divergence_radius.png", "regression_mse.png"]
    want = [f"{p}__{n}" for p in ("timm_test_efficientnet", "timm_test_vit") for n in per]
    assert names == sorted(want + ["r_dr_by_perturbation.png"])
    assert figure_prefixes(["embedded:a"]) == {"embedded:a": ""}
    assert figure_prefixes(["x:a", "x_a", "x/a"]) == {"x:a": "x_a__", "x_a": "x_a_2__", "x/a": "x_a_3__"}


def test_issue14_every_check_before_a_backbone_is_built(no_build) -> None:
    cases = [
        (dict(backbones=[]), ValueError, r"backbones must be a non-empty list"),
        (dict(backbones=["a:x", "a:x"]), ValueError, r"more than once"),
        (dict(config={"m": 0}), ValueError, r"m must be a positive integer"),
        (dict(config={"k": 1}), ValueError, r"unknown DivergenceRadiusConfig option\(s\) \['k'\]"),
        (dict(classifier="svm"), ValueError, r"classifier must be 'linear' .* 'zero_shot' .* or 'auto'"),
        (dict(classifier="zero_shot"), ValueError, r"zero_shot' needs open_clip backbones .*\['timm:test_vit'\]"),
        (dict(backbones=["open_clip:ViT-B-32"], classifier="zero_shot", class_names=["zero", "one"]), ValueError,
         r"labels go up to 9 and class_names has 2 name\(s\); pass one name per class"),
        (dict(image_size=8), ValueError, r"image_size must be >= 16 \(the perturbations need a margin\), got 8"),
        (dict(n_test=1), ValueError, r"n_test must be >= 2, got 1"),
        (dict(n_train=1), ValueError, r"n_train must be >= 2, got 1"),
        (dict(labels=torch.zeros(3)), ValueError, r"go with images="),
        (dict(images=torch.rand(4, 3, 16, 16), n_test=4), ValueError, r"\['n_test'\] set the digits default data"),
        (dict(images=torch.rand(4, 3, 16, 16) * 2, labels=torch.zeros(4, dtype=torch.long)), ValueError,
         r"^images must be finite and in \[0, 1\]"),
        (dict(images=torch.rand(4, 3, 16, 16), labels=torch.zeros(4)), ValueError,
         r"labels must be an integer tensor of shape \(4,\)"),
        (dict(images=torch.rand(4, 3, 16, 16), labels=torch.zeros(4, dtype=torch.long)), ValueError,
         r"pass train_images= and train_labels="),
        (dict(images=torch.rand(4, 3, 16, 16), labels=torch.tensor([0, 1, -1, 0])), ValueError,
         r"labels must be class indices >= 0, got -1"),
    ]  # fmt: skip
    for kwargs, exc, match in cases:
        args = {"backbones": ["timm:test_vit"], **kwargs}
        with pytest.raises(exc, match=match):
            compare_backbones(**args)


def test_issue14_given_images_replace_the_digits() -> None:
    g = torch.Generator().manual_seed(1)
    x_tr, y_tr = torch.rand(10, 3, 16, 16, generator=g), torch.arange(10) % 2
    x_te, y_te = torch.rand(4, 3, 16, 16, generator=g), torch.arange(4) % 2
    torch.manual_seed(0)
    bb = build_backbone(TINY[1]).eval()
    sweep = {"perturbations": ["contrast"], "m": 1}
    report = compare_backbones([bb], sweep, images=x_te, labels=y_te, train_images=x_tr, train_labels=y_tr)
    ref = robustness_report(bb.embed, x_tr, y_tr, x_te, y_te, sweep, backbone_name="timm:test_vit", device="cpu")
    assert report.data == {"timm:test_vit": ref.to_dict()}
    assert check_comparison(["a:b"]).digits == dict(DIGITS_SPLIT)  # None = the digits default


# ---------------------------------------------------------------- the CLI


def _cli_cfg(tmp_path: Path, extra: list[str]):
    overrides = [
        'backbones=[{name: "timm:test_efficientnet", pretrained: false}]',
        f"paths.output_dir={tmp_path}",
        "image_size=16",
        "n_train=30",
        "n_test=4",
        "divergence_radius.m=1",
        "divergence_radius.perturbations=[brightness]",
        "divergence_radius.chunk_size=4",
        *extra,
    ]
    with initialize_config_dir(str(ROOT / "configs"), version_base="1.3"):
        return compose("divergence_radius.yaml", overrides=overrides)


def test_issue14_cli_refuses_bad_settings_first_naming_the_block(tmp_path, no_build) -> None:
    from src.divergence_radius.__main__ import run

    with pytest.raises(
        ValueError, match=r"^divergence_radius block of configs/divergence_radius.yaml: m must be a positive"
    ):
        run(_cli_cfg(tmp_path, ["divergence_radius.m=0"]))
    with pytest.raises(ValueError, match=r"zero_shot' needs open_clip backbones"):
        run(_cli_cfg(tmp_path, ["classifier=zero_shot"]))
    with pytest.raises(ValueError, match=r"backbones must be a non-empty list"):
        run(_cli_cfg(tmp_path, ["backbones=[]"]))
    assert list(tmp_path.iterdir()) == []


def test_issue14_cli_writes_the_report(tmp_path) -> None:
    from src.divergence_radius.__main__ import run

    out = run(_cli_cfg(tmp_path, []))
    names = {p.name for p in out.iterdir()}
    want = {"divergence_radius.md", "divergence_radius.csv", "divergence_radius.json", "per_image.csv"}
    want |= {"acc_p_vs_divergence_radius.png", "acc_p_vs_cosine_robustness.png", "regression_mse.png"}
    assert want | {"r_dr_by_perturbation.png"} <= names
    data = json.loads((out / "divergence_radius.json").read_text())
    assert list(data) == ["timm:test_efficientnet"] and data["timm:test_efficientnet"]["config"]["chunk_size"] == 4
    with open(out / "per_image.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["backbone"] for r in rows] == ["timm:test_efficientnet"] * 4 and rows[0].keys() == {
        "backbone", "image", "perturbation", "r_dr", "r_cs", "acc_p"
    }  # fmt: skip
