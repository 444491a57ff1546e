"""``python -m src.report``: the backbone audit report (Hydra config ``configs/report.yaml``; docs/report.md).

Writes to the run directory ``report.html`` (one self-contained page: tables and figures embedded), ``report.md``,
``report.csv`` (one row per backbone), ``report.json`` (every value, the settings, the agreement), ``agreement.csv``
and the PNG figures. Per-backbone results are cached under ``cache_dir`` by (weights, part, settings): a second run
with one more backbone computes only that one, and a killed run resumes.
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

log = logging.getLogger("repbench")


def _given(block: dict[str, Any] | None) -> dict[str, Any]:
    """The fields of a method block that are set (null = the method's own default, stated once in its config class)."""
    return {k: v for k, v in (block or {}).items() if v is not None}


def synbench_block(block: dict[str, Any]) -> Any:
    """The :class:`~src.synbench.SynBenchConfig` of the report's ``synbench`` block; its errors name the report's key
    (``synbench.n_train must be an integer >= 4, got 'abc' (str)``)."""
    from ..synbench import SynBenchConfig

    try:
        return SynBenchConfig(**block)
    except (TypeError, ValueError) as err:
        text = str(err)
        prefix = "synbench." if text.split(" ", 1)[0] in block else "synbench: "
        raise type(err)(prefix + text) from err


def agreement_options(cfg: DictConfig) -> tuple[int, float]:
    """(``agreement.n_boot``, ``agreement.level``) of a composed report.yaml, checked (an integer >= 1, a number in
    (0, 1)): a bad value is refused before any work, not after every part has been computed."""
    from ..stats.rank_agreement import check_agreement_options

    block = cfg.get("agreement") or {}
    return check_agreement_options(block.get("n_boot", 2000), block.get("level", 0.9), prefix="agreement.")


def audit_config(cfg: DictConfig) -> Any:
    """The :class:`~src.report.audit.AuditConfig` of a composed report.yaml (every field checked here, the
    ``agreement`` block too: :func:`agreement_options`). The run's ``seed`` (configs/run_options) is the seed of
    SynBench (and the baselines) and of each method block whose ``seed`` is null."""
    import dataclasses

    from ..methods import METHODS
    from ..synbench import SynBenchConfig
    from .audit import AuditConfig

    agreement_options(cfg)
    plain = OmegaConf.to_container(cfg, resolve=True)
    own = {f.name for f in dataclasses.fields(AuditConfig)}
    # a registered method without a field of its own: its YAML block is its name (`+<name>={...}` on the command line)
    methods = {m: _given(plain.get(m)) for m in METHODS if m not in own}
    down = dict(plain["downstream"])
    # full: the official protocol (the proxy task's SA / RA as the block asks), the run's seed
    sb = with_run_seed({"proxy": plain["synbench"].get("proxy")} if plain["full"] else plain["synbench"], cfg)
    synbench = SynBenchConfig(**sb) if plain["full"] else synbench_block(sb)
    return AuditConfig(
        parts=tuple(plain["parts"]),
        input_size=None if plain["full"] else plain["input_size"],
        synbench=synbench,
        baseline_s=plain["baselines"]["s"],
        baselines=plain["baselines"]["which"],
        baseline_eps=tuple(plain["baselines"]["eps"]),
        baseline_convention=plain["baselines"]["convention"],
        baseline_probe=_given(plain["baselines"]["probe"]),
        divergence_radius=with_run_seed(_given(plain["divergence_radius"]), cfg),
        dr_images=plain["dr_images"],
        dr_image_size=plain["dr_image_size"],
        task_prior=with_run_seed(_given(plain["task_prior"]), cfg),
        tp_images=plain["tp_images"],
        tp_image_size=plain["tp_image_size"],
        tp_data=plain.get("tp_data"),
        depth=_given(plain["depth"]),
        depth_images=plain["depth_images"],
        depth_image_size=plain["depth_image_size"],
        depth_data=plain["depth_data"],
        downstream={k: down[k] for k in ("epsilons", "steps", "norm", "C")},
        budgets=tuple(plain["budgets"]["sizes"] or ()),
        budget_pair=plain["budgets"]["pair"],
        seeds=tuple(plain["seeds"] or ()),
        methods=methods,
    )


def downstream_sets(
    names: list[Any], image_size: int, seed: int, paths: dict[str, Any] | None = None, max_items: int | None = None
) -> dict[str, Any]:
    """{name: ((train x, y), (test x, y))} from the training CLI's ``configs/data`` options (their training and
    held-out test splits; :mod:`src.utils.data_tensors`): a name or ``{option: <name>, **overrides}`` (a mapping is
    labelled by its ``option``). ``max_items``: at most this many seeded images per split (the probes hold every image
    in memory: CIFAR-10 at 224 px is 30 GB); None = all. A missing data set fails here, naming the files it needs."""
    from ..utils.data_tensors import load_data_config, open_splits, split_tensors

    if max_items is not None and (isinstance(max_items, bool) or not isinstance(max_items, int) or max_items < 2):
        raise ValueError(f"downstream.max_items must be null or an integer >= 2, got {max_items!r}")
    labels = [entry if isinstance(entry, str) else str(dict(entry).get("option", entry)) for entry in names]
    for name in labels:  # before any set is loaded
        check_downstream_option(name)
    out = {}
    for entry, name in zip(names, labels):
        dm = load_data_config(entry, seed, image_size, paths=paths, key="downstream.sets")
        sizes = {k: len(ds) for k, ds in open_splits(dm, ("train", "test"), key=f"downstream.sets {name!r}").items()}
        caps = {k: None if max_items is None or max_items >= n else max_items for k, n in sizes.items()}
        sets = split_tensors(dm, ("train", "test"), caps, seed=seed, key=f"downstream.sets {name!r}")
        check_learnable_labels(name, sets["train"][1], sets["test"][1], max_items)
        out[name] = (sets["train"], sets["test"])
    return out


#: configs/data options that are not downstream sets, and why (their labels cannot be learned across the split)
NOT_DOWNSTREAM = {
    "photos": "its labels say which photo a crop comes from, and its test crops come from photos of their own "
    "(configs/data/photos.yaml: test_photos), so no test label occurs in training: every probe scores 0",
}


def check_downstream_option(name: str) -> None:
    """Refuse a ``downstream.sets`` entry that names a configs/data option without learnable labels
    (:data:`NOT_DOWNSTREAM`), or no option at all, naming why and the sets to use instead."""
    from ..utils.data_tensors import data_options

    usable = [o for o in data_options() if o not in NOT_DOWNSTREAM]
    if name in NOT_DOWNSTREAM:
        raise ValueError(
            f"downstream.sets: {name!r} is not a downstream set: {NOT_DOWNSTREAM[name]}. Choose labelled sets whose "
            f"test classes occur in training, e.g. downstream.sets=[digits] (configs/data options: {usable})"
        )
    if name not in data_options() and not name.startswith("{"):  # a mapping with a _target_ is labelled by itself
        raise ValueError(f"downstream.sets: no data config {name!r}; choose from {usable} (configs/data/)")


def check_learnable_labels(name: str, train_y: Any, test_y: Any, max_items: int | None = None) -> None:
    """Refuse a downstream set whose test split holds labels that its training split lacks: a probe cannot predict
    them, so the accuracy would measure the split, not the backbone (e.g. the bundled photos' "which photo" labels)."""
    unseen = sorted(set(test_y.tolist()) - set(train_y.tolist()))
    if unseen:
        cap = f", or raise downstream.max_items={max_items} (a sample may miss a class)" if max_items else ""
        raise ValueError(
            f"downstream.sets {name!r}: its test labels {unseen[:10]}{' ...' if len(unseen) > 10 else ''} never occur "
            f"in its training split ({len(set(train_y.tolist()))} training labels), so a probe cannot learn them and "
            f"its accuracy would not measure the backbone. Use a set whose test classes occur in training{cap}"
        )


def run(cfg: DictConfig) -> str:
    """The audit of a composed report.yaml; returns the Markdown report (``stage=compute``: the line saying what was
    computed and the page's command). Settings, backbones and the output directory are checked before any work.
    ``stage`` / ``shard``: :mod:`src.report.jobs` (one job per backbone, the page from the cache)."""
    from ..backbones.spec import backbone_labels, backbone_list
    from ..features import extractor_options
    from ..utils.console import task_overrides
    from ..utils.run_dir import OUTPUT_DIR_FIX, check_writable_dir
    from .audit import check_part_backbones, run_audit
    from .cache import ResultCache
    from .jobs import MissingEntries, check_stage, compute_command, computed_message, job_device, shard_indices
    from .render import write_audit

    config = audit_config(cfg)
    stage = check_stage(cfg.get("stage", "all"), cfg.get("shard"), cfg.cache_dir)
    extractor = extractor_options(OmegaConf.to_container(cfg.extractor, resolve=True))  # every backbone forward
    backbones = backbone_list(OmegaConf.to_container(cfg.backbones, resolve=True) if cfg.backbones else None)
    only = shard_indices(cfg.get("shard"), backbone_labels(backbones))  # None: every backbone
    check_part_backbones(config, backbones)  # e.g. depth: a backbone without a feature map, before any data is read
    external = None
    if cfg.downstream.get("external"):  # ground truth measured elsewhere: read and matched before any work
        from .external import load_external

        external = load_external(cfg.downstream.external, backbone_labels(backbones))
    out = check_writable_dir(cfg.paths.output_dir, OUTPUT_DIR_FIX)
    ResultCache(cfg.cache_dir).check(config.parts)  # before the downstream sets are loaded
    keep_freed_memory()
    t0 = time.perf_counter()
    down = cfg.downstream
    tp_images = None
    if "task_prior" in config.parts and config.tp_data is not None:  # read first: a missing folder stops the run now
        from ..utils.data_tensors import data_images

        tp_images = data_images(config.tp_data, config.tp_images, image_size=config.tp_image_size,
                                seed=config.task_prior.seed, paths=OmegaConf.to_container(cfg.paths, resolve=True),
                                key="tp_data", count_key="tp_images")  # fmt: skip
    inputs: dict[str, Any] = {}
    if "depth" in config.parts and config.depth_data is not None:  # read first: a missing file stops the run now
        from ..methods.audit_parts import depth_sets

        inputs["depth"] = depth_sets(config, paths=OmegaConf.to_container(cfg.paths, resolve=True))
    sets = None
    if "downstream" in config.parts:
        paths = OmegaConf.to_container(cfg.paths, resolve=True)
        sets = downstream_sets(
            OmegaConf.to_container(down.sets), int(down.image_size), int(cfg.seed), paths, down.get("max_items")
        )
    try:
        with job_device(str(cfg.device), only) as device:  # a shard on a machine of several GPUs: one of its own
            results = run_audit(backbones, config, downstream=sets, tp_images=tp_images, inputs=inputs,
                                cache_dir=cfg.cache_dir, device=device, progress=bool(cfg.progress),
                                extractor=extractor, only=only, compute=stage != "page")  # fmt: skip
    except MissingEntries as err:
        fix = f"compute them with: {compute_command(err.indices, task_overrides())} — then run this command again"
        raise MissingEntries(err.missing, err.cache_dir, fix) from None
    if stage == "compute":
        done = computed_message(results.labels, results.cache_hits, results.cache_misses,
                                time.perf_counter() - t0, cfg.cache_dir, task_overrides())  # fmt: skip
        log.info("%s", done)
        return done
    results.external = external
    md = write_audit(results, out, *agreement_options(cfg))["md"].read_text()
    log.info(
        "Backbone audit (%.0f s; cache: %d reused, %d computed):\n%s\nwritten to %s (open report.html)",
        time.perf_counter() - t0, results.cache_hits, results.cache_misses, md, out,
    )  # fmt: skip
    return md


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="report.yaml")
@quiet_cli()  # no third-party advertisements or known-harmless warnings, for this call only
def main(cfg: DictConfig) -> None:
    announce_run(cfg)  # the first lines, before anything slow
    run(cfg)


if __name__ == "__main__":
    main()
