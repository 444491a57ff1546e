"""``python -m src.monitor_study``: the monitoring study (Hydra config ``configs/monitor_study.yaml``).

Runs the grid (:mod:`.runner`; resumable: ``runs_file=<a previous run's runs.jsonl>`` runs only what is missing),
then writes the report (:mod:`.render`) into the run folder: ``monitor_study.md`` / ``.csv`` / ``.json``,
``agreement.csv``, ``collapse.csv``, ``runs.csv``, ``agreement.png``, ``regret.png``, ``curves.png``.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from ..utils.allocator import keep_freed_memory
from ..utils.console import announce_run, quiet_cli
from ..utils.hydra_utils import register_resolvers  # noqa: F401  (configs/hydra resolvers)
from ..utils.resources import config_dir

log = logging.getLogger("repbench")


def run(cfg: DictConfig) -> str:
    """The study of a composed monitor_study.yaml; returns the Markdown report. The plan and the output directory are
    checked before any run."""
    from ..utils.run_dir import OUTPUT_DIR_FIX, check_writable_dir
    from .render import study_report
    from .runner import plan_from, run_study

    plan = plan_from(OmegaConf.to_container(cfg, resolve=True))
    out = check_writable_dir(cfg.paths.output_dir, OUTPUT_DIR_FIX)
    runs_file = Path(cfg.runs_file) if cfg.get("runs_file") else Path(out) / "runs.jsonl"
    keep_freed_memory()
    t0 = time.perf_counter()
    say = (lambda line: log.info("%s", line)) if cfg.progress else None
    log.info("monitoring study: %d runs (%s x %d learning rates x %d seeds, %d epochs) -> %s", len(plan.keys()),
             "/".join(plan.objectives), len(plan.lrs), len(plan.seeds), plan.epochs, runs_file)  # fmt: skip
    records = run_study(plan, runs_file, progress=say)
    report = study_report(records, collapse_drop=float(cfg.collapse_drop), n_boot=int(cfg.n_boot))
    report.write(out)
    log.info("monitoring study (%.0f s):\n%s\nwritten to %s", time.perf_counter() - t0, report.markdown, out)
    return report.markdown


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="monitor_study.yaml")
@quiet_cli()  # no third-party advertisements or known-harmless warnings, for this call only
def main(cfg: DictConfig) -> None:
    announce_run(cfg)  # the first lines, before anything slow
    run(cfg)


if __name__ == "__main__":
    main()
