"""``python -m src.divergence_radius``: the DivergenceRadius downstream report of one or more backbones (Hydra config
``configs/divergence_radius.yaml``; :func:`src.divergence_radius.compare.compare_backbones`).

Writes to the run directory ``divergence_radius.md`` (a summary row per backbone, then per backbone and perturbation
mean R_dr, R_cs, ACC_p (``task=classification``) or RMSE_p (``task=depth``) and the regression MSEs),
``divergence_radius.csv``, ``divergence_radius.json``, ``per_image.csv`` and the figures (see
:mod:`src.divergence_radius.compare`).

Data: without ``data=`` the bundled digits split (classification) or synthetic scenes with exact depth (depth) of
``compare_backbones``; ``data=<configs/data option>`` (the training CLI's group, e.g. ``nyu_depth_v2`` for depth) is
read through :mod:`src.utils.data_tensors` (train split: the probe or the depth head; test split: the sweep).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from ..utils.allocator import keep_freed_memory
from ..utils.console import announce_run, quiet_cli
from ..utils.hydra_utils import register_resolvers, with_run_seed  # noqa: F401  (configs/hydra resolvers)
from ..utils.resources import config_dir

log = logging.getLogger("repbench")


def comparison_arguments(cfg: DictConfig) -> dict[str, Any]:
    """The keyword arguments of ``compare_backbones`` from a composed divergence_radius.yaml: ``backbones``, the
    ``divergence_radius`` block as a DivergenceRadiusConfig (a bad field is named with its block; its ``seed: null``
    is the run's ``seed``, configs/run_options), the downstream / data keys and the ``extractor`` options of the
    forwards (:func:`src.features.extractor_options`)."""
    from ..features import extractor_options
    from .config import DivergenceRadiusConfig
    from .depth import DepthHeadConfig

    plain = lambda node: OmegaConf.to_container(node, resolve=True) if node is not None else None  # noqa: E731
    block = with_run_seed(plain(cfg.divergence_radius), cfg)
    try:
        config = DivergenceRadiusConfig.coerce(block)
    except (TypeError, ValueError) as exc:
        raise type(exc)(
            f"divergence_radius block of configs/divergence_radius.yaml: {exc} (override a field as divergence_radius.m=...)"
        ) from None
    try:
        depth = DepthHeadConfig.coerce(plain(cfg.get("depth")))
    except (TypeError, ValueError) as exc:
        raise type(exc)(
            f"depth block of configs/divergence_radius.yaml: {exc} (override a field as depth.epochs=...)"
        ) from None
    return {
        "backbones": plain(cfg.backbones),
        "config": config,
        "classifier": plain(cfg.classifier) if OmegaConf.is_list(cfg.classifier) else cfg.classifier,
        "templates": plain(cfg.templates),
        "class_names": plain(cfg.class_names),
        "image_size": cfg.image_size,
        "n_train": cfg.n_train,
        "n_test": cfg.n_test,
        "probe_C": cfg.probe_C,
        "task": cfg.get("task", "classification"),
        "depth": depth,
        "head_checkpoint": cfg.get("head_checkpoint"),
        "extractor": extractor_options(plain(cfg.get("extractor"))),
    }


def uses_bundled_digits(cfg: DictConfig) -> bool:
    """No ``data=`` (the default): the seeded digits split (classification) or synthetic scenes (depth) of
    ``compare_backbones`` (its ``DIGITS_SPLIT`` / ``SCENES_SPLIT`` sizes ``image_size`` / ``n_train`` / ``n_test``),
    i.e. this CLI's data before ``data=`` existed."""
    return cfg.get("data") is None


def data_arguments(
    cfg: DictConfig, seed: int, heads: Sequence[str] | None = None, image_size: int | None = None
) -> dict[str, Any]:
    """The data keyword arguments of ``compare_backbones`` with ``data=<configs/data option>`` (the training CLI's
    group, built at ``image_size`` with the sweep's ``seed``): ``n_train`` images of its train split train the
    linear probe and ``n_test`` images of its test split are swept (seeded draws; null = every image of the split;
    more than a split holds is refused). Zero-shot with ``class_names: null`` takes the data module's class names
    (its folder names: :func:`~src.divergence_radius.downstream.prompt_class_names`). Reads the files: a missing
    folder fails here, before any backbone is built. ``heads``: each backbone's classifier (the checked plan's; None =
    from ``cfg``); ``image_size``: the side the data are made at (None = ``cfg.image_size``)."""
    from ..backbones.spec import backbone_list
    from ..utils.data_tensors import dataset_tensors, load_data_config, open_splits
    from .compare import backbone_classifiers
    from .downstream import prompt_class_names

    paths = OmegaConf.to_container(cfg.paths, resolve=True)
    side = cfg.image_size if image_size is None else image_size
    dm = load_data_config(OmegaConf.to_container(cfg.data), seed, side, paths=paths, key="data")
    if heads is None:
        args = comparison_arguments(cfg)
        heads = backbone_classifiers(backbone_list(args["backbones"]), args["classifier"])
    linear = "linear" in heads or cfg.get("task") == "depth"  # a probe or a depth head: the train split
    splits = open_splits(dm, ("train", "test") if linear else ("test",), key="data")
    images, labels = dataset_tensors(
        splits["test"], cfg.n_test, seed=seed, key="n_test (test-split images swept)", minimum=2
    )
    out: dict[str, Any] = {"images": images, "labels": labels, "image_size": None, "n_train": None, "n_test": None}
    if linear:
        out["train_images"], out["train_labels"] = dataset_tensors(
            splits["train"], cfg.n_train, seed=seed, key="n_train (train-split images of the probe)"
        )
    if "zero_shot" in heads and cfg.get("task") != "depth" and cfg.class_names is None:
        names = getattr(dm, "class_names", None)
        if not names:
            raise ValueError(
                f"classifier=zero_shot needs a class name per label and {type(dm).__name__} has no class_names; set "
                "class_names=[...] (label i is class_names[i])"
            )
        out["class_names"] = prompt_class_names(names, from_folders=True, key="class_names")
    return out


def run(cfg: DictConfig) -> Path:
    """The report of a composed divergence_radius.yaml. The settings (backbone list, the ``divergence_radius`` block, the
    classifier, the sizes), then the data (``data``: its files are read) and the output directory are checked before
    any backbone is built. ``image_size=native`` with ``data=``: the backbones run in groups of one native size
    (:func:`~src.divergence_radius.compare.native_groups`), the data made at each group's size (the same seeded draw),
    the reports merged into one."""
    from ..utils.run_dir import OUTPUT_DIR_FIX, check_writable_dir
    from .compare import (
        NATIVE,
        check_arguments,
        check_comparison,
        compare_backbones,
        group_arguments,
        merge_reports,
        native_groups,
    )

    args = comparison_arguments(cfg)
    cheap = check_arguments(args)
    data = not uses_bundled_digits(cfg)
    if data:  # backbones, sweep, classifier, sizes first; the data's class names and sizes below
        cheap.update(class_names=None, image_size=None if cfg.image_size == NATIVE else cheap["image_size"])
    plan = check_comparison(**cheap) if cheap["image_size"] != NATIVE else None  # native digits: compare_backbones
    groups = [(None, list(range(len(plan.specs))))] if plan is not None else []
    if data and cfg.image_size == NATIVE:
        groups = native_groups(plan.specs)  # builds each backbone once on the CPU: missing weights fail here
    out = check_writable_dir(cfg.paths.output_dir, OUTPUT_DIR_FIX)
    keep_freed_memory()  # reuse freed activation memory (docs/speed.md), as every CLI does
    t0 = time.perf_counter()
    run_options = {"device": cfg.device, "progress": bool(cfg.progress)}
    if not data:
        report = compare_backbones(**args, **run_options)
    else:
        parts = []
        for side, idx in groups:
            sub = group_arguments(args, idx, side)
            heads = [plan.classifiers[i] for i in idx] if plan.classifiers else None
            sub.update(data_arguments(cfg, args["config"].seed, heads, side))  # reads the data: missing files fail here
            check_comparison(**check_arguments(sub))
            parts.append((idx, compare_backbones(**sub, **run_options)))
        report = merge_reports(plan.labels, parts) if len(parts) > 1 else parts[0][1]
    report.write(out)
    # once: Hydra's job logging shows it on the console and keeps it in the run's log file
    log.info("DivergenceRadius report (%.0f s):\n%s\nwritten to %s", time.perf_counter() - t0, report.markdown, out)
    return out


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="divergence_radius.yaml")
@quiet_cli()  # no third-party advertisements or known-harmless warnings, for this call only
def main(cfg: DictConfig) -> None:
    announce_run(cfg)  # the first lines, before anything slow
    run(cfg)


if __name__ == "__main__":
    main()
