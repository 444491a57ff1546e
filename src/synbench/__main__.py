"""``python -m src.synbench``: compare backbones by SynBench-Score (Hydra config ``configs/synbench.yaml``).

Writes to the run directory (:class:`~src.utils.report_writer.Report`, as every method's CLI): ``synbench.md``
(Markdown, one table per a_T: backbones x ε), ``synbench.csv`` (backbone, eps, a_T, score), ``synbench.json`` (every
SynBenchResult, re-loadable with ``SynBenchResult.from_dict``), ``curves.png`` (E(a_t) at ε = 0 for every backbone
with the reference, the paper's Fig. 3) and ``score_vs_eps.png``.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import hydra
from omegaconf import DictConfig, OmegaConf

from ..utils.allocator import keep_freed_memory
from ..utils.console import announce_run, quiet_cli
from ..utils.hydra_utils import register_resolvers, with_run_seed  # noqa: F401  (configs/hydra resolvers)
from ..utils.resources import config_dir
from .compare import INPUT_SIZE_FIX, compare_backbones
from .config import SYNBENCH_BUDGETS, SynBenchConfig, synbench_budget

log = logging.getLogger("repbench")


def protocol_fields(cfg: DictConfig) -> tuple[dict[str, Any], int | None]:
    """(SynBenchConfig fields, input size) of a composed synbench.yaml: full=true → the official defaults and
    each backbone's native size, else the named ``budget`` (:data:`~src.synbench.config.SYNBENCH_BUDGETS`, default
    ``cpu``) with the ``reduced`` fields that are not null on top, at ``input_size``; ``synbench`` applies on top of
    both. The seed is the run's (``seed``, configs/run_options) unless the ``synbench`` block sets one."""
    if cfg.full:
        fields: dict[str, Any] = {}
    else:
        name = cfg.get("budget", "cpu")
        if name not in SYNBENCH_BUDGETS:
            raise ValueError(
                f"budget must be one of {', '.join(SYNBENCH_BUDGETS)} (named SynBench budgets), got {name!r}"
            )
        reduced = OmegaConf.to_container(cfg.reduced, resolve=True) if cfg.get("reduced") is not None else {}
        fields = {**synbench_budget(name), **{k: v for k, v in reduced.items() if v is not None}}
    fields.update(OmegaConf.to_container(cfg.synbench, resolve=True) or {})
    return with_run_seed(fields, cfg), (None if cfg.full else cfg.input_size)


def run(cfg: DictConfig) -> str:
    """The comparison of a composed synbench.yaml; returns the Markdown table. The protocol, ``input_size`` and the
    output directory are checked before any backbone is built."""
    from ..backbones.spec import backbone_labels, backbone_list
    from ..features import extractor_options
    from ..utils.checks import check_image_size
    from ..utils.run_dir import OUTPUT_DIR_FIX, check_writable_dir

    fields, input_size = protocol_fields(cfg)
    config = SynBenchConfig(**fields)  # every protocol field checked now, not after the first backbone
    extractor = extractor_options(OmegaConf.to_container(cfg.extractor, resolve=True))  # the run's forwards
    backbones = backbone_list(OmegaConf.to_container(cfg.backbones, resolve=True) if cfg.backbones else None)
    backbone_labels(backbones)  # duplicates refused before any work
    if cfg.input_size is not None:  # null = each backbone's native size; checked under full=true too (a typo)
        check_image_size(cfg.input_size, "input_size", INPUT_SIZE_FIX)
    out = check_writable_dir(cfg.paths.output_dir, OUTPUT_DIR_FIX)
    keep_freed_memory()  # reuse freed activation memory (docs/speed.md)
    t0 = time.perf_counter()
    report = compare_backbones(
        backbones,
        config,
        input_size=input_size,
        extractor=extractor,
        device=cfg.device,
        progress=bool(cfg.progress),
    )
    report.write(out)
    # once: Hydra's job logging shows it on the console and keeps it in the run's log file
    log.info("SynBench comparison (%.0f s):\n%s\nwritten to %s", time.perf_counter() - t0, report.markdown, out)
    return report.markdown


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="synbench.yaml")
@quiet_cli()  # no third-party advertisements or known-harmless warnings, for this call only
def main(cfg: DictConfig) -> None:
    announce_run(cfg)  # the first lines, before anything slow
    run(cfg)


if __name__ == "__main__":
    main()
