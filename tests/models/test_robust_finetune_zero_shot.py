"""PerturbationRobustFineTune's zero-shot accuracy before/after fine-tuning (Liu et al., "Robustness of Vision
Foundation Models to Common Perturbations", arXiv:2604.14973, Table 9 ACC), on a tiny random-weight open_clip model."""

from __future__ import annotations

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from src.divergence_radius.downstream import zero_shot_weights
from src.models import PerturbationRobustFineTune
from src.models.robust_finetune import zero_shot_class_names
from tests._lightning import quiet_trainer

NAMES = ["cat", "dog", "car"]


def _model(arch: str, **kw) -> PerturbationRobustFineTune:
    torch.manual_seed(0)
    kw.setdefault("perturbations", ["gaussian_noise"])
    kw.setdefault("scheduler", None)
    return PerturbationRobustFineTune({"name": f"open_clip:{arch}", "pretrained": None}, **kw)


def _images(n: int = 12) -> torch.Tensor:
    return torch.rand(n, 3, 32, 32, generator=torch.Generator().manual_seed(1))


def _independent_accuracy(z: torch.Tensor, text: torch.Tensor, y: torch.Tensor) -> float:
    """Zero-shot accuracy from embeddings and class text embeddings, written out: argmax of the cosine."""
    cos = torch.nn.functional.normalize(z.double(), dim=1) @ torch.nn.functional.normalize(text.double(), dim=1).T
    return float((cos.argmax(1) == y).double().mean())


def _test(model: PerturbationRobustFineTune, x: torch.Tensor, y: torch.Tensor) -> dict[str, float]:
    trainer = quiet_trainer()
    trainer.test(model, DataLoader(TensorDataset(x, y), batch_size=5), verbose=False)
    return {k: float(v) for k, v in trainer.callback_metrics.items()}


def test_table9_before_is_teacher_and_after_is_student_zero_shot_accuracy(tiny_clip):
    import open_clip

    model = _model(tiny_clip, zero_shot_class_names=NAMES)
    x = _images()
    # the text tower, built independently: the same architecture drawn from model.seed (random weights)
    torch.manual_seed(0)
    clip = open_clip.create_model(tiny_clip).eval()
    text = zero_shot_weights(clip.encode_text, open_clip.get_tokenizer(tiny_clip), NAMES)
    with torch.no_grad():
        zt = model.teacher.embed(x)
        # labels = the teacher's own zero-shot predictions: before must be exactly 1
        y = (torch.nn.functional.normalize(zt, dim=1) @ text.T).argmax(1)
        with torch.no_grad():  # "fine-tune" the student: a fixed change of its weights
            for p in model.backbone.parameters():
                p.add_(0.5 * torch.randn(p.shape, generator=torch.Generator().manual_seed(2)))
        zs = model.backbone.embed(x)
    after = _independent_accuracy(zs, text, y)
    metrics = _test(model, x, y)
    torch.testing.assert_close(model.zero_shot.text_weights, text)  # same text tower (float32 round-off only)
    # accuracies are means of 0/1 hits over 12 images, exact in float32 (multiples of 1/12, rounded once): 1e-6
    assert metrics["test/zero_shot/acc_before"] == pytest.approx(1.0, abs=1e-6)
    assert metrics["test/zero_shot/acc_before"] == pytest.approx(_independent_accuracy(zt, text, y), abs=1e-6)
    assert metrics["test/zero_shot/acc_after"] == pytest.approx(after, abs=1e-6)
    assert after < 1.0, "the perturbed student should change some predictions (else the test shows nothing)"


def test_table9_not_measured_for_other_backbones_by_default():
    torch.manual_seed(0)
    model = PerturbationRobustFineTune({"name": "timm:test_efficientnet", "pretrained": False}, scheduler=None)
    metrics = _test(model, _images(4)[:, :, :16, :16], torch.zeros(4, dtype=torch.long))
    assert "test/utility" in metrics and not any("zero_shot" in k for k in metrics)


def test_table9_zero_shot_eval_needs_open_clip():
    with pytest.raises(ValueError, match=r"open_clip backbone.*timm:test_efficientnet.*zero_shot_eval=false"):
        PerturbationRobustFineTune({"name": "timm:test_efficientnet", "pretrained": False}, zero_shot_eval=True)
    with pytest.raises(ValueError, match="zero_shot_eval must be true, false or 'auto'"):
        PerturbationRobustFineTune({"name": "timm:test_efficientnet", "pretrained": False}, zero_shot_eval="yes")


def test_table9_missing_class_names_and_labels_out_of_range_are_refused(tiny_clip):
    x = _images(4)
    with pytest.raises(ValueError, match=r"no `class_names`.*model\.zero_shot_class_names"):
        _test(_model(tiny_clip, zero_shot_eval=True), x, torch.zeros(4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"labels span \[0, 5\] but there are 3 zero-shot class names"):
        _test(_model(tiny_clip, zero_shot_class_names=NAMES), x, torch.tensor([0, 1, 2, 5]))


def test_table9_auto_skips_unlabelled_data_with_a_warning(tiny_clip, caplog):
    with caplog.at_level("WARNING", logger="repbench"):
        metrics = _test(_model(tiny_clip), _images(4), torch.zeros(4, dtype=torch.long))
    assert "test/utility" in metrics and not any("zero_shot" in k for k in metrics)
    assert "zero-shot accuracy not measured: the data has no class_names" in caplog.text


def test_table9_class_names_from_the_data_module():
    class Digits:
        class_names = [str(d) for d in range(10)]

    class Named:
        class_names = ["airplane", "bird"]

    assert zero_shot_class_names(None, Digits())[:3] == ["zero", "one", "two"]  # words, not "0", for the text tower
    assert zero_shot_class_names(None, Named()) == ["airplane", "bird"]
    assert zero_shot_class_names(["a", "b"], Digits()) == ["a", "b"]  # an explicit list wins


def test_fig7c_zero_shot_accuracy_at_every_validation(tiny_clip):
    """zero_shot_every_val: val/zero_shot/acc_before|acc_after at each validation (a curve over the epochs, Fig. 7c);
    off by default, and refused with zero_shot_eval=false."""
    import lightning as L

    x = _images()
    y = torch.tensor([0, 1, 2] * 4)
    loader = DataLoader(TensorDataset(x, y), batch_size=6)

    class Record(L.Callback):
        def __init__(self) -> None:
            self.seen: list[dict[str, float]] = []

        def on_validation_end(self, trainer, pl_module) -> None:  # after the module's on_validation_epoch_end
            self.seen.append({k: float(v) for k, v in trainer.callback_metrics.items() if "zero_shot" in k})

    model = _model(tiny_clip, zero_shot_class_names=NAMES, zero_shot_every_val=True, lr=1e-2)
    trainer = quiet_trainer()
    trainer.validate(model, loader, verbose=False)  # before training the student is the teacher
    first = {k: float(v) for k, v in trainer.callback_metrics.items()}
    with torch.no_grad():
        zt = model.teacher.embed(x)
    expected = _independent_accuracy(zt, model.zero_shot.text_weights, y)
    assert first["val/zero_shot/acc_before"] == pytest.approx(expected, abs=1e-6)
    assert first["val/zero_shot/acc_after"] == pytest.approx(expected, abs=1e-6)

    record = Record()
    fit = quiet_trainer(max_epochs=2, num_sanity_val_steps=0, callbacks=[record])
    fit.fit(model, loader, loader)
    assert len(record.seen) == 2
    assert all(set(r) == {"val/zero_shot/acc_before", "val/zero_shot/acc_after"} for r in record.seen)
    assert record.seen[-1]["val/zero_shot/acc_before"] == pytest.approx(expected, abs=1e-6)  # the frozen teacher

    default = _model(tiny_clip, zero_shot_class_names=NAMES)
    plain = quiet_trainer()
    plain.validate(default, loader, verbose=False)
    assert not any("zero_shot" in k for k in plain.callback_metrics)
    with pytest.raises(ValueError, match="zero_shot_every_val=true needs the zero-shot head"):
        _model(tiny_clip, zero_shot_eval=False, zero_shot_every_val=True)


def test_imagenet_class_names_are_openais():
    from open_clip.zero_shot_metadata import IMAGENET_CLASSNAMES

    names = zero_shot_class_names("imagenet", None)
    assert len(names) == 1000 and names[:2] == ["tench", "goldfish"] and names == list(IMAGENET_CLASSNAMES)
    with pytest.raises(
        ValueError,
        match=r"model.zero_shot_class_names must be a list of names .* one of \['imagenet'\], got the string 'cifar'",
    ):
        zero_shot_class_names("cifar", None)
