"""The producer of a run's objective: refuse, before any work, an ``optimized_metric`` that no configured callback logs.

A run returns the value of ``optimized_metric`` (src.train, for Hydra sweepers) and a sweep's
:class:`~src.sweeps.OptunaPruning` reports its ``monitor`` after every epoch: both read a value that something logged.
The monitors' values (SynBench-Score, R_dr and cosine robustness, RankMe, α-ReQ, the downstream probes' accuracies)
are logged by their callbacks only, under the callback's ``prefix`` (``val/synbench`` -> ``val/synbench/score``;
``val`` -> ``val/divergence_radius/mean``; ``val/downstream`` -> ``val/downstream/linear_acc``).
A configuration that names one of them but leaves its callback off (an experiment's ``callbacks.synbench: null``,
``debug=fast``, a command line) would train and then fail: :func:`check_objective` says so before anything is built.

Other names (``val/acc``, ``val/utility``, ``val/adv/acc_*``, ``val/task_prior/*``, which the task-prior probe module
logs itself, a selection score) come from the module or from a callback this check does not know: they are checked
when the run ends (``src.train.optimized_metric_value``: a KeyError naming the logged metrics).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from ..methods import resolve

__all__ = ["check_objective", "objective_names"]


def objective_names(cfg: Mapping[str, Any]) -> dict[str, str]:
    """{metric name: who reads it}: ``optimized_metric`` (a name or a list of names) and the ``monitor`` of every
    configured :class:`~src.sweeps.OptunaPruning`."""
    from .pruning import OptunaPruning

    out: dict[str, str] = {}
    name = cfg.get("optimized_metric")
    for n in [name] if isinstance(name, str) else list(name or []):
        out.setdefault(str(n), "optimized_metric")
    for key, cls, node in _configured(cfg):
        if issubclass(cls, OptunaPruning) and isinstance(node.get("monitor"), str):
            out.setdefault(node.monitor, f"callbacks.{key}.monitor")
    return out


def _monitor_of(name: str) -> type | None:
    """The callback class that logs ``name`` when only a monitor logs it, else None: a name a RepBench metric logs
    (``metric_producer``) under a monitor's log group (the segment before the last: ``val/spectrum/rankme``)."""
    from ..callbacks import DownstreamProbeCallback, RepresentationSpectrumCallback, metric_producer
    from ..methods import METHODS

    # by log group, not by metric class: the downstream probes' accuracy is also the modules' val/acc. A method
    # whose family a RepBench module logs itself (module_logs: the task-prior probe) is not only a monitor's
    monitors: dict[str, Any] = {"spectrum": RepresentationSpectrumCallback, "downstream": DownstreamProbeCallback}
    for spec in METHODS.values():
        if not spec.module_logs:
            monitors.update(dict.fromkeys(spec.families, spec.callback))
    parts = str(name).split("/")
    group = parts[-2] if len(parts) > 1 else ""
    found = monitors.get(group) if metric_producer(name) is not None else None
    return resolve(found) if found is not None else None


def _configured(cfg: Mapping[str, Any]) -> list[tuple[str, type, Any]]:
    """(key, class, config node) of every callback the run builds: the entries of ``callbacks`` with a ``_target_``
    (as ``instantiate_list``) that name a class."""
    from hydra.utils import get_object

    callbacks = cfg.get("callbacks") or {}
    out = []
    for key, node in callbacks.items():
        if isinstance(node, Mapping) and node.get("_target_"):
            try:
                target = get_object(str(node["_target_"]))
            except Exception:  # instantiating it will say what is wrong
                continue
            if inspect.isclass(target):
                out.append((str(key), target, node))
    return out


def _prefix(cls: type, node: Any) -> str:
    """The log-name prefix a monitor will use: its config's ``prefix``, else the class's default."""
    given = node.get("prefix")
    if given is None:
        param = inspect.signature(cls).parameters.get("prefix")
        given = param.default if param is not None else ""
    return str(given).rstrip("/")


def check_objective(cfg: Mapping[str, Any]) -> None:
    """Raise a ValueError naming the fix when ``optimized_metric`` (or an OptunaPruning ``monitor``) is a monitor's
    value and no configured callback will log it: no callback of the monitor's class, or none with the prefix the name
    carries. Nothing is built or imported beyond the callbacks' classes."""
    names = objective_names(cfg)
    if not names:
        return
    configured = _configured(cfg)
    for name, reader in names.items():
        monitor = _monitor_of(name)
        if monitor is None:
            continue  # the module's (or an unknown callback's): checked when the run ends
        same_class = [(key, _prefix(cls, node)) for key, cls, node in configured if issubclass(cls, monitor)]
        if any(name.startswith(prefix + "/") for _, prefix in same_class):
            continue
        if same_class:
            found = ", ".join(f"callbacks.{key} logs under {prefix!r}" for key, prefix in same_class)
            why = f"the configured one does not log it ({found}: set its prefix)"
        else:
            off = [f"callbacks.{k}" for k, v in (cfg.get("callbacks") or {}).items() if v is None]
            why = "none is configured" + (f" (off: {', '.join(off)})" if off else "")
        raise ValueError(
            f"{reader}={name!r} has no producer: only {monitor.__name__} logs it, and {why}. Add one (a callbacks "
            f"entry with _target_: repbench.callbacks.{monitor.__name__}) or name a metric this run logs. Under "
            "debug=fast a sweep config names its objective's monitor under debug_monitors (configs/debug/fast.yaml)"
        )
