"""``python -m src.synbench``: compare backbones by SynBench-Score (Hydra config ``configs/synbench.yaml``).

Writes to the run directory (:class:`~src.utils.report_writer.Report`, as every method's CLI): ``synbench.md``
(Markdown, one table per a_T: backbones x ε), ``synbench.csv`` (backbone, eps, a_T, score), ``synbench.json`` (every
SynBenchResult, re-loadable with ``SynBenchResult.from_dict``), ``curves.png`` (E(a_t) at ε = 0 for every backbone
with the reference, the paper's Fig. 3) and ``score_vs_eps.png``.

``rejection.data=[<configs/data options>]`` runs the rejection test of the paper's App. A.19 on those data sets
instead (:func:`run_rejection`: ``rejection.{md,csv,json}``).
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


def run_rejection(cfg: DictConfig) -> str:
    """The rejection test of the paper's App. A.19 (:func:`src.synbench.rejection.rejection_test`) of every data set
    of ``rejection.data`` against Gaussian-I and Gaussian-H (the ``synbench`` block's band, normalisation and seed);
    writes ``rejection.md`` (Table 20's layout), ``rejection.csv`` (a row per set and covariance) and
    ``rejection.json`` (every :class:`~src.synbench.rejection.RejectionResult`). Every option is checked and every
    set opened before any image is read: a missing set fails first (``DatasetNotFoundError`` naming the fix)."""
    import dataclasses

    from ..utils.data_tensors import dataset_tensors, load_data_config, open_splits
    from ..utils.report_writer import Report
    from ..utils.run_dir import OUTPUT_DIR_FIX, check_writable_dir
    from .rejection import MEANS, SCALES, rejection_test, table20

    config = SynBenchConfig(**protocol_fields(cfg)[0])
    opts = OmegaConf.to_container(cfg.rejection, resolve=True)
    for key, allowed in (("mean", MEANS), ("scale", SCALES)):
        if opts[key] not in allowed:
            raise ValueError(f"rejection.{key} must be one of {allowed}, got {opts[key]!r}")
    if not isinstance(opts["alpha"], (int, float)) or not 0 < opts["alpha"] < 1:
        raise ValueError(f"rejection.alpha must lie in (0, 1), got {opts['alpha']!r}")
    out = check_writable_dir(cfg.paths.output_dir, OUTPUT_DIR_FIX)
    paths = OmegaConf.to_container(cfg.paths, resolve=True)
    opened = {}
    for entry in opts["data"]:  # every set opened before any is read
        name = entry if isinstance(entry, str) else str(dict(entry).get("option", entry))
        dm = load_data_config(entry, config.seed, opts["image_size"], paths=paths, key="rejection.data")
        opened[name] = open_splits(dm, (opts["split"],), key=f"rejection.data {name!r}")[opts["split"]]
    results = []
    for name, dataset in opened.items():
        count = opts["max_items"]
        count = None if count is None or count >= len(dataset) else count
        images, _ = dataset_tensors(dataset, count, seed=config.seed, key="rejection.max_items", minimum=3)
        tests = [
            rejection_test(images, dataclasses.replace(config, covariance=cov), mean=opts["mean"],
                           scale=opts["scale"], alpha=opts["alpha"])
            for cov in ("identity", "banded")
        ]  # fmt: skip
        results.append((name, *tests))
        log.info("rejection test: %s (%d images, d = %d) done", name, tests[0].n, tests[0].d)
    markdown = (
        f"Rejection test (App. A.19; Table 20's layout): mean {opts['mean']}, scale {opts['scale']}, Gaussian-H band "
        f"{list(config.band)}. 'paper p' = the mean over images of 1 - F_chi2_d(MD^2) (Table 20's number as read here; "
        f"not a test); 'KS p' = the valid test (reject at alpha = {opts['alpha']:g}).\n\n" + table20(results) + "\n"
    )
    rows = [{"data": name, **r.summary()} for name, *tests in results for r in tests]
    data = {name: {r.covariance: r.to_dict() for r in tests} for name, *tests in results}
    Report(method="rejection", rows=rows, markdown=markdown, data=data).write(out)
    log.info("SynBench rejection test:\n%s\nwritten to %s", markdown, out)
    return markdown


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="synbench.yaml")
@quiet_cli()  # no third-party advertisements or known-harmless warnings, for this call only
def main(cfg: DictConfig) -> None:
    announce_run(cfg)  # the first lines, before anything slow
    if (cfg.get("rejection") or {}).get("data"):
        run_rejection(cfg)
    else:
        run(cfg)


if __name__ == "__main__":
    main()
