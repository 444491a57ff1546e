"""Comparing backbones with DivergenceRadius (Liu et al., "Robustness of Vision Foundation Models to Common
Perturbations", arXiv:2604.14973, §5): the per-backbone downstream report
(:func:`~src.divergence_radius.report.robustness_report`: linear probe or zero-shot head, the sweep with ACC_p, the robustness
→ ACC_p regression) for every backbone under one :class:`~src.divergence_radius.config.DivergenceRadiusConfig`, gathered
into one :class:`~src.utils.report_writer.Report` (``method="divergence_radius"``), the shape every method's
``compare_backbones`` returns.

Files of ``Report.write(out)``: ``divergence_radius.md`` (a cross-backbone summary table, then each backbone's
per-perturbation table), ``divergence_radius.csv`` (one row per backbone and perturbation), ``divergence_radius.json``
({backbone label: RobustnessReport.to_dict()}), ``per_image.csv`` (backbone, image, perturbation, r_dr, r_cs, acc_p),
``r_dr_by_perturbation.png`` and each backbone's figures ``acc_p_vs_divergence_radius.png`` (Fig. 5),
``acc_p_vs_cosine_robustness.png`` (Fig. 17), ``regression_mse.png`` (Fig. 10): under these names for a single
backbone, prefixed with the backbone's label (``<label>__acc_p_vs_divergence_radius.png``, characters other than
letters, digits, ``.``, ``_`` and ``-`` replaced by ``_``) when there are several.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import torch
from torch import Tensor

from ..backbones.spec import (
    BackboneLike,
    backbone_labels,
    backbone_list,
    build_backbone,
    check_buildable,
    spec_name,
)
from ..features import extractor_options
from ..perturbations import MIN_SIZE
from ..perturbations.registry import check_perturbable_images
from ..utils.progress import progress_sink
from ..utils.report_writer import Report
from .config import DivergenceRadiusConfig
from .downstream import DEFAULT_TEMPLATES
from .report import (
    RobustnessReport,
    check_split_sizes,
    digits_split,
    divergence_radius_report,
    robustness_report,
    zero_shot_for,
)

__all__ = ["CLASSIFIERS", "DIGIT_NAMES", "DIGITS_SPLIT", "compare_backbones", "check_comparison"]

log = logging.getLogger("repbench")

#: the downstream heads g of §5.1: a logistic-regression probe on clean features, or CLIP zero-shot (open_clip only)
CLASSIFIERS = ("linear", "zero_shot")
#: the class names of the digits, for zero-shot prompts
DIGIT_NAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")
#: the default data: scikit-learn digits upsampled to image_size, a seeded split into n_train probe-training and
#: n_test swept images (image_size 64: the probe reaches ~0.95 with EfficientNet-Lite0)
DIGITS_SPLIT = MappingProxyType({"image_size": 64, "n_train": 1000, "n_test": 200})


@dataclass(frozen=True)
class Plan:
    """A checked comparison: the backbone specs and labels, the sweep, and the digits split sizes (None with
    ``images=``)."""

    specs: list[Any]
    labels: list[str]
    config: DivergenceRadiusConfig
    digits: dict[str, int] | None


def check_comparison(
    backbones: Sequence[BackboneLike],
    config: DivergenceRadiusConfig | Mapping[str, Any] | None = None,
    *,
    images: Tensor | None = None,
    labels: Tensor | None = None,
    train_images: Tensor | None = None,
    train_labels: Tensor | None = None,
    classifier: str = "linear",
    class_names: Sequence[str] | None = None,
    image_size: int | None = None,
    n_train: int | None = None,
    n_test: int | None = None,
) -> Plan:
    """Every check of :func:`compare_backbones` that needs no backbone (the CLI runs it before its output-folder
    check): the backbone list and labels, the config, the classifier (zero-shot needs ``open_clip:`` backbones and a
    class name per label), and either the digits split sizes or the given images and labels. ValueErrors name the
    argument and the fix."""
    from ..utils.checks import check_image_size

    specs = backbone_list(backbones)
    names = backbone_labels(specs)
    cfg = DivergenceRadiusConfig.coerce(config)
    if classifier not in CLASSIFIERS:
        raise ValueError(
            f"classifier must be 'linear' (a logistic-regression probe on clean features) or 'zero_shot' (CLIP "
            f"prompts; open_clip backbones), got {classifier!r}"
        )
    if classifier == "zero_shot":
        other = [spec_name(s) for s in specs if not spec_name(s).startswith("open_clip:")]
        if other:
            raise ValueError(
                f"classifier='zero_shot' needs open_clip backbones (their text tower makes the class prompts), got "
                f"{other}; use classifier='linear' for them, or compare open_clip:<arch> backbones"
            )
    if images is None:
        if labels is not None or train_images is not None or train_labels is not None:
            raise ValueError(
                "labels=, train_images= and train_labels= go with images= (the test images); pass images= too, or "
                "none of them for the digits default"
            )
        digits = {k: DIGITS_SPLIT[k] if v is None else v for k, v in
                  (("image_size", image_size), ("n_train", n_train), ("n_test", n_test))}  # fmt: skip
        digits["image_size"] = check_image_size(digits["image_size"], "image_size")
        if digits["image_size"] < MIN_SIZE:
            raise ValueError(
                f"image_size must be >= {MIN_SIZE} (the perturbations need a margin), got {digits['image_size']}; "
                f"set image_size={DIGITS_SPLIT['image_size']} (say)"
            )
        digits["n_train"], digits["n_test"] = check_split_sizes(digits["n_train"], digits["n_test"])
        if classifier == "linear" and digits["n_train"] < 2:
            raise ValueError(
                f"classifier=linear fits a probe on n_train clean images: n_train must be >= 2, got {digits['n_train']}"
            )
        _check_class_names(classifier, class_names, len(DIGIT_NAMES) - 1)
        return Plan(specs, names, cfg, digits)
    given = {"image_size": image_size, "n_train": n_train, "n_test": n_test}
    if any(v is not None for v in given.values()):
        raise ValueError(
            f"{[k for k, v in given.items() if v is not None]} set the digits default data; with images= leave them "
            "None (the images' own size and count are used)"
        )
    _check_labelled(images, labels, "images", "labels", at_least=2, why="the regression fits on one half")
    if classifier == "linear":
        if train_images is None or train_labels is None:
            raise ValueError(
                "classifier='linear' fits a probe on clean training images: pass train_images= and train_labels= "
                "with images=, or classifier='zero_shot' for open_clip backbones"
            )
        _check_labelled(train_images, train_labels, "train_images", "train_labels", at_least=2, why="a probe")
        if len(torch.unique(train_labels)) < 2:
            raise ValueError("train_labels hold a single class; a linear probe needs at least two")
    elif train_images is not None or train_labels is not None:
        raise ValueError("train_images= / train_labels= train the linear probe; classifier='zero_shot' uses none")
    _check_class_names(classifier, class_names, int(labels.max()) if labels.numel() else 0)
    return Plan(specs, names, cfg, None)


def _check_class_names(classifier: str, class_names: Sequence[str] | None, top_label: int) -> None:
    """Zero-shot scores one prompt per class name (label i = class_names[i]): a label without a name would count as
    misclassified on every version, silently; refused."""
    if classifier != "zero_shot":
        return
    n = len(DIGIT_NAMES if class_names is None else class_names)
    if top_label >= n:
        raise ValueError(
            f"classifier='zero_shot' scores one prompt per class name, but the labels go up to {top_label} and "
            f"class_names has {n} name(s); pass one name per class (label i is class_names[i])"
        )


def _check_labelled(x: Tensor, y: Tensor | None, name: str, label_name: str, *, at_least: int, why: str) -> None:
    """Images that ``perturb`` accepts and integer labels (N,) with N >= ``at_least``."""
    check_perturbable_images(x, name)
    n = x.shape[0]
    if n < at_least:
        raise ValueError(f"{name} must hold at least {at_least} images ({why}), got {n}")
    if not isinstance(y, Tensor) or y.shape != (n,) or y.is_floating_point() or y.is_complex():
        got = f"shape {tuple(y.shape)} {y.dtype}" if isinstance(y, Tensor) else type(y).__name__
        raise ValueError(f"{label_name} must be an integer tensor of shape ({n},) (one class per image), got {got}")
    if n and int(y.min()) < 0:
        raise ValueError(f"{label_name} must be class indices >= 0, got {int(y.min())}")


def _pretrained(spec: Any, backbone: Any) -> str | None:
    """The open_clip ``pretrained`` tag or file of a backbone spec (its text tower must load the same weights)."""
    opts = spec if isinstance(spec, Mapping) else getattr(backbone, "spec", None)
    value = opts.get("pretrained") if isinstance(opts, Mapping) else None
    return value if isinstance(value, str) else None


def compare_backbones(
    backbones: Sequence[BackboneLike],
    config: DivergenceRadiusConfig | Mapping[str, Any] | None = None,
    *,
    images: Tensor | None = None,
    labels: Tensor | None = None,
    train_images: Tensor | None = None,
    train_labels: Tensor | None = None,
    classifier: str = "linear",
    templates: Sequence[str] = DEFAULT_TEMPLATES,
    class_names: Sequence[str] | None = None,
    image_size: int | None = None,
    n_train: int | None = None,
    n_test: int | None = None,
    probe_C: float = 1.0,
    device: str | torch.device = "cpu",
    progress: bool | Callable[[str], None] = False,
    extractor: Mapping[str, Any] | None = None,
) -> Report:
    """The §5 protocol (:func:`~src.divergence_radius.report.robustness_report`) for every backbone under one sweep
    ``config`` (a DivergenceRadiusConfig, a mapping of its fields, or None for its defaults) → a Report
    (``method="divergence_radius"``, ``results``: {label: RobustnessReport}; see the module docstring for its files).

    ``backbones``: names, ``{name: ..., **create_backbone options}`` or Backbones
    (:func:`~src.backbones.spec.backbone_list`; labels from :func:`~src.backbones.spec.backbone_labels`).
    Data: by default the digits (:data:`DIGITS_SPLIT`: ``image_size``, ``n_train``, ``n_test``, None = its values;
    split seeded by ``config.seed``); or ``images`` (N, 3, H, W) in [0, 1] with integer ``labels`` (N,), plus
    ``train_images`` / ``train_labels`` for the linear probe. ``classifier``: "linear" (probe with L2 penalty
    ``probe_C``) or "zero_shot" (open_clip backbones; prompts ``templates`` with ``class_names``, default the digit
    names). ``progress``: True logs a line per backbone, a callable receives those lines. ``extractor``: options of
    the backbones' :class:`~src.features.FeatureExtractor` (:func:`src.features.extractor_options`; None = its
    defaults). Every argument is checked before any backbone is built.
    """
    extractor = extractor_options(extractor)
    plan = check_comparison(
        backbones, config, images=images, labels=labels, train_images=train_images, train_labels=train_labels,
        classifier=classifier, class_names=class_names, image_size=image_size, n_train=n_train, n_test=n_test,
    )  # fmt: skip
    cfg, say = plan.config, progress_sink(progress)
    if len(plan.specs) > 1:
        check_buildable(plan.specs)  # a missing weight file fails now, not after the first backbones ran
    if plan.digits is not None:
        train_images, train_labels, images, labels = digits_split(**plan.digits, seed=cfg.seed)
    names = list(DIGIT_NAMES) if class_names is None else list(class_names)
    results: dict[str, RobustnessReport] = {}
    for label, spec in zip(plan.labels, plan.specs):
        t0 = time.perf_counter()
        with torch.random.fork_rng(devices=[]):  # random-weight backbones: the same weights in every run of a config
            torch.manual_seed(cfg.seed)
            bb = build_backbone(spec).eval().to(device)
        head = None
        if classifier == "zero_shot":
            head = zero_shot_for(bb.name, names, pretrained=_pretrained(spec, bb), templates=list(templates))
            head = head.to(device)
        results[label] = robustness_report(
            bb.embed, train_images, train_labels, images, labels, cfg, backbone_name=label, classifier=head,
            probe_C=probe_C, device=str(device), extractor=extractor,
        )  # fmt: skip
        if say:
            rows = results[label].rows
            say(
                f"DivergenceRadius {label}: clean accuracy {results[label].clean_accuracy:.3f}, mean R_dr "
                f"{sum(r['mean_r_dr'] for r in rows) / len(rows):.4f} over {len(rows)} perturbation(s) "
                f"({time.perf_counter() - t0:.0f} s)"
            )
        del bb, head
    return divergence_radius_report(results)
