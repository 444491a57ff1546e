"""``python -m src.taskprior``: the Task-Prior probe study over several backbones (Hydra config
``configs/task_prior.yaml``), or ``python -m src.taskprior aggregate=<dir>`` to tabulate the runs of
``python -m src.train -m experiment=task_prior backbone=...``.

Writes ``task_prior.csv``, ``task_prior.md`` (per backbone: mean/var/quantiles of probe accuracy over sampled tasks,
E and Var of Thm 2.3, z = E/√Var; and the correlations across backbones) and ``task_prior.json`` to the run
directory (Task Priors, Patel & Balestriero, arXiv:2507.09871, Fig. 2 / App. D.1).
"""

from __future__ import annotations

import logging
import numbers
import time

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from ..utils.allocator import keep_freed_memory
from ..utils.digits import check_image_size
from ..utils.hydra_utils import register_resolvers  # noqa: F401  (configs/hydra resolvers)
from ..utils.resources import config_dir
from ..utils.run_dir import OUTPUT_DIR_FIX, check_writable_dir
from .report import collect_rows, compare_backbones, write_table

log = logging.getLogger("repbench")


def digits_images(num_images: int, image_size: int) -> torch.Tensor:
    """The first ``num_images`` scikit-learn digits as (N, 3, S, S) images in [0, 1] (offline); a ValueError naming
    ``data.num_images`` / ``data.image_size`` for values out of range."""
    from ..utils.digits import load_digits_tensors, upsample_digits

    size = check_image_size(image_size, "data.image_size")
    images, _ = load_digits_tensors()
    if (
        isinstance(num_images, bool)
        or not isinstance(num_images, numbers.Integral)
        or not 2 <= num_images <= len(images)
    ):
        raise ValueError(
            f"data.num_images must be an integer in [2, {len(images)}] (the bundled digits), got {num_images!r}"
        )
    return upsample_digits(images[: int(num_images)], size).contiguous()


def aggregate(directory: str) -> str:
    """``aggregate=<dir>``: the table of the ``task_prior_row.json`` files under ``directory``, written there."""
    rows = collect_rows(directory)  # the folder exists and every row file is sound (cheap: small JSON files)
    check_writable_dir(directory, f"make {directory} writable, or copy the run folders to a writable place")
    table = write_table(rows, directory)["md"].read_text()
    log.info("Task-Prior table of %s:\n%s", directory, table)
    return table


def run(cfg: DictConfig) -> str:
    """The probe study of a composed task_prior.yaml (or ``aggregate``); returns the Markdown table. Every check of
    the configuration and of the output directory comes before the work."""
    if cfg.get("aggregate"):
        return aggregate(str(cfg.aggregate))
    t0 = time.perf_counter()
    images = digits_images(cfg.data.num_images, cfg.data.image_size)  # checks data.* (cheap: 8x8 digits upsampled)
    out = check_writable_dir(cfg.paths.output_dir, OUTPUT_DIR_FIX)
    torch.manual_seed(int(cfg.seed))  # random-weight backbones are initialised from the global generator
    options = OmegaConf.to_container(cfg.probe, resolve=True)
    rows, _ = compare_backbones(
        OmegaConf.to_container(cfg.backbones, resolve=True),
        OmegaConf.to_container(cfg.prior_backbone, resolve=True),
        images,
        max_batch=int(cfg.max_batch),
        device=cfg.device,
        progress=log.info,
        seed=int(cfg.seed),
        **options,
    )
    md = write_table(rows, out)["md"].read_text()
    log.info("Task-Prior probe study (%.0f s):\n%s\nwritten to %s", time.perf_counter() - t0, md, out)
    return md


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="task_prior.yaml")
def main(cfg: DictConfig) -> None:
    keep_freed_memory()  # reuse freed activation memory (docs/speed.md), as every CLI does
    run(cfg)  # the table is logged once (console and the run's log file) and written to task_prior.md


if __name__ == "__main__":
    main()
