"""``python -m src.taskprior``: the Task-Prior probe study over several backbones (Hydra config
``configs/task_prior.yaml``), or ``python -m src.taskprior aggregate=<dir>`` to tabulate the runs of
``python -m src.train -m experiment=task_prior backbone=...``.

Writes ``task_prior.csv``, ``task_prior.md`` (per backbone: mean/var/quantiles of probe accuracy over sampled tasks,
E and Var of Thm 2.3, z = E/√Var; and the correlations across backbones) and ``task_prior.json`` to the run
directory (Task Priors, Patel & Balestriero, arXiv:2507.09871, Fig. 2 / App. D.1).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from ..utils.hydra_utils import register_resolvers  # noqa: F401  (configs/hydra resolvers)
from ..utils.resources import config_dir
from .report import collect_rows, compare_backbones, write_table

log = logging.getLogger("repbench")


def digits_images(num_images: int, image_size: int) -> torch.Tensor:
    """The first ``num_images`` scikit-learn digits as (N, 3, S, S) images in [0, 1] (offline)."""
    from ..data.digits import load_digits_tensors, upsample_digits

    images, _ = load_digits_tensors()
    if not 2 <= int(num_images):
        raise ValueError(f"num_images must be >= 2, got {num_images}")
    return upsample_digits(images[: int(num_images)], int(image_size)).contiguous()


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="task_prior.yaml")
def main(cfg: DictConfig) -> None:
    out = Path(cfg.paths.output_dir)
    if cfg.get("aggregate"):
        paths = write_table(collect_rows(cfg.aggregate), cfg.aggregate)
        print(paths["md"].read_text())
        return
    torch.manual_seed(int(cfg.seed))  # random-weight backbones are initialised from the global generator
    t0 = time.perf_counter()
    images = digits_images(cfg.data.num_images, cfg.data.image_size)
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
    paths = write_table(rows, out)
    md = paths["md"].read_text()
    log.info("Task-Prior probe study (%.0f s):\n%s\nwritten to %s", time.perf_counter() - t0, md, out)
    print(md)


if __name__ == "__main__":
    main()
