"""Comparing backbones with DivergenceRadius (Liu et al., "Robustness of Vision Foundation Models to Common
Perturbations", arXiv:2604.14973, §5 and App. D–F): the per-backbone downstream report for every backbone under one
:class:`~src.divergence_radius.config.DivergenceRadiusConfig`, gathered into one
:class:`~src.utils.report_writer.Report` (``method="divergence_radius"``), the shape every method's
``compare_backbones`` returns. ``task`` picks the downstream task:

* ``"classification"`` (§5): :func:`~src.divergence_radius.report.robustness_report` — linear probe or zero-shot
  head, the sweep with ACC_p, the robustness → ACC_p regression; digits by default;
* ``"depth"`` (App. D–F): :func:`~src.divergence_radius.report.depth_report` — a depth head on the frozen
  backbone's feature map, the sweep with RMSE_p (eq. 16), the robustness → RMSE_p regression; synthetic scenes with
  exact depth by default (:data:`SCENES_SPLIT`).

Files of ``Report.write(out)``: ``divergence_radius.md`` (a cross-backbone summary table, then each backbone's
per-perturbation table), ``divergence_radius.csv`` (one row per backbone and perturbation), ``divergence_radius.json``
({backbone label: report.to_dict()}), ``per_image.csv`` (backbone, image, perturbation, r_dr, r_cs, acc_p or rmse_p),
``r_dr_by_perturbation.png`` and each backbone's figures ``<score>_vs_divergence_radius.png`` (Figs. 5 / 8),
``<score>_vs_cosine_robustness.png`` (Figs. 17 / 8), ``regression_mse.png`` (Figs. 10 / 9), ``<score>`` = ``acc_p``
or ``rmse_p``: under these names for a single backbone, prefixed with the backbone's label
(``<label>__acc_p_vs_divergence_radius.png``, characters other than letters, digits, ``.``, ``_`` and ``-`` replaced
by ``_``) when there are several.
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

import torch
from torch import Tensor

from ..backbones.base import Backbone
from ..backbones.spec import (
    BackboneLike,
    backbone_labels,
    backbone_list,
    build_backbone,
    check_buildable,
    native_sizes,
    spec_name,
)
from ..features import extractor_options
from ..perturbations import MIN_SIZE
from ..perturbations.registry import check_perturbable_images
from ..utils.progress import progress_sink
from ..utils.report_writer import Report
from .config import DivergenceRadiusConfig
from .depth import DepthHeadConfig, load_depth_checkpoint
from .downstream import DEFAULT_TEMPLATES, DIGIT_NAMES, prompt_class_names, zero_shot_head
from .report import (
    TASK_METRICS,
    check_split_sizes,
    depth_report,
    digits_split,
    divergence_radius_report,
    robustness_report,
    scenes_split,
)

__all__ = [
    "AUTO",
    "CLASSIFIERS",
    "NATIVE",
    "backbone_classifiers",
    "check_arguments",
    "check_sizes_fit",
    "group_arguments",
    "merge_reports",
    "native_groups",
    "DIGIT_NAMES",
    "DIGITS_SPLIT",
    "SCENES_SPLIT",
    "TASKS",
    "compare_backbones",
    "check_comparison",
]

log = logging.getLogger("repbench")

#: the downstream heads g of §5.1: a logistic-regression probe on clean features, or CLIP zero-shot (open_clip only)
CLASSIFIERS = ("linear", "zero_shot")
#: ``classifier="auto"``: each backbone the paper's head (§5.1, Table 5): zero-shot for CLIP (open_clip) backbones,
#: a linear probe for the others (DINOv2)
AUTO = "auto"
#: the default data: scikit-learn digits upsampled to image_size, a seeded split into n_train probe-training and
#: n_test swept images (image_size 64: the probe reaches ~0.95 with EfficientNet-Lite0)
DIGITS_SPLIT = MappingProxyType({"image_size": 64, "n_train": 1000, "n_test": 200})
#: the depth task's default data: synthetic scenes (src/images/depth_scenes.py), n_train to fit the head and n_test
#: swept, at image_size: the digits split's sizes, so one set of image_size / n_train / n_test keys
#: (configs/divergence_radius.yaml) serves both tasks
SCENES_SPLIT = DIGITS_SPLIT
#: the downstream tasks: §5's classifiers (ACC_p) and App. D–F's depth head (RMSE_p)
TASKS = tuple(TASK_METRICS)
#: ``image_size="native"``: each backbone at its own input size (the paper's: ViT-L/14 224 px, RN50x64 448 px), the
#: backbones run in groups of one size (:func:`native_groups`) and their reports merged (:func:`merge_reports`)
NATIVE = "native"
#: the backbone sources whose wrappers expose a spatial feature map (Backbone.embed_with_map), what the depth head reads
MAP_SOURCES = ("timm:", "embedded:", "hf:", "open_clip:")


@dataclass(frozen=True)
class Plan:
    """A checked comparison: the backbone specs and labels, the sweep, and the digits split sizes (None with
    ``images=``)."""

    specs: list[Any]
    labels: list[str]
    config: DivergenceRadiusConfig
    digits: dict[str, int] | None  # the default split's sizes (digits or scenes, by task); None with images=
    task: str = "classification"
    classifiers: tuple[str, ...] = ()  # each backbone's head (classification): "linear" or "zero_shot"
    class_names: tuple[str, ...] | None = None  # the zero-shot prompts' names (None: no zero-shot backbone)


def native_groups(specs: Sequence[BackboneLike]) -> list[tuple[int, list[int]]]:
    """[(side, indices)]: the backbones grouped by their native input side (each built once on the CPU under
    ``fork_rng``, as :func:`~src.backbones.spec.check_buildable`), in the order each side first appears. A
    non-square native size is refused (the data are made square)."""
    sides: dict[int, list[int]] = {}
    for i, (h, w) in enumerate(native_sizes(specs)):
        if h != w:
            raise ValueError(
                f"image_size=native makes square images, but {spec_name(specs[i])} takes {h}x{w}; set image_size= "
                "to one side for all backbones"
            )
        sides.setdefault(h, []).append(i)
    return list(sides.items())


def check_sizes_fit(labels: Sequence[str], fixed: Sequence[tuple[int, int] | None], side: int) -> None:
    """Refuse, before any work, images of side ``side`` for a backbone that accepts only its native size (``fixed``:
    :func:`~src.backbones.spec.check_buildable`), naming the fix: ``image_size=native`` (each backbone its size)."""
    wrong = [f"{lab} ({f[0]}x{f[1]})" for lab, f in zip(labels, fixed) if f is not None and f != (side, side)]
    if wrong:
        raise ValueError(
            f"backbones {wrong} accept only their native input size (fixed positional embedding), but the images are "
            f"{side}x{side}; set image_size=native (each backbone its own size, one run) or leave them out"
        )


def merge_reports(labels: Sequence[str], parts: Sequence[tuple[Sequence[int], Report]]) -> Report:
    """One Report of the reports of groups of a backbone list (``parts``: (the group's indices in the list, its
    Report)), each backbone under its label in the whole list (``labels``), in list order."""
    import dataclasses

    results: dict[int, Any] = {}
    for indices, report in parts:
        for i, rep in zip(indices, report.results.values()):
            results[i] = dataclasses.replace(rep, backbone=labels[i])
    return divergence_radius_report({labels[i]: results[i] for i in sorted(results)})


def _is_clip(spec: Any) -> bool:
    """An ``open_clip:`` backbone in the joint image-text space (not ``projection: false``): a zero-shot head fits."""
    opts = spec if isinstance(spec, Mapping) else {}
    return spec_name(spec).startswith("open_clip:") and opts.get("projection", True) is not False


def backbone_classifiers(specs: Sequence[Any], classifier: str | Sequence[str]) -> list[str]:
    """Each backbone's downstream head (§5.1): ``classifier`` for all ("linear" or "zero_shot"), ``"auto"`` (the
    paper's choice per model, Table 5: zero-shot for CLIP backbones, linear for the others), or a list with one of
    "linear" / "zero_shot" / "auto" per backbone. A ValueError names a bad value, a list of the wrong length and a
    zero-shot head asked of a backbone without a text tower."""
    per = [classifier] * len(specs) if isinstance(classifier, str) else list(classifier)
    if len(per) != len(specs):
        raise ValueError(
            f"classifier lists one head per backbone: {len(per)} given for {len(specs)} backbone(s); or give one "
            f"value for all ({list(CLASSIFIERS) + [AUTO]})"
        )
    bad = [c for c in per if c not in (*CLASSIFIERS, AUTO)]
    if bad:
        raise ValueError(
            f"classifier must be 'linear' (a logistic-regression probe on clean features), 'zero_shot' (CLIP "
            f"prompts; open_clip backbones) or 'auto' (zero-shot for open_clip backbones, linear for the others), "
            f"or a list of these, one per backbone; got {bad[0]!r}"
        )
    heads = [("zero_shot" if _is_clip(s) else "linear") if c == AUTO else c for s, c in zip(specs, per)]
    other = [spec_name(s) for s, c in zip(specs, heads) if c == "zero_shot" and not _is_clip(s)]
    if other:
        raise ValueError(
            f"classifier='zero_shot' needs open_clip backbones in the joint image-text space (their text tower makes "
            f"the class prompts), got {other}; use classifier='linear' for them, classifier='auto' (each backbone "
            "its paper head), or compare open_clip:<arch> backbones"
        )
    return heads


def check_comparison(
    backbones: Sequence[BackboneLike],
    config: DivergenceRadiusConfig | Mapping[str, Any] | None = None,
    *,
    images: Tensor | None = None,
    labels: Tensor | None = None,
    train_images: Tensor | None = None,
    train_labels: Tensor | None = None,
    classifier: str | Sequence[str] = "linear",
    class_names: Sequence[str] | str | None = None,
    image_size: int | None = None,
    n_train: int | None = None,
    n_test: int | None = None,
    task: str = "classification",
    head_checkpoint: str | None = None,
) -> Plan:
    """Every check of :func:`compare_backbones` that needs no backbone (the CLI runs it before its output-folder
    check): the backbone list and labels, the config, the task, each backbone's classifier
    (:func:`backbone_classifiers`; zero-shot needs ``open_clip:`` backbones and a class name per label,
    :func:`~src.divergence_radius.downstream.prompt_class_names`), and either the default split's sizes or the given
    images and labels (depth: maps). ValueErrors name the argument and the fix."""
    specs = backbone_list(backbones)
    labels_ = backbone_labels(specs)
    cfg = DivergenceRadiusConfig.coerce(config)
    if task not in TASKS:
        raise ValueError(
            f"task must be 'classification' (§5: ACC_p of a classifier) or 'depth' (App. D-F: RMSE_p of a depth "
            f"head), got {task!r}"
        )
    if head_checkpoint is not None and task != "depth":
        raise ValueError("head_checkpoint= is a depth head (a DepthProbe checkpoint): it goes with task='depth'")
    if task == "depth":
        if head_checkpoint is not None:
            _check_head_checkpoint(head_checkpoint, specs)
        return _check_depth(specs, labels_, cfg, images, labels, train_images, train_labels, classifier,
                            image_size, n_train, n_test, fit=head_checkpoint is None)  # fmt: skip
    heads = backbone_classifiers(specs, classifier)
    linear, zero_shot = "linear" in heads, "zero_shot" in heads
    names = None
    if zero_shot:
        names = tuple(DIGIT_NAMES if class_names is None else prompt_class_names(class_names, key="class_names"))
    if images is None:
        if labels is not None or train_images is not None or train_labels is not None:
            raise ValueError(
                "labels=, train_images= and train_labels= go with images= (the test images); pass images= too, or "
                "none of them for the digits default"
            )
        digits = _default_split(DIGITS_SPLIT, image_size, n_train, n_test)
        if linear and digits["n_train"] < 2:
            raise ValueError(
                f"classifier=linear fits a probe on n_train clean images: n_train must be >= 2, got {digits['n_train']}"
            )
        _check_class_names(names, len(DIGIT_NAMES) - 1)
        return Plan(specs, labels_, cfg, digits, classifiers=tuple(heads), class_names=names)
    _refuse_default_sizes(image_size, n_train, n_test, "the digits default data")
    _check_labelled(images, labels, "images", "labels", at_least=2, why="the regression fits on one half")
    if linear:
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
    _check_class_names(names, int(labels.max()) if labels.numel() else 0)
    return Plan(specs, labels_, cfg, None, classifiers=tuple(heads), class_names=names)


def _default_split(
    default: Mapping[str, int], image_size: int | None, n_train: int | None, n_test: int | None
) -> dict[str, int]:
    """The sizes of a default data split (digits or scenes): each None is ``default``'s value; image_size >=
    MIN_SIZE (the perturbations need a margin), n_train >= 0, n_test >= 2 (:func:`check_split_sizes`)."""
    from ..utils.checks import check_image_size

    sizes = {k: default[k] if v is None else v for k, v in
             (("image_size", image_size), ("n_train", n_train), ("n_test", n_test))}  # fmt: skip
    sizes["image_size"] = check_image_size(sizes["image_size"], "image_size")
    if sizes["image_size"] < MIN_SIZE:
        raise ValueError(
            f"image_size must be >= {MIN_SIZE} (the perturbations need a margin), got {sizes['image_size']}; "
            f"set image_size={default['image_size']} (say)"
        )
    sizes["n_train"], sizes["n_test"] = check_split_sizes(sizes["n_train"], sizes["n_test"])
    return sizes


def _check_depth(
    specs: list[Any],
    names: list[str],
    cfg: DivergenceRadiusConfig,
    images: Tensor | None,
    labels: Tensor | None,
    train_images: Tensor | None,
    train_labels: Tensor | None,
    classifier: str,
    image_size: int | None,
    n_train: int | None,
    n_test: int | None,
    *,
    fit: bool = True,
) -> Plan:
    """The depth task's checks: backbones that expose a feature map (:data:`MAP_SOURCES`), no zero-shot classifier,
    and either the scenes split sizes or images with depth maps (``labels``: (N, 1, H, W), the images' size; the
    training pair likewise, at least 2 images (BatchNorm) when a head is to be ``fit``)."""
    if classifier != "linear":
        raise ValueError(f"task='depth' fits a depth head; classifier={classifier!r} is a classification setting")
    no_map = [spec_name(s) for s in specs if not _has_map(s)]
    if no_map:
        raise ValueError(
            f"task='depth' reads the backbone's spatial feature map, which {no_map} do not expose; use timm:, "
            "embedded:, hf: or open_clip: backbones"
        )
    if images is None:
        if any(v is not None for v in (labels, train_images, train_labels)):
            raise ValueError(
                "labels=, train_images= and train_labels= go with images= (the test images and their depth maps); "
                "pass images= too, or none of them for the synthetic scenes"
            )
        scenes = _default_split(SCENES_SPLIT, image_size, n_train, n_test)
        if fit and scenes["n_train"] < 2:
            raise ValueError(f"task=depth fits a head on n_train scenes: n_train must be >= 2, got {scenes['n_train']}")
        return Plan(specs, names, cfg, scenes, "depth")
    _refuse_default_sizes(image_size, n_train, n_test, "the synthetic scenes")
    _check_depth_maps(images, labels, "images", "labels", at_least=2, why="the regression fits on one half")
    if fit:
        if train_images is None or train_labels is None:
            raise ValueError("task='depth' fits a head on clean training images: pass train_images= and train_labels=")
        _check_depth_maps(train_images, train_labels, "train_images", "train_labels", at_least=2, why="BatchNorm")
    return Plan(specs, names, cfg, None, "depth")


def _check_head_checkpoint(path: str, specs: list[Any]) -> None:
    """A trained head (``head_checkpoint``) is that of one backbone: exactly one backbone, the one the checkpoint
    was trained on (its ``hyper_parameters.backbone``); the file is read (weights_only) here, before any build."""
    from ..utils.checkpoint import read_checkpoint

    spec = (read_checkpoint(path).get("hyper_parameters") or {}).get("backbone")
    trained = spec_name(spec) if spec is not None else None
    if len(specs) != 1 or trained is None or spec_name(specs[0]) != trained:
        raise ValueError(
            f"head_checkpoint={path} holds a depth head trained on {trained!r}; compare exactly that backbone: "
            f"backbones=[{spec!r}] (got {[spec_name(s) for s in specs]})"
        )


def _has_map(spec: Any) -> bool:
    """Whether a backbone (or the spec of one) exposes a spatial feature map."""
    if isinstance(spec, Backbone):
        return type(spec).forward_normalized_with_map is not Backbone.forward_normalized_with_map
    return spec_name(spec).startswith(MAP_SOURCES)


def _check_depth_maps(x: Tensor, y: Tensor | None, name: str, map_name: str, *, at_least: int, why: str) -> None:
    """Images that ``perturb`` accepts with one float depth map (N, 1, H, W) each, at the images' size."""
    check_perturbable_images(x, name)
    n = x.shape[0]
    if n < at_least:
        raise ValueError(f"{name} must hold at least {at_least} images ({why}), got {n}")
    want = (n, 1, *x.shape[-2:])
    if not isinstance(y, Tensor) or tuple(y.shape) != want or not y.is_floating_point():
        got = f"shape {tuple(y.shape)} {y.dtype}" if isinstance(y, Tensor) else type(y).__name__
        raise ValueError(f"{map_name} must be float depth maps of shape {want} (metres, one per image), got {got}")


def _check_class_names(class_names: Sequence[str] | None, top_label: int) -> None:
    """Zero-shot scores one prompt per class name (label i = class_names[i]; None: no zero-shot backbone): a label
    without a name would count as misclassified on every version, silently; refused."""
    if class_names is None:
        return
    n = len(class_names)
    if top_label >= n:
        raise ValueError(
            f"classifier='zero_shot' scores one prompt per class name, but the labels go up to {top_label} and "
            f"class_names has {n} name(s); pass one name per class (label i is class_names[i])"
        )


def _refuse_default_sizes(image_size: int | None, n_train: int | None, n_test: int | None, what: str) -> None:
    """With images= the images' own size and count are used: refuse the sizes of the default data (``what``)."""
    given = {"image_size": image_size, "n_train": n_train, "n_test": n_test}
    if any(v is not None for v in given.values()):
        raise ValueError(
            f"{[k for k, v in given.items() if v is not None]} set {what}; with images= leave them "
            "None (the images' own size and count are used)"
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


def group_arguments(kwargs: Mapping[str, Any], indices: Sequence[int], side: int | None) -> dict[str, Any]:
    """The :func:`compare_backbones` arguments ``kwargs`` restricted to the backbones at ``indices`` (a per-backbone
    ``classifier`` list restricted alike), at image side ``side`` (None: ``kwargs``' own): one group of
    :func:`native_groups`."""
    specs, c = backbone_list(kwargs["backbones"]), kwargs["classifier"]
    sub = {**kwargs, "backbones": [specs[i] for i in indices]}
    sub["classifier"] = c if isinstance(c, str) else [c[i] for i in indices]
    return sub if side is None else {**sub, "image_size": side}


def check_arguments(kwargs: Mapping[str, Any]) -> dict[str, Any]:
    """The entries of ``kwargs`` (arguments of :func:`compare_backbones`) that :func:`check_comparison` takes."""
    return {k: kwargs[k] for k in inspect.signature(check_comparison).parameters if k in kwargs}


def _compare_native(kwargs: dict[str, Any]) -> Report:
    """compare_backbones(image_size="native") on the default data: each group of backbones of one native side
    (:func:`native_groups`) compared at that side, every group's settings checked first, the reports merged."""
    if kwargs["images"] is not None:
        raise ValueError(
            "image_size='native' makes the default data at each backbone's size; with images= leave it None"
        )
    specs = backbone_list(kwargs["backbones"])
    groups = [(indices, group_arguments(kwargs, indices, side)) for side, indices in native_groups(specs)]
    for _, args in groups:  # every group's settings before any work
        check_comparison(**check_arguments(args))
    return merge_reports(backbone_labels(specs), [(indices, compare_backbones(**args)) for indices, args in groups])


def compare_backbones(
    backbones: Sequence[BackboneLike],
    config: DivergenceRadiusConfig | Mapping[str, Any] | None = None,
    *,
    images: Tensor | None = None,
    labels: Tensor | None = None,
    train_images: Tensor | None = None,
    train_labels: Tensor | None = None,
    classifier: str | Sequence[str] = "linear",
    templates: Sequence[str] = DEFAULT_TEMPLATES,
    class_names: Sequence[str] | str | None = None,
    image_size: int | str | None = None,
    n_train: int | None = None,
    n_test: int | None = None,
    probe_C: float = 1.0,
    task: str = "classification",
    depth: DepthHeadConfig | Mapping[str, Any] | None = None,
    head_checkpoint: str | None = None,
    device: str | torch.device = "cpu",
    progress: bool | Callable[[str], None] = False,
    extractor: Mapping[str, Any] | None = None,
) -> Report:
    """The §5 protocol (``task="classification"``: :func:`~src.divergence_radius.report.robustness_report`) or App.
    D–F's (``task="depth"``: :func:`~src.divergence_radius.report.depth_report`) for every backbone under one sweep
    ``config`` (a DivergenceRadiusConfig, a mapping of its fields, or None for its defaults) → a Report
    (``method="divergence_radius"``, ``results``: {label: RobustnessReport or DepthReport}; see the module docstring
    for its files).

    ``backbones``: names, ``{name: ..., **create_backbone options}`` or Backbones
    (:func:`~src.backbones.spec.backbone_list`; labels from :func:`~src.backbones.spec.backbone_labels`).
    Data: by default the digits (:data:`DIGITS_SPLIT`) or, for depth, synthetic scenes (:data:`SCENES_SPLIT`):
    ``image_size``, ``n_train``, ``n_test``, None = its values, drawn with ``config.seed``; ``image_size="native"``:
    each backbone at its own input size (:data:`NATIVE`; backbones of one size run together, every group checked
    before the first runs); or ``images`` (N, 3, H, W)
    in [0, 1] with ``labels`` (classification: integer classes (N,); depth: maps (N, 1, H, W) in metres), plus
    ``train_images`` / ``train_labels`` for the linear probe or the depth head. ``classifier``: "linear" (probe with
    L2 penalty ``probe_C``), "zero_shot" (open_clip backbones; prompts ``templates`` with ``class_names``: a list,
    ``"imagenet"`` (:data:`~src.divergence_radius.downstream.CLASS_NAME_LISTS`), default the digit names), "auto"
    (the paper's heads in one run: zero-shot for open_clip backbones, linear for the others) or one of these per
    backbone (:func:`backbone_classifiers`). ``depth``: the depth head and its fit (a :class:`~src.divergence_radius.depth.DepthHeadConfig`,
    a mapping of its fields or None for its defaults; seeded by ``config.seed``); ``head_checkpoint``: instead, the
    trained head of a :class:`~src.models.DepthProbe` checkpoint (``python -m src.train experiment=depth_synthetic``)
    of the one backbone compared (:func:`~src.divergence_radius.depth.load_depth_checkpoint`; the training images are
    then unused). ``progress``: True logs a line per
    backbone, a callable receives those lines. ``extractor``: options of the backbones'
    :class:`~src.features.FeatureExtractor` (:func:`src.features.extractor_options`; None = its defaults). Every
    argument is checked before any backbone is built.
    """
    if image_size == NATIVE:
        return _compare_native(locals())
    extractor = extractor_options(extractor)
    plan = check_comparison(
        backbones, config, images=images, labels=labels, train_images=train_images, train_labels=train_labels,
        classifier=classifier, class_names=class_names, image_size=image_size, n_train=n_train, n_test=n_test,
        task=task, head_checkpoint=head_checkpoint,
    )  # fmt: skip
    head_cfg = DepthHeadConfig.coerce(depth)
    cfg, say = plan.config, progress_sink(progress)
    if len(plan.specs) > 1:  # a missing weight file or a fixed-size backbone fails now, not after the first ones ran
        side = plan.digits["image_size"] if plan.digits is not None else int(images.shape[-1])
        check_sizes_fit(plan.labels, check_buildable(plan.specs), side)
    if plan.digits is not None:
        split = scenes_split if plan.task == "depth" else digits_split
        train_images, train_labels, images, labels = split(**plan.digits, seed=cfg.seed)
    results: dict[str, Any] = {}
    for label, spec, kind in zip(plan.labels, plan.specs, plan.classifiers or ("linear",) * len(plan.specs)):
        t0 = time.perf_counter()
        with torch.random.fork_rng(devices=[]):  # random-weight backbones: the same weights in every run of a config
            torch.manual_seed(cfg.seed)
            bb = build_backbone(spec).eval().to(device)
        head = None
        if plan.task == "depth":
            trained = load_depth_checkpoint(head_checkpoint, bb).head if head_checkpoint is not None else None
            results[label] = depth_report(
                bb, train_images, train_labels, images, labels, cfg, head=trained, depth_head=head_cfg,
                backbone_name=label, device=str(device), extractor=extractor,
            )  # fmt: skip
        else:
            if kind == "zero_shot":
                # the text tower of the spec's weights and options; a random-weight one (a control) seeded as the image's
                head = zero_shot_head(spec, list(plan.class_names or DIGIT_NAMES), templates=list(templates),
                                      seed=cfg.seed, fix="use classifier='linear' (or 'auto') for it")  # fmt: skip
                head = head.to(device)
            results[label] = robustness_report(
                bb.embed, train_images, train_labels, images, labels, cfg, backbone_name=label, classifier=head,
                probe_C=probe_C, device=str(device), extractor=extractor,
            )  # fmt: skip
        if say:
            rep = results[label]
            rows, mt = rep.rows, rep.metric
            clean = "clean accuracy" if plan.task == "classification" else "clean RMSE"
            say(
                f"DivergenceRadius {label}: {clean} {rep.clean_value:{mt.fmt}}, mean R_dr "
                f"{sum(r['mean_r_dr'] for r in rows) / len(rows):.4f} over {len(rows)} perturbation(s) "
                f"({time.perf_counter() - t0:.0f} s)"
            )
        del bb, head
    return divergence_radius_report(results)
