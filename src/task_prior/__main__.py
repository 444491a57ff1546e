"""``python -m src.task_prior``: the Task-Prior probe study over several backbones (Hydra config
``configs/task_prior.yaml``: ``backbones``, the ``task_prior:`` block = :class:`~src.task_prior.config.TaskPriorConfig`,
``data.num_images`` / ``data.image_size`` of the bundled digits, ``device``, ``max_batch``), or
``python -m src.task_prior aggregate=<dir>`` to tabulate the runs of ``python -m src.train -m experiment=task_prior
backbone=...``.

Writes ``task_prior.csv``, ``task_prior.md`` (per backbone: mean/var/quantiles of probe accuracy over sampled tasks,
E and Var of Thm 2.3, z = E/√Var; and the correlations across backbones), ``task_prior.json`` and
``e_vs_accuracy.png`` to the run directory (Task Priors, Patel & Balestriero, arXiv:2507.09871, Fig. 2 / App. D.1).
"""

from __future__ import annotations

import logging
import time

import hydra
from omegaconf import DictConfig, OmegaConf

from ..backbones.spec import backbone_labels, backbone_list
from ..utils.allocator import keep_freed_memory
from ..utils.hydra_utils import register_resolvers  # noqa: F401  (configs/hydra resolvers)
from ..utils.resources import config_dir
from ..utils.run_dir import OUTPUT_DIR_FIX, check_writable_dir
from .config import task_prior_config
from .report import collect_rows, compare_backbones, digits_images, write_table
from .validation import check_int

log = logging.getLogger("repbench")


def aggregate(directory: str) -> str:
    """``aggregate=<dir>``: the table of the ``task_prior_row.json`` files under ``directory``, written there."""
    rows = collect_rows(directory)  # the folder exists and every row file is sound (cheap: small JSON files)
    check_writable_dir(directory, f"make {directory} writable, or copy the run folders to a writable place")
    table = write_table(rows, directory)["md"].read_text()
    log.info("Task-Prior table of %s:\n%s", directory, table)
    return table


def run(cfg: DictConfig) -> str:
    """The probe study of a composed task_prior.yaml (or ``aggregate``); returns the Markdown table. Every check of
    the configuration and of the output directory comes before any backbone is built."""
    if cfg.get("aggregate"):
        return aggregate(str(cfg.aggregate))
    t0 = time.perf_counter()
    config = task_prior_config(OmegaConf.to_container(cfg.task_prior, resolve=True))  # every option checked now
    backbones = backbone_list(OmegaConf.to_container(cfg.backbones, resolve=True) if cfg.backbones else None)
    backbone_labels(backbones)  # duplicates refused before any work
    max_batch = check_int(cfg.max_batch, "max_batch", 1)
    images = digits_images(cfg.data.num_images, cfg.data.image_size, prefix="data.")  # cheap: 8x8 digits upsampled
    out = check_writable_dir(cfg.paths.output_dir, OUTPUT_DIR_FIX)
    keep_freed_memory()  # reuse freed activation memory (docs/speed.md), as every CLI does
    report = compare_backbones(
        backbones,
        config,
        images=images,
        max_batch=max_batch,
        device=cfg.device,
        progress=bool(cfg.progress),
        prior_matrix=cfg.get("prior_matrix", False),  # Fig. 6: every backbone as prior x every one evaluated
    )
    report.write(out)
    # once: Hydra's job logging shows it on the console and keeps it in the run's log file
    log.info("Task-Prior probe study (%.0f s):\n%s\nwritten to %s", time.perf_counter() - t0, report.markdown, out)
    return report.markdown


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="task_prior.yaml")
def main(cfg: DictConfig) -> None:
    run(cfg)


if __name__ == "__main__":
    main()
