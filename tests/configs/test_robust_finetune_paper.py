"""experiment=robust_finetune_paper: §6.2 of the DivergenceRadius paper (Liu et al., "Robustness of Vision Foundation
Models to Common Perturbations", arXiv:2604.14973) as one command: it composes with the paper's settings and Table 9's
lambda multirun, stops offline before any computation naming the missing weights, and runs end to end (one batch per
stage) with a tiny random-weight open_clip model on a tiny image folder, the zero-shot accuracy logged at validation."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from src.backbones import MissingWeightsError

from ..cli.conftest import compose_cfg
from .test_paper_presets import _Constructed, offline_no_construction  # noqa: F401 (a fixture)

CONFIGS = Path(__file__).resolve().parents[2] / "configs"
PRESET = ["experiment=robust_finetune_paper"]


def test_composes_with_the_papers_settings(tmp_path) -> None:
    cfg = compose_cfg("train.yaml", PRESET, tmp_path)
    assert cfg.backbone.name == "open_clip:ViT-L-14" and cfg.backbone.pretrained == "openai"
    assert cfg.model._target_.endswith("PerturbationRobustFineTune")
    assert list(cfg.model.perturbations) == ["jpeg_compression"] and cfg.model.lr == 1e-5 and cfg.model.lam == 1.0
    assert cfg.model.zero_shot_eval is True and cfg.model.zero_shot_every_val is True
    assert cfg.trainer.max_epochs == 50 and cfg.data.name == "imagefolder" and cfg.data.image_size == 224
    assert cfg.data.root.endswith("data/imagenet_20k") and cfg.data.test_root.endswith("data/imagenet/val")
    assert cfg.model.zero_shot_class_names == "imagenet" and cfg.data.num_classes == 1000
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONFIGS)):
        full = compose(config_name="train.yaml", overrides=PRESET, return_hydra_config=True)
    assert str(full.hydra.sweeper.params["model.lam"]) == "0,0.5,1,5"  # Table 9's lambdas: -m runs the four


def test_offline_stops_before_any_computation_naming_the_weights(tmp_path, offline_no_construction) -> None:  # noqa: F811
    from src.train import train

    overrides = [*PRESET, f"data.root={tmp_path}/absent", f"data.test_root={tmp_path}/absent_val"]
    cfg = compose_cfg("train.yaml", overrides, tmp_path)
    try:
        with pytest.raises(Exception, match=r"open_clip 'ViT-L-14' are not available offline") as err:
            train(cfg)
    except _Constructed:
        pytest.skip("the ViT-L/14 weights are cached on this machine")
    cause = err.value
    while cause is not None and not isinstance(cause, MissingWeightsError):
        cause = cause.__cause__ or cause.__context__
    assert isinstance(cause, MissingWeightsError)
    assert not list(tmp_path.rglob("*.ckpt")) and not list(tmp_path.rglob("metrics.json"))


def _folder(root: Path, classes: list[str], per_class: int) -> Path:
    from PIL import Image

    g = torch.Generator().manual_seed(0)
    for c in classes:
        (root / c).mkdir(parents=True)
        for i in range(per_class):
            pixels = (torch.rand(32, 32, 3, generator=g) * 255).to(torch.uint8).numpy()
            Image.fromarray(pixels).save(root / c / f"{i}.png")
    return root


def test_runs_end_to_end_with_a_tiny_clip_logging_zero_shot_at_validation(tmp_path, tiny_clip) -> None:
    from src.train import train

    train_dir = _folder(tmp_path / "train", ["n001", "n002"], 10)
    test_dir = _folder(tmp_path / "val", ["n001", "n002"], 3)
    overrides = [
        *PRESET,
        f"backbone.name=open_clip:{tiny_clip}",
        "backbone.pretrained=null",
        f"data.root={train_dir}",
        f"data.test_root={test_dir}",
        "data.num_classes=2",
        "data.image_size=32",
        "data.batch_size=4",
        "data.num_workers=0",
        "model.zero_shot_class_names=[cat,dog]",
        "trainer.precision=32",
        "trainer.max_epochs=1",
        "+trainer.limit_train_batches=1",
        "+trainer.limit_val_batches=1",
        "+trainer.limit_test_batches=1",
        "callbacks.divergence_radius.num_images=2",
        "callbacks.divergence_radius.image_size=32",
        "callbacks.divergence_radius.m=2",
        "logger=csv",
    ]
    cfg = compose_cfg("train.yaml", overrides, tmp_path)
    metrics, objs = train(cfg)
    assert objs["trainer"].state.finished
    assert {"val/zero_shot/acc_before", "val/zero_shot/acc_after"} <= set(metrics), sorted(metrics)
    assert {"test/zero_shot/acc_before", "test/zero_shot/acc_after"} <= set(metrics), sorted(metrics)
    ckpt = sorted(tmp_path.rglob("last.ckpt"))
    assert ckpt, "the preset keeps checkpoints/last.ckpt (Fig. 7's Food101 half evaluates it)"

    # Fig. 7's Food101 half: the ImageNet-trained checkpoint evaluated zero-shot on another folder, whose names
    # (underscores read as spaces) become the prompts: eval.zero_shot_class_names=data
    from src import eval as eval_cli
    from src.models import robust_finetune

    food_train = _folder(tmp_path / "food_train", ["apple_pie", "beignets"], 3)  # the module checks test's classes
    food = _folder(tmp_path / "food_test", ["apple_pie", "beignets"], 3)
    used: list[list[str]] = []
    real = robust_finetune.zero_shot_head

    def spy(spec, names, **kw):
        used.append(list(names))
        return real(spec, names, **kw)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr("src.models.robust_finetune.zero_shot_head", spy)
        ev = [*PRESET, f"ckpt_path={ckpt[-1]}", f"data.root={food_train}", f"data.test_root={food}",
              "data.num_classes=2", "data.image_size=32", "data.batch_size=4", "data.num_workers=0",
              "trainer.precision=32", "+trainer.limit_test_batches=1", "eval.zero_shot_class_names=data"]  # fmt: skip
        out = eval_cli.evaluate(compose_cfg("eval.yaml", ev, tmp_path / "eval"))
    assert {"test/zero_shot/acc_before", "test/zero_shot/acc_after"} <= set(out), sorted(out)
    assert used and used[-1] == ["apple pie", "beignets"]  # the data's names, not the checkpoint's [cat, dog]


def test_eval_zero_shot_class_names_override() -> None:
    from src.eval import zero_shot_overrides

    hp = {"zero_shot_class_names": "imagenet"}
    assert zero_shot_overrides(hp, {"zero_shot_class_names": None}) == {}  # null: the checkpoint's
    assert zero_shot_overrides(hp, {"zero_shot_class_names": "data"}) == {"zero_shot_class_names": None}
    assert zero_shot_overrides(hp, {"zero_shot_class_names": ["a_b", "c"]}) == {"zero_shot_class_names": ["a_b", "c"]}
    assert len(zero_shot_overrides({}, {})) == 0
    with pytest.raises(ValueError, match=r"this checkpoint's model has none: leave eval.zero_shot_class_names=null"):
        zero_shot_overrides({"num_classes": 10}, {"zero_shot_class_names": "data"})
    with pytest.raises(ValueError, match=r"eval.zero_shot_class_names must be a list of names .* got the string"):
        zero_shot_overrides(hp, {"zero_shot_class_names": "food101"})
