"""Each backbone its own downstream head in one DivergenceRadius run (issue 28, the paper's Tables 2 / 3 and Fig. 4:
zero-shot for the CLIP models, a linear probe for DINOv2): ``classifier="auto"`` or one head per backbone, and the
zero-shot prompts' class names (a bundled list by name, folder names read as words, WordNet-id folders refused)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir

from src.backbones.spec import build_backbone
from src.divergence_radius import compare_backbones
from src.divergence_radius.compare import backbone_classifiers, check_comparison
from src.divergence_radius.downstream import DEFAULT_TEMPLATES as DEFAULT
from src.divergence_radius.downstream import DIGIT_NAMES, open_clip_zero_shot, prompt_class_names
from src.divergence_radius.report import digits_split, robustness_report

ROOT = Path(__file__).resolve().parents[2]
SWEEP = {"perturbations": ["brightness"], "m": 1, "chunk_size": 4, "seed": 0}
DATA = {"image_size": 32, "n_train": 30, "n_test": 4}


def test_auto_gives_clip_backbones_zero_shot_and_the_others_a_probe() -> None:
    clip, clip_raw, vit = "open_clip:ViT-B-32", {"name": "open_clip:RN50", "projection": False}, "timm:test_vit"
    assert backbone_classifiers([clip, vit], "auto") == ["zero_shot", "linear"]
    assert backbone_classifiers([clip_raw], "auto") == ["linear"]  # no joint space: no text tower to score against
    assert backbone_classifiers([clip, vit], ["linear", "auto"]) == ["linear", "linear"]
    assert backbone_classifiers([clip, vit], "linear") == ["linear", "linear"]
    with pytest.raises(ValueError, match=r"one head per backbone: 1 given for 2 backbone\(s\)"):
        backbone_classifiers([clip, vit], ["auto"])
    with pytest.raises(ValueError, match=r"classifier must be 'linear' .* got 'svm'"):
        backbone_classifiers([clip], ["svm"])
    with pytest.raises(ValueError, match=r"needs open_clip backbones .*\['timm:test_vit'\].*classifier='auto'"):
        backbone_classifiers([clip, vit], ["auto", "zero_shot"])
    with pytest.raises(ValueError, match=r"needs open_clip backbones .*\['open_clip:RN50'\]"):
        backbone_classifiers([clip_raw], "zero_shot")


def test_the_plan_names_each_head_and_the_prompts() -> None:
    plan = check_comparison(["open_clip:ViT-B-32", "timm:test_vit"], classifier="auto")
    assert plan.classifiers == ("zero_shot", "linear") and plan.class_names == DIGIT_NAMES
    assert check_comparison(["timm:test_vit"]).class_names is None  # no zero-shot backbone: no names needed
    # a mixed run needs the probe's training images with images= (the linear backbone), and names for the labels
    x, y = torch.rand(4, 3, 16, 16), torch.tensor([0, 1, 2, 3])
    with pytest.raises(ValueError, match=r"pass train_images= and train_labels="):
        check_comparison(["open_clip:ViT-B-32", "timm:test_vit"], classifier="auto", images=x, labels=y)
    with pytest.raises(ValueError, match=r"labels go up to 3 and class_names has 2 name\(s\)"):
        check_comparison(["open_clip:ViT-B-32"], classifier="auto", images=x, labels=y, class_names=["a", "b"])
    names = check_comparison(["open_clip:ViT-B-32"], classifier="zero_shot", class_names="imagenet").class_names
    assert len(names) == 1000


def test_prompt_class_names() -> None:
    from open_clip.zero_shot_metadata import IMAGENET_CLASSNAMES

    imagenet = prompt_class_names("imagenet")
    assert imagenet == list(IMAGENET_CLASSNAMES) and imagenet[0] == "tench" and len(imagenet) == 1000
    assert prompt_class_names(["apple_pie", "baby back ribs"]) == ["apple_pie", "baby back ribs"]  # given: as is
    assert prompt_class_names(["apple_pie", "beignets"], from_folders=True) == ["apple pie", "beignets"]
    assert prompt_class_names([str(d) for d in range(10)], from_folders=True) == list(DIGIT_NAMES)
    with pytest.raises(ValueError, match=r"WordNet ids \(\['n01440764'.*set class_names=imagenet"):
        prompt_class_names(["n01440764", "n01443537"], from_folders=True)
    with pytest.raises(ValueError, match=r"one of \['imagenet'\], got the string 'food'"):
        prompt_class_names("food")
    with pytest.raises(ValueError, match=r"non-empty names"):
        prompt_class_names(["a", " "])


def test_a_mixed_run_is_each_backbone_with_its_own_head(tiny_clip) -> None:
    """classifier="auto" on [tiny CLIP, timm ViT]: each backbone's report equals robustness_report with its own head —
    the CLIP one zero-shot (its random text tower seeded by the sweep's seed, as the image tower), the ViT one a probe
    (same objects, same data, same arithmetic: equal exactly)."""
    specs = [{"name": f"open_clip:{tiny_clip}", "pretrained": None}, {"name": "timm:test_vit", "pretrained": False}]
    report = compare_backbones(specs, SWEEP, classifier="auto", **DATA)
    x_tr, y_tr, x_te, y_te = digits_split(**DATA, seed=0)
    refs = {}
    for spec in specs:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(0)
            refs[spec["name"]] = build_backbone(spec).eval()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        head = open_clip_zero_shot(tiny_clip, list(DIGIT_NAMES))
    clip_label, vit_label = f"open_clip:{tiny_clip}", "timm:test_vit"
    zero = robustness_report(refs[clip_label].embed, x_tr, y_tr, x_te, y_te, SWEEP, backbone_name=clip_label,
                             classifier=head, device="cpu")  # fmt: skip
    probe = robustness_report(refs[vit_label].embed, x_tr, y_tr, x_te, y_te, SWEEP, backbone_name=vit_label,
                              device="cpu")  # fmt: skip
    assert report.data == {clip_label: zero.to_dict(), vit_label: probe.to_dict()}
    assert zero.head != probe.head  # the summary table names each backbone's head
    assert f"| {clip_label} | {zero.head} |" in report.markdown and f"| {vit_label} | {probe.head} |" in report.markdown


def _folder(root: Path, names: list[str]) -> None:
    from PIL import Image

    for split in ("train", "val"):
        for k, name in enumerate(names):
            d = root / split / name
            d.mkdir(parents=True)
            for i in range(3):
                Image.new("RGB", (20, 20), (40 * k, 10 * i, 90)).save(d / f"{i}.png")


def _cfg(tmp_path: Path, extra: list[str]):
    overrides = [f"paths.output_dir={tmp_path / 'out'}", "data=imagefolder", f"data.root={tmp_path}/train",
                 f"data.test_root={tmp_path}/val", "data.num_classes=2", "image_size=16", "n_train=null",
                 "n_test=null", "divergence_radius.m=1", "divergence_radius.perturbations=[brightness]", *extra]  # fmt: skip
    with initialize_config_dir(str(ROOT / "configs"), version_base="1.3"):
        return compose("divergence_radius.yaml", overrides=overrides)


def test_cli_reads_folder_names_as_prompts_and_refuses_wordnet_ids(tmp_path, tiny_clip, monkeypatch) -> None:
    """With data=imagefolder and zero-shot, the folders' names are the prompts' (``_`` a space); ImageNet's WordNet-id
    folders are refused before any backbone is built, naming class_names=imagenet."""
    from src.divergence_radius.__main__ import comparison_arguments, data_arguments, run

    _folder(tmp_path, ["apple_pie", "beignets"])
    clip = f'backbones=[{{name: "open_clip:{tiny_clip}", pretrained: null}}]'
    cfg = _cfg(tmp_path, [clip, "classifier=auto"])
    args = data_arguments(cfg, comparison_arguments(cfg)["config"].seed)
    assert args["class_names"] == ["apple pie", "beignets"] and "train_images" not in args  # zero-shot: no probe
    mixed = _cfg(tmp_path, [f'backbones=[{{name: "open_clip:{tiny_clip}", pretrained: null}}, "timm:test_vit"]',
                            "classifier=[zero_shot,linear]"])  # fmt: skip
    args = data_arguments(mixed, 0)
    assert args["class_names"] == ["apple pie", "beignets"] and args["train_images"].shape[0] >= 2  # the probe's split

    wn = tmp_path / "wn"
    _folder(wn, ["n01440764", "n01443537"])
    monkeypatch.setattr("src.divergence_radius.compare.build_backbone", lambda *a, **k: pytest.fail("built"))
    with pytest.raises(ValueError, match=r"WordNet ids .* set class_names=imagenet"):
        run(_cfg(wn, [clip, "classifier=auto"]))


# ---------------------------------------------------------------- each backbone at its native size


def test_native_size_runs_each_group_at_its_side_and_merges(tiny_clip) -> None:
    """image_size="native" (the paper's six models: RN50x64 448 px, the others 224): [tiny CLIP (fixed 32 px), a timm
    net (160 px), another CLIP] = the two groups compared separately at their sides, merged in list order under the
    whole list's labels (same computation per backbone: equal exactly)."""
    clip = {"name": f"open_clip:{tiny_clip}", "pretrained": None}
    net = {"name": "timm:test_efficientnet", "pretrained": False}
    clip2 = {
        "name": f"open_clip:{tiny_clip}",
        "pretrained": None,
        "projection": False,
    }  # same name: labels carry options
    sweep, sizes = {**SWEEP, "perturbations": ["contrast"]}, {"n_train": 12, "n_test": 4}
    report = compare_backbones([clip, net, clip2], sweep, classifier="auto", image_size="native", **sizes)
    small = compare_backbones([clip, clip2], sweep, classifier=["zero_shot", "linear"], image_size=32, **sizes)
    big = compare_backbones([net], sweep, classifier="linear", image_size=160, **sizes)
    labels = list(report.data)
    assert labels[1] == "timm:test_efficientnet" and labels[0] != labels[2] and "projection=False" in labels[2]
    want = {labels[0]: small.data[list(small.data)[0]], labels[1]: big.data["timm:test_efficientnet"],
            labels[2]: small.data[list(small.data)[1]]}  # fmt: skip
    assert report.data == want
    assert [r["backbone"] for r in report.rows] == labels  # one perturbation: a row per backbone, list order


def test_a_fixed_size_backbone_at_another_size_is_refused_before_any_work(tiny_clip, monkeypatch) -> None:
    specs = [{"name": f"open_clip:{tiny_clip}", "pretrained": None}, {"name": "timm:test_vit", "pretrained": False}]
    monkeypatch.setattr("src.divergence_radius.report.robustness_report", lambda *a, **k: pytest.fail("ran"))
    with pytest.raises(ValueError, match=r"\(32x32\)'\] accept only their native input size .* set image_size=native"):
        compare_backbones(specs, SWEEP, classifier="auto", image_size=64, n_train=12, n_test=4)
    with pytest.raises(ValueError, match=r"with images= leave it None"):
        compare_backbones(specs, SWEEP, image_size="native", images=torch.rand(4, 3, 32, 32))


def test_cli_native_size_with_data_reads_the_data_at_each_side(tmp_path, tiny_clip) -> None:
    """data=imagefolder image_size=native: the backbones' groups each get the folder's images at their side; the
    report lists both backbones in order."""
    from src.divergence_radius.__main__ import run

    _folder(tmp_path, ["cat", "dog"])
    specs = f'backbones=[{{name: "open_clip:{tiny_clip}", pretrained: null}}, {{name: timm:test_efficientnet, pretrained: false}}]'
    out = run(_cfg(tmp_path, [specs, "classifier=auto", "image_size=native"]))
    data = json.loads((out / "divergence_radius.json").read_text())
    assert list(data) == [f"open_clip:{tiny_clip}", "timm:test_efficientnet"]
    assert (
        "zero" in data[f"open_clip:{tiny_clip}"]["classifier"]
        and "linear" in data["timm:test_efficientnet"]["classifier"]
    )


def test_a_timm_vit_built_for_another_resolution_reports_that_size() -> None:
    """{name: timm:<vit>, img_size: 224} (DINOv2 at 224 px instead of its pretrained 518): the backbone's native size
    is the one it was built for (its positional embedding's), which image_size=native and the fixed-size check read."""
    from src.backbones.spec import native_sizes

    spec = {"name": "timm:vit_small_patch14_dinov2", "pretrained": False, "img_size": 28}
    bb = build_backbone(spec)
    assert tuple(bb.input_size) == (3, 28, 28) and bb.fixed_input_size
    assert native_sizes([spec, {"name": "timm:vit_small_patch14_dinov2", "pretrained": False}]) == [
        (28, 28),
        (518, 518),
    ]


def test_the_zero_shot_head_loads_the_text_tower_of_the_specs_own_weights(tiny_clip, tmp_path) -> None:
    """A spec with checkpoint_path (or a built Backbone carrying that spec) gets the text tower of that file — before,
    the comparison read only ``pretrained`` and drew a random text tower for it, silently."""
    import open_clip

    from src.divergence_radius.downstream import zero_shot_head, zero_shot_weights

    torch.manual_seed(3)
    clip = open_clip.create_model(tiny_clip).eval()
    path = tmp_path / "clip.pt"
    torch.save(clip.state_dict(), path)
    spec = {"name": f"open_clip:{tiny_clip}", "checkpoint_path": str(path)}
    ref = zero_shot_weights(clip.encode_text, open_clip.get_tokenizer(tiny_clip), ["cat", "dog"], DEFAULT)
    for given in (spec, build_backbone(spec)):
        head = zero_shot_head(given, ["cat", "dog"], seed=99)  # the seed only draws a random tower: unused here
        # the same weights through the same float32 text forward: equal up to float32 round-off
        torch.testing.assert_close(head.text_weights, ref)
    bare = build_backbone(spec)
    del bare.spec
    with pytest.raises(ValueError, match=r"carries no spec; pass it as \{name: ..., pretrained: ...\}"):
        zero_shot_head(bare, ["cat"])
