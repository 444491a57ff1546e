"""TensorBoard's HParams dashboard: a run's hyperparameters next to the metrics that judge them.

Lightning's ``log_hyperparams`` writes the whole config as text; the HParams tab needs scalar-valued hyperparameters
and the names of metric tags. :func:`run_hparams` picks the few that matter out of the composed config (what
``src.train`` writes): first the ones the command line or a sweep set (Hydra's ``hydra.overrides.task``), then a
short fixed set (``model``, ``backbone/name``, ``seed``, the model's own key options, :data:`MODEL_KEY_OPTIONS`), never a
config group the model does not use (no ``attack/*`` for a module without an attack); :func:`headline_metrics`
keeps the metrics worth a column (the sweep's objective first; no per-perturbation breakdowns, no training-batch
values). :func:`log_hparams_with_metrics` writes the HParams summary once the metric tags exist (the dashboard reads
each metric's last value from the run's scalar curves, so nothing is logged twice and no placeholder point is drawn).

Why the order matters: TensorBoard lists hyperparameters by (differs across runs first, then name) and shows the
first five; the experiment summary a run writes carries no "differs", so before this the tab showed the first five
of 33 names alphabetically (``attack/*``), and the one a sweep varied (``model/lr``) was hidden. The overrides are
now marked as differing, so they come first.
:func:`flat_hparams` (every scalar of the config groups) is kept for callers that want everything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

__all__ = [
    "HPARAM_GROUPS",
    "MODEL_KEY_OPTIONS",
    "flat_hparams",
    "headline_metrics",
    "log_hparams_with_metrics",
    "run_hparams",
]

HPARAM_GROUPS = ("model", "data", "backbone", "attack", "trainer")
_SKIP = ("_target_", "dirpath", "data_dir", "root", "default_root_dir", "results_file")


def flat_hparams(cfg: Mapping[str, Any], groups: Iterable[str] = HPARAM_GROUPS) -> dict[str, Any]:
    """``{"model/lr": 0.003, "backbone/name": "embedded:...", "seed": 0, ...}``: the scalar leaves (numbers, strings,
    booleans; lists of scalars as their text) of the given config groups, plus ``seed`` and ``experiment``."""
    out: dict[str, Any] = {}

    def walk(prefix: str, node: Any) -> None:
        if isinstance(node, Mapping):
            for k, v in node.items():
                if k not in _SKIP:
                    walk(f"{prefix}/{k}", v)
        elif isinstance(node, (list, tuple)):
            if all(isinstance(v, (int, float, str, bool)) or v is None for v in node):
                out[prefix] = str(list(node))
        elif isinstance(node, bool):
            out[prefix] = node
        elif isinstance(node, (int, float, str)):
            out[prefix] = node
        elif node is None:
            out[prefix] = "null"

    for g in groups:
        if g in cfg and cfg[g] is not None:
            walk(g, cfg[g])
    for key in ("seed", "experiment", "task_name"):
        if cfg.get(key) is not None:
            out[key] = cfg[key] if isinstance(cfg[key], (int, float, str, bool)) else str(cfg[key])
    return out


#: each RepBench module's own key options: dotted paths in its ``model`` config (absent ones are skipped)
MODEL_KEY_OPTIONS: dict[str, tuple[str, ...]] = {
    "RobustLinearProbe": ("epsilon", "attack.norm", "attack.steps", "lr"),
    "PerturbationRobustFineTune": ("lam", "perturbations", "trainable", "lr"),
    "SimCLRPretraining": ("temperature", "lr", "weight_decay"),
    "SupervisedPretraining": ("lr", "weight_decay", "label_smoothing"),
    "TaskPriorProbe": ("prior_backbone.name", "num_tasks", "task_classes", "convention"),
}
#: a module RepBench does not know: its learning rate, when its config has one
DEFAULT_KEY_OPTIONS = ("lr",)
#: overrides that say where a run writes, which trial it is or how it is run (a debug budget, the loggers, the sweep's
#: name, the same for every job of a sweep), not what it trains: they would take the HParams tab's first columns
_BOOKKEEPING = ("ckpt_path", "hydra", "paths", "optuna_trial", "task_name", "tags", "debug", "logger", "hparams_search")
#: metric families logged per perturbation with a ``mean`` beside them: only the mean is a headline
_PER_PERTURBATION = ("divergence_radius", "cosine_robustness")


def _scalar(value: Any) -> Any:
    """A value TensorBoard's HParams summary takes (number, string, bool); lists as their text, None as "null"."""
    if isinstance(value, bool) or isinstance(value, (int, float, str)):
        return value
    if value is None:
        return "null"
    if isinstance(value, Sequence):
        return str(list(value))
    return str(value)


def _select(node: Any, dotted: str) -> Any:
    for key in dotted.split("."):
        if not isinstance(node, Mapping) or key not in node:
            return None
        node = node[key]
    return node


def _short_name(node: Mapping[str, Any]) -> str | None:
    """A config group's choice as a value: its ``name`` (a backbone) or its ``_target_``'s class name."""
    if node.get("name") is not None:
        return str(node["name"])
    target = node.get("_target_")
    return str(target).rpartition(".")[2] if target else None


def run_hparams(cfg: Mapping[str, Any], overrides: Iterable[str] = ()) -> tuple[dict[str, Any], list[str]]:
    """(hyperparameters, the names the overrides set) of a resolved config, in this order: the overrides (``key=value``
    of Hydra's ``hydra.overrides.task``, bookkeeping keys such as ``ckpt_path`` and ``paths.*`` left out), each under
    its config path with ``/`` (``model.lr=0.01`` -> ``model/lr``) and with its value read back from ``cfg`` (so it
    has its type); a group choice as what it selected (``backbone=x`` -> ``backbone/name``, ``model=simclr`` ->
    ``model``, the class). Then ``model`` (the class), ``backbone/name``, the model's key options
    (:data:`MODEL_KEY_OPTIONS`, as ``model/<path>``), ``seed`` and ``experiment``."""
    varied: dict[str, Any] = {}
    for override in overrides:
        key, sep, text = str(override).lstrip("+~").partition("=")
        if not sep or key.split(".", 1)[0] in _BOOKKEEPING:
            continue
        value, name = _select(cfg, key), key.replace(".", "/")
        if isinstance(value, Mapping):  # a group choice (backbone=x, model=simclr): what it selected
            name, value = (
                (f"{name}/name", value["name"]) if value.get("name") is not None else (name, _short_name(value))
            )
        varied[name] = _scalar(text if value is None else value)
    fixed: dict[str, Any] = {}
    model = cfg.get("model") if isinstance(cfg.get("model"), Mapping) else {}
    model_class = _short_name({"_target_": model.get("_target_")}) if model.get("_target_") else None
    if model_class:
        fixed["model"] = model_class
    backbone = cfg.get("backbone")
    if isinstance(backbone, Mapping) and backbone.get("name") is not None:
        fixed["backbone/name"] = str(backbone["name"])
    for option in MODEL_KEY_OPTIONS.get(model_class or "", DEFAULT_KEY_OPTIONS):
        value = _select(model, option)
        if value is not None and not isinstance(value, Mapping):
            fixed[f"model/{option.replace('.', '/')}"] = _scalar(value)
    for key in ("seed", "experiment"):
        if cfg.get(key) is not None:
            fixed[key] = _scalar(cfg[key])
    return {**varied, **{k: v for k, v in fixed.items() if k not in varied}}, list(varied)


def headline_metrics(names: Iterable[str], objective: str | Sequence[str] | None = None) -> list[str]:
    """The metrics worth a column in the HParams table: the objective(s) first (``optimized_metric``), then test,
    then validation ones (losses after the other values of their stage); no training-batch values (``train/*``,
    ``lr-*``), only the mean of a per-perturbation family (``val/divergence_radius/mean``, not each perturbation)."""
    names = list(dict.fromkeys(names))
    first = [objective] if isinstance(objective, str) else list(objective or [])

    def headline(name: str) -> bool:
        parts = name.split("/")
        if parts[0] not in ("val", "test"):
            return False
        return not (len(parts) == 3 and parts[1] in _PER_PERTURBATION and parts[2] != "mean")

    rest = sorted(
        (n for n in names if headline(n) and n not in first),
        key=lambda n: (n.split("/")[0] != "test", n.rsplit("/", 1)[-1] == "loss", n),
    )
    return [n for n in first if n in names] + rest


def log_hparams_with_metrics(
    loggers: Iterable[Any], hparams: Mapping[str, Any], metric_names: Iterable[str], varied: Iterable[str] = ()
) -> int:
    """Write the HParams summary to every TensorBoard logger; returns how many got it. The metrics keep their order
    (TensorBoard shows the first five); the hyperparameters named in ``varied`` are marked as differing between runs,
    which TensorBoard lists first."""
    from lightning.pytorch.loggers import TensorBoardLogger
    from torch.utils.tensorboard.summary import hparams as hparams_summary

    names = list(dict.fromkeys(metric_names))
    if not names:
        return 0
    written = 0
    for lg in loggers:
        if not isinstance(lg, TensorBoardLogger):
            continue
        exp, ssi, sei = hparams_summary(dict(hparams), dict.fromkeys(names, 0.0))
        _mark_differing(exp, set(varied))
        writer = lg.experiment._get_file_writer()  # reopened: Lightning closes it when fit/test finalize
        for summary in (exp, ssi, sei):
            writer.add_summary(summary)
        lg.experiment.flush()
        written += 1
    return written


def _mark_differing(experiment_summary: Any, names: set[str]) -> None:
    """Set ``differs`` on the named hyperparameters of a torch-made experiment summary (torch has no argument for it)."""
    if not names:
        return
    from tensorboard.plugins.hparams import plugin_data_pb2

    value = experiment_summary.value[0]
    data = plugin_data_pb2.HParamsPluginData.FromString(value.metadata.plugin_data.content)
    for info in data.experiment.hparam_infos:
        if info.name in names:
            info.differs = True
    value.metadata.plugin_data.content = data.SerializeToString()
