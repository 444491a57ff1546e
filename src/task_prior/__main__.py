"""``python -m src.task_prior``: the Task-Prior probe study over several backbones (Hydra config
``configs/task_prior.yaml``: ``backbones``, the ``task_prior:`` block = :class:`~src.task_prior.config.TaskPriorConfig`,
``data.num_images`` / ``data.image_size`` of the bundled digits or of ``data=<configs/data option>`` (its
``data.split``), and the run options every comparison CLI shares (``device``, ``progress``, ``extractor``, ``seed``:
configs/run_options/default.yaml; the top-level ``max_batch`` is a deprecated alias of ``extractor.max_batch``), or
``python -m src.task_prior aggregate=<dir>`` to tabulate the runs of ``python -m src.train -m experiment=task_prior
backbone=...``.

Writes ``task_prior.csv``, ``task_prior.md`` (per backbone: mean/var/quantiles of probe accuracy over sampled tasks,
E and Var of Thm 2.3, z = E/√Var; and the correlations across backbones), ``task_prior.json`` and
``e_vs_accuracy.png`` to the run directory (Task Priors, Patel & Balestriero, arXiv:2507.09871, Fig. 2 / App. D.1).
"""

from __future__ import annotations

import logging
import time
import warnings
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf
from torch import Tensor

from ..backbones.spec import backbone_labels, backbone_list
from ..utils.allocator import keep_freed_memory
from ..utils.checks import check_int
from ..utils.console import announce_run, quiet_cli
from ..utils.hydra_utils import register_resolvers, with_run_seed  # noqa: F401  (configs/hydra resolvers)
from ..utils.resources import config_dir
from ..utils.run_dir import OUTPUT_DIR_FIX, check_writable_dir
from .compare import compare_backbones
from .config import TaskPriorConfig
from .report import collect_rows, digits_images, write_table

log = logging.getLogger("repbench")


def aggregate(directory: str) -> str:
    """``aggregate=<dir>``: the table of the ``task_prior_row.json`` files under ``directory``, written there."""
    rows = collect_rows(directory)  # the folder exists and every row file is sound (cheap: small JSON files)
    check_writable_dir(directory, f"make {directory} writable, or copy the run folders to a writable place")
    table = write_table(rows, directory)["md"].read_text()
    log.info("Task-Prior table of %s:\n%s", directory, table)
    return table


def forward_options(cfg: DictConfig) -> dict[str, Any]:
    """The FeatureExtractor options of the run's forwards: the ``extractor`` block (configs/run_options,
    :func:`src.features.extractor_options`), with the deprecated top-level ``max_batch`` as ``extractor.max_batch``
    (a FutureWarning; refused where both are set and differ)."""
    from ..features import extractor_options

    block = OmegaConf.to_container(cfg.extractor, resolve=True) if cfg.get("extractor") is not None else {}
    if cfg.get("max_batch") is not None:
        legacy = check_int(cfg.max_batch, "max_batch", 1)
        given = block.get("max_batch")
        if given is not None and given != legacy:
            raise ValueError(
                f"max_batch={legacy} (deprecated) and extractor.max_batch={given} disagree; set only "
                f"extractor.max_batch={given}"
            )
        warnings.warn(
            f"max_batch={legacy} is deprecated; use extractor.max_batch={legacy} (configs/run_options/default.yaml, "
            "shared by every comparison CLI)",
            FutureWarning,
            stacklevel=2,
        )
        block["max_batch"] = legacy
    return extractor_options(block)


#: keys of the ``data:`` block that are this CLI's own (the rest, with ``data=<option>``, is the data module's)
OWN_DATA_KEYS = ("num_images", "split")


def study_images(cfg: DictConfig, seed: int) -> Tensor:
    """The images of the study. Without ``data=``: the first ``data.num_images`` bundled digits at
    ``data.image_size`` (as before ``data=`` existed). With ``data=<configs/data option>`` (the training CLI's
    group, built at ``data.image_size`` with the study's ``seed``): ``data.num_images`` images of its
    ``data.split`` split (null = train), drawn by ``seed`` rather than the first ones (a class-sorted image folder
    would give one class). Reads the files: a missing folder fails here, before any backbone is built."""
    from ..utils.checks import check_image_size
    from ..utils.data_tensors import data_images

    data = cfg.data
    if "_target_" not in data:
        if data.get("split") is not None:
            raise ValueError(
                f"data.split={data.split!r} picks a split of a data set, and the bundled digits (no data=) have none; "
                "set data.split=null, or data=digits (the training CLI's digits module and its train/val/test splits)"
            )
        return digits_images(data.num_images, data.image_size, prefix="data.")  # cheap: 8x8 digits upsampled
    size = check_image_size(data.image_size, "data.image_size")
    split = data.get("split") or "train"
    node = {k: v for k, v in OmegaConf.to_container(data).items() if k not in OWN_DATA_KEYS}
    paths = OmegaConf.to_container(cfg.paths, resolve=True)
    return data_images(node, data.num_images, image_size=size, seed=seed, split=split, paths=paths,
                       key="data", count_key=f"data.num_images (images of the {split} split)")  # fmt: skip


def run(cfg: DictConfig) -> str:
    """The probe study of a composed task_prior.yaml (or ``aggregate``); returns the Markdown table. Every check of
    the configuration and of the output directory comes before any backbone is built."""
    if cfg.get("aggregate"):
        return aggregate(str(cfg.aggregate))
    t0 = time.perf_counter()
    # every option checked now; seed null: the run's seed (configs/run_options)
    config = TaskPriorConfig.coerce(with_run_seed(OmegaConf.to_container(cfg.task_prior, resolve=True), cfg))
    backbones = backbone_list(OmegaConf.to_container(cfg.backbones, resolve=True) if cfg.backbones else None)
    backbone_labels(backbones)  # duplicates refused before any work
    extractor = forward_options(cfg)
    images = study_images(cfg, config.seed)
    out = check_writable_dir(cfg.paths.output_dir, OUTPUT_DIR_FIX)
    keep_freed_memory()  # reuse freed activation memory (docs/speed.md), as every CLI does
    report = compare_backbones(
        backbones,
        config,
        images=images,
        extractor=extractor,
        device=cfg.device,
        progress=bool(cfg.progress),
        prior_matrix=cfg.get("prior_matrix", False),  # Fig. 6: every backbone as prior x every one evaluated
    )
    report.write(out)
    # once: Hydra's job logging shows it on the console and keeps it in the run's log file
    log.info("Task-Prior probe study (%.0f s):\n%s\nwritten to %s", time.perf_counter() - t0, report.markdown, out)
    return report.markdown


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="task_prior.yaml")
@quiet_cli()  # no third-party advertisements or known-harmless warnings, for this call only (as every RepBench CLI)
def main(cfg: DictConfig) -> None:
    announce_run(cfg)  # the first lines, before anything slow
    run(cfg)


if __name__ == "__main__":
    main()
