"""``python -m src.robustness``: the DivergenceRadius downstream report (Hydra config ``configs/robustness.yaml``).

Writes to the run directory ``summary.md`` / ``summary.json`` (per perturbation: mean R_dr, R_cs, ACC_p and the
regression MSEs), ``per_image.csv`` and the figures of :mod:`src.robustness.report`.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from ..utils.allocator import keep_freed_memory
from ..utils.hydra_utils import register_resolvers  # noqa: F401  (configs/hydra resolvers)
from ..utils.resources import config_dir

log = logging.getLogger("repbench")
DIGIT_NAMES = ("zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine")


def check_config(cfg: DictConfig) -> None:
    """The run's settings, before any work: classifier, image_size, n_train / n_test (``check_split_sizes``)."""
    from ..utils.digits import check_image_size
    from .report import check_split_sizes

    if cfg.classifier not in ("linear", "zero_shot"):
        raise ValueError(f"classifier must be 'linear' or 'zero_shot', got {cfg.classifier!r}")
    check_image_size(cfg.image_size, "image_size")
    n_train, _ = check_split_sizes(cfg.n_train, cfg.n_test)
    if cfg.classifier == "linear" and n_train < 2:
        raise ValueError(f"classifier=linear fits a probe on n_train clean images: n_train must be >= 2, got {n_train}")


def run(cfg: DictConfig) -> Path:
    """The report of a composed robustness.yaml; checks the settings and the output directory first."""
    from ..backbones import create_backbone
    from ..utils.run_dir import OUTPUT_DIR_FIX, check_writable_dir
    from .report import digits_split, robustness_report, zero_shot_for

    check_config(cfg)
    out = check_writable_dir(cfg.paths.output_dir, OUTPUT_DIR_FIX)
    t0 = time.perf_counter()
    x_tr, y_tr, x_te, y_te = digits_split(cfg.image_size, cfg.n_train, cfg.n_test, seed=cfg.seed)
    opts = dict(OmegaConf.to_container(cfg.backbone, resolve=True))
    name = opts.pop("name")
    bb = create_backbone(name, **opts).eval()
    bb = bb.to(cfg.device)
    classifier = None
    if cfg.classifier == "zero_shot":
        names = list(cfg.class_names) if cfg.class_names else list(DIGIT_NAMES)
        pretrained = opts.get("pretrained") if isinstance(opts.get("pretrained"), str) else None
        classifier = zero_shot_for(name, names, pretrained=pretrained, templates=list(cfg.templates))
        classifier = classifier.to(cfg.device)
    report = robustness_report(
        bb.embed,
        x_tr,
        y_tr,
        x_te,
        y_te,
        backbone_name=name,
        classifier=classifier,
        perturbations=list(cfg.perturbations) if cfg.perturbations else None,
        m=cfg.m,
        mode=cfg.mode,
        seed=cfg.seed,
        probe_C=cfg.probe_C,
        chunk_size=cfg.chunk_size,
        device=cfg.device,
    )
    report.write(out)
    # once: Hydra's job logging shows it on the console and keeps it in the run's log file
    log.info("DivergenceRadius report (%.0f s):\n%s\nwritten to %s", time.perf_counter() - t0, report.markdown(), out)
    return out


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="robustness.yaml")
def main(cfg: DictConfig) -> None:
    keep_freed_memory()  # reuse freed activation memory (docs/speed.md), as every CLI does
    run(cfg)


if __name__ == "__main__":
    main()
