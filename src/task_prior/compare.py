"""Comparing backbones with the Task-Prior probe study (Patel & Balestriero, "Task Priors", arXiv:2507.09871, Fig. 2
and App. D.1): :func:`compare_backbones` embeds every backbone (and the prior) on the same images and runs
:func:`compare_features`: the same sampled labelings and the same seeded split for every backbone, probes on each
task and the closed-form moments (Thm 2.3). The table, figures and correlations: :mod:`src.task_prior.report`."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor

from ..backbones.spec import check_backbone_spec
from ..features.extractor import FORWARD_BATCH
from ..utils.checks import check_int, check_tensor
from ..utils.progress import progress_sink
from ..utils.report_writer import Report
from . import matrix as prior_matrices
from .config import TaskPriorConfig
from .moments import task_prior_moments
from .probing import accuracy_summary, evaluate_task_probes, random_split
from .report import digits_images, rows_report

__all__ = ["compare_backbones", "compare_features"]


def compare_features(
    features: Mapping[str, Tensor],
    prior_features: Tensor,
    config: TaskPriorConfig | Mapping[str, Any] | None = None,
    **options: Any,
) -> list[dict[str, Any]]:
    """One row per entry of ``features`` ({label: (n, D)}), all on the same n images as ``prior_features``: the same
    sampled labelings (num_tasks, n) and the same seeded split for every backbone.

    ``config``: a :class:`TaskPriorConfig` (or a mapping of its fields; None = the defaults); ``options`` are
    TaskPriorConfig fields replacing its values (e.g. ``num_tasks=8``, ``convention="paper"``). The convention sets
    the kernel scales, temperatures, sampler, the probe (head, features, batch, schedule) and its score
    (:mod:`src.task_prior.conventions`); any of the config's options given explicitly (not None) overrides the
    preset. ``probe_split="test"`` holds out ``test_fraction`` of the images (one seeded split); ``"train"`` trains
    and scores every probe on all n images. ``prior_backbone`` is not used here (the prior's
    features are given)."""
    cfg = TaskPriorConfig.coerce(config, **options)
    conv = cfg.settings
    labels = cfg.sample_labels(prior_features)
    if conv.probe_split == "train":  # scored on the images it trained on: nothing to hold out (the authors' code
        train_idx = test_idx = torch.arange(prior_features.shape[0])  # trains and scores on every image)
    else:
        train_idx, test_idx = random_split(prior_features.shape[0], cfg.test_fraction, seed=cfg.seed)
    rows = []
    for name, feats in features.items():
        check_tensor(feats, f"features[{name!r}]", "(n, D)")
        if feats.shape[0] != prior_features.shape[0]:
            raise ValueError(
                f"{name}: {feats.shape[0]} feature rows but {prior_features.shape[0]} prior rows; compute every "
                "backbone's features on the same images in the same order"
            )
        acc = evaluate_task_probes(feats, labels, train_idx, test_idx, cfg.task_classes, metric=conv.probe_metric,
                                   split=conv.probe_split, epochs=cfg.epochs, lr=cfg.lr,
                                   weight_decay=cfg.weight_decay, seed=cfg.seed, **conv.probe_options)  # fmt: skip
        mean, var = task_prior_moments(
            feats,
            prior_features,
            block_size=cfg.block_size,
            convention=conv,
            precision=cfg.moment_precision,
            rtol=cfg.moment_rtol,
        )
        rows.append(
            {
                "backbone": name,
                "convention": conv.name,
                **accuracy_summary(acc, cfg.quantiles),
                "mean": mean,
                "var": var,
                "z": mean / math.sqrt(var) if var > 0 else math.inf,
                "accuracies": acc.tolist(),
            }
        )
    return rows


def _check_images(images: Any) -> Tensor:
    """A floating (N >= 2, C, H, W) tensor of pixel images; else a ValueError naming ``images``."""
    check_tensor(images, "images", "(N, 3, H, W)")
    if images.dim() != 4 or images.shape[0] < 2 or not images.is_floating_point():
        raise ValueError(
            f"images must be a floating (N >= 2, 3, H, W) tensor of pixel images in [0, 1], got "
            f"{tuple(images.shape)} {images.dtype}; or leave images=None for the bundled digits"
        )
    return images


def compare_backbones(
    backbones: Sequence[Any],
    config: TaskPriorConfig | Mapping[str, Any] | None = None,
    *,
    images: Tensor | None = None,
    prior_backbone: Any = None,
    max_batch: int = FORWARD_BATCH,
    device: str | torch.device = "cpu",
    progress: bool | Callable[[str], None] = False,
    prior_matrix: bool = False,
    extractor: Mapping[str, Any] | None = None,
) -> Report:
    """The Task-Prior probe study of every backbone on the same images -> a Report (``method="task_prior"``, rows =
    :data:`COLUMNS` per backbone, ``results``: {label: row}, figure ``e_vs_accuracy.png``).

    ``backbones``: names, ``{name: ..., **create_backbone options}`` or Backbones
    (:func:`~src.backbones.spec.backbone_list`; labels by :func:`~src.backbones.spec.backbone_labels`).
    ``config``: a :class:`TaskPriorConfig` or a mapping of its fields (None = the defaults). ``images``: (N, 3, H, W)
    in [0, 1]; None = the first :data:`DEFAULT_NUM_IMAGES` bundled digits at :data:`DEFAULT_IMAGE_SIZE` px.
    ``prior_backbone``: None = ``config.prior_backbone``. Features go through ``FeatureExtractor`` (``max_batch``
    images per forward, on ``device``); random-weight backbones are initialised from ``config.seed`` (under
    ``torch.random.fork_rng``: the caller's global generator is left as it was). ``progress``: True logs one line per
    backbone, a callable receives the lines. ``prior_matrix``: also every evaluated backbone as the prior of every
    other (:func:`~src.task_prior.matrix.prior_matrix`, the paper's Fig. 6: B² closed-form moments on the same
    features, no probes): JSON ``prior_matrix``, Markdown tables and figure ``prior_matrix.png``. ``extractor``:
    further :class:`~src.features.FeatureExtractor` options of the forwards (:func:`src.features.extractor_options`;
    its ``max_batch`` wins over ``max_batch``). Every argument is checked, and every backbone built once, before the
    first forward."""
    from ..backbones.spec import backbone_labels, backbone_list, build_backbone, check_buildable, spec_name
    from ..features import FeatureExtractor, extractor_options

    specs = backbone_list(backbones)
    labels = backbone_labels(specs)
    cfg = TaskPriorConfig.coerce(config)
    prior_spec = cfg.prior_backbone if prior_backbone is None else check_backbone_spec(prior_backbone, "prior_backbone")
    images = digits_images() if images is None else _check_images(images)
    max_batch = check_int(max_batch, "max_batch", 1)
    forward = {"max_batch": max_batch, **extractor_options(extractor)}
    if not isinstance(prior_matrix, bool):
        raise TypeError(f"prior_matrix must be true or false, got {prior_matrix!r}")
    say = progress_sink(progress)
    check_buildable([prior_spec, *specs])  # a missing weight file fails now, not after the first backbones ran

    def embed(spec: Any, label: str) -> Tensor:
        t0 = time.perf_counter()
        bb = build_backbone(spec).to(device).eval()
        z = FeatureExtractor(bb.embed, device=device, **forward)(images).float().cpu()
        if say:
            say(f"features {label}: {tuple(z.shape)} in {time.perf_counter() - t0:.1f} s")
        return z

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.seed)  # the prior first, then the backbones in order (as python -m src.task_prior did)
        prior = embed(prior_spec, f"{spec_name(prior_spec)} (prior)")
        feats = {label: embed(spec, label) for label, spec in zip(labels, specs)}
    rows = compare_features(feats, prior, cfg)
    for row in rows:
        row["prior_backbone"] = spec_name(prior_spec)
    matrix = None
    if prior_matrix:
        t0 = time.perf_counter()
        matrix = prior_matrices.prior_matrix(feats, cfg)
        if say:
            say(f"prior matrix {len(feats)} x {len(feats)} in {time.perf_counter() - t0:.1f} s")
    return rows_report(rows, prior_matrix=matrix)
