"""DivergenceRadius and Task Prior take their probe images in one vocabulary (src.images.probe_images): the same
``images=`` choices and errors, each keeping its default; DivergenceRadius's ``source=`` is a deprecated alias."""

from __future__ import annotations

import inspect
import warnings
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import TensorDataset

from src.callbacks import DivergenceRadiusCallback, TaskPriorCallback
from src.images.probe_images import IMAGE_SOURCES


class _DM:
    def __init__(self, x: torch.Tensor) -> None:
        self.val_dataset = TensorDataset(x, torch.zeros(len(x)))


def _trainer(dm=None) -> SimpleNamespace:
    return SimpleNamespace(global_rank=0, world_size=1, current_epoch=0, datamodule=dm)


def _dr(**kw) -> DivergenceRadiusCallback:
    return DivergenceRadiusCallback(**{"num_images": 4, "image_size": 16, "progress": False, **kw})


def _tp(**kw) -> TaskPriorCallback:
    opts = {"prior_backbone": None, "prior_features": torch.ones(4, 2), "num_images": 4, "image_size": 16}
    return TaskPriorCallback(**{**opts, "progress": False, **kw})


def _tp_images(cb: TaskPriorCallback, trainer: SimpleNamespace) -> torch.Tensor:
    cb._ready(trainer, None)  # the image set, then the prior (prior_features given: no backbone is built)
    return cb.images


def _val() -> torch.Tensor:
    return torch.rand(6, 3, 16, 16, generator=torch.Generator().manual_seed(0))


def test_both_callbacks_take_the_same_images_argument_with_their_own_defaults() -> None:
    for cls, default in ((DivergenceRadiusCallback, "auto"), (TaskPriorCallback, "val")):
        assert inspect.signature(cls).parameters["images"].default == default
    val = _val()
    for source in IMAGE_SOURCES:  # at 16 px neither resizes the 16 px validation images: the same probe set
        dr, tp = _dr(images=source), _tp(images=source)
        assert dr.source == source and tp._identity()["images"] == source
        assert torch.equal(dr.probe_images(_trainer(_DM(val))), _tp_images(tp, _trainer(_DM(val))))
    x = val[:4]
    assert torch.equal(_dr(images=x).images, x) and torch.equal(_tp_images(_tp(images=x), _trainer()), x)
    for make in (_dr, _tp):
        with pytest.raises(
            ValueError,
            match=r"Callback: images='nope' is not a probe-image source; images must be "
            r"one of 'auto', 'val', 'photos', 'digits'",
        ):
            make(images="nope")
        with pytest.raises(ValueError, match=r"images= holds 6 images but num_images=4"):
            make(images=val)  # refused when the callback is made, not at the first epoch end


def test_val_without_validation_images_is_one_error_for_both() -> None:
    for cb, build in ((_dr(images="val"), lambda cb: cb.probe_images(_trainer())),
                      (_tp(images="val"), lambda cb: _tp_images(cb, _trainer()))):  # fmt: skip
        with pytest.raises(ValueError, match=r"\(images='val'\): there are no validation images.*images='auto'"):
            build(cb)
    # auto falls back to the bundled photos in both
    assert torch.equal(_dr(images="auto").probe_images(_trainer()), _tp_images(_tp(images="auto"), _trainer()))


def test_task_prior_keeps_validation_images_at_their_size() -> None:
    """TaskPrior's validation images are not resized (resize=False: its numbers do not move); DivergenceRadius
    resizes them to image_size."""
    val = torch.rand(6, 1, 24, 24, generator=torch.Generator().manual_seed(1))
    tp = _tp_images(_tp(images="val"), _trainer(_DM(val)))
    assert tp.shape == (4, 3, 24, 24) and torch.equal(tp[:, 1], val[:4, 0])
    assert _dr(images="val").probe_images(_trainer(_DM(val))).shape == (4, 3, 16, 16)
    with pytest.raises(ValueError, match=r"TaskPriorCallback: the probe set has 1 image\(s\), it needs >= 2"):
        _tp_images(_tp(images="val"), _trainer(_DM(val[:1])))


def test_deprecated_source_alias() -> None:
    val = _val()
    for source in ("auto", "val", "photos", "digits"):
        with pytest.warns(DeprecationWarning, match=rf"source='{source}'\) is deprecated.*use images='{source}'"):
            old = _dr(source=source)
        new = _dr(images=source)
        assert old.source == source and old._identity() == new._identity()
        assert torch.equal(old.probe_images(_trainer(_DM(val))), new.probe_images(_trainer(_DM(val))))
    for images in ("photos", val[:4]):
        with (
            pytest.warns(DeprecationWarning),
            pytest.raises(
                ValueError,
                match=r"source= is the deprecated alias "
                r"of images=; give images= only",
            ),
        ):
            _dr(source="val", images=images)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)  # images= alone: no warning
        _dr(images="val")


def test_checkpoint_identity_keeps_the_source_key() -> None:
    """The state key (checkpoints) holds "source" = the source name as before; a tensor keeps "auto", the value
    earlier versions wrote (their source= default) next to images=<tensor>."""
    assert _dr(images="val")._identity()["source"] == "val"
    assert _dr()._identity()["source"] == "auto"
    x = _val()[:4]
    assert _dr(images=x)._identity()["source"] == "auto" and _dr(images=x).source == "tensor"
