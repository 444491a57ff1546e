"""``python -m src.eval ckpt_path=...``: clean, PGD and (optionally) AutoAttack accuracy of a trained checkpoint.

The model (class, backbone, head, training and evaluation attack) comes from the checkpoint, rebuilt only if its
class is a registered RepBench module (``src.utils.checkpoint``); ``eval.attack`` fields that are not null override
the checkpoint's evaluation attack. Logs ``test/acc``,
``test/adv/acc_pgd<steps>_<norm>_<eps>`` (PGD-10 by default: ``test/adv/acc_pgd10_l2_0p05``, a different name from
validation's PGD-5 ``val/adv/acc_pgd5_l2_0p05``) and, with ``eval.autoattack=true``, torchattacks' port of AutoAttack
as ``test/adv/acc_autoattack_torchattacks_<version>_<norm>_<eps>`` (names: :mod:`src.attacks.naming`). It ends as
``src.train`` does: ``metrics.json`` and ``summary.md`` in the run folder and the same summary table on the console
(:mod:`src.utils.run_summary`).
"""

from __future__ import annotations

if __name__ == "__main__" and not __package__:  # `python src/eval.py`, lightning-hydra-template's habit (rootutils)
    import sys
    from pathlib import Path

    _here = Path(__file__).resolve().parent  # src/: on sys.path as the script's folder, where it shadows names
    sys.path[:] = [str(_here.parent)] + [p for p in sys.path if Path(p or ".").resolve() != _here]
    __package__ = "src"  # the relative imports below then import this repository's package `src` (PEP 366)

import logging
import time
import warnings
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import hydra
import lightning as L
from hydra.utils import instantiate
from omegaconf import DictConfig

from .models.autoattack import autoattack_metrics
from .utils.allocator import keep_freed_memory
from .utils.checkpoint import load_module, module_class, read_checkpoint
from .utils.console import announce_run, ignore_worker_advice, quiet_cli, task_overrides
from .utils.hydra_utils import instantiate_list, to_container
from .utils.resources import config_dir
from .utils.run_summary import show_summary, write_summary

log = logging.getLogger("repbench")

__all__ = ["evaluate", "main", "zero_shot_overrides"]


def attack_overrides(hparams: Mapping[str, Any], ev: Mapping[str, Any]) -> dict[str, Any]:
    """Constructor overrides for evaluation: the checkpoint's ``eval_attack`` updated by the non-null fields of
    ``eval.attack`` (so an l-inf-trained probe is attacked with l-inf unless ``eval.attack.norm`` says otherwise),
    and ``eval.epsilons`` when given."""
    if "eval_attack" not in hparams:  # not an attackable probe (e.g. SupervisedPretraining): clean accuracy only
        return {}
    fields = {k: v for k, v in dict(ev.get("attack") or {}).items() if v is not None}
    out: dict[str, Any] = {"eval_attack": {**dict(hparams.get("eval_attack") or {}), **fields}}
    if ev.get("epsilons") is not None:
        out["eval_epsilons"] = [float(e) for e in ev["epsilons"]]
    return out


#: ``eval.zero_shot_class_names``: the evaluated data module's own class names (its folders' names)
DATA_NAMES = "data"


def zero_shot_overrides(hparams: Mapping[str, Any], ev: Mapping[str, Any]) -> dict[str, Any]:
    """Constructor overrides of the zero-shot prompts' class names (a model with a CLIP zero-shot head,
    :class:`~src.models.PerturbationRobustFineTune`, evaluated on another data set than it was trained on — the
    DivergenceRadius paper's Fig. 7 Food101 half): ``eval.zero_shot_class_names`` null keeps the checkpoint's, ``data``
    takes the evaluated data module's (its folder names), ``imagenet`` or a list names them. A model without that
    hyperparameter is refused, naming why."""
    value = ev.get("zero_shot_class_names")
    if value is None:
        return {}
    if "zero_shot_class_names" not in hparams:
        raise ValueError(
            "eval.zero_shot_class_names renames the prompts of a model with a zero-shot head (a robust_finetune "
            "checkpoint); this checkpoint's model has none: leave eval.zero_shot_class_names=null"
        )
    if value == DATA_NAMES:
        return {"zero_shot_class_names": None}  # the model reads the data module's class_names
    from .models.robust_finetune import zero_shot_class_names

    return {"zero_shot_class_names": zero_shot_class_names(value, None, key="eval.zero_shot_class_names")}


def evaluate(cfg: DictConfig) -> dict[str, float]:
    """Load ``cfg.ckpt_path`` (weights_only), test it on ``cfg.data``; returns the metrics, also written to the run
    folder as ``metrics.json`` and ``summary.md`` (:func:`~src.utils.run_summary.write_summary`, as ``src.train``)."""
    started = time.time()
    L.seed_everything(int(cfg.get("seed", 0)), workers=True, verbose=False)  # the seed is in the run's first lines
    ckpt = read_checkpoint(cfg.ckpt_path)
    module_class(ckpt, cfg.ckpt_path)  # refuses a checkpoint of an unregistered class before anything else
    ev = to_container(cfg.eval)
    hparams = ckpt.get("hyper_parameters") or {}
    overrides = {**attack_overrides(hparams, ev), **zero_shot_overrides(hparams, ev)}
    del ckpt
    model = load_module(cfg.ckpt_path, **overrides)
    datamodule: L.LightningDataModule = instantiate(cfg.data, _convert_="all")
    loggers = instantiate_list(cfg.get("logger"))
    trainer: L.Trainer = instantiate(cfg.trainer, logger=loggers or False, callbacks=[], _convert_="all")
    attack = dict(getattr(model, "eval_attack_cfg", {}) or {})
    log.info(
        "test: %s on %s%s", type(model).__name__, type(datamodule).__name__,
        f", PGD-{attack.get('steps')} {attack.get('norm')} at eps {list(model.eval_epsilons)}" if attack else "",
    )  # fmt: skip
    with warnings.catch_warnings():
        ignore_worker_advice(datamodule)  # data.num_workers=0 on purpose (in-memory data sets)
        results = trainer.test(model=model, datamodule=datamodule, verbose=False)  # the summary comes at the end
    metrics = {k: float(v) for k, v in (results[0] if results else {}).items()}
    if ev.get("autoattack") and attack:
        autoattack = autoattack_metrics(
            model,
            datamodule,
            version=ev["autoattack_version"],
            samples=int(ev["autoattack_samples"]),
            seed=int(cfg.seed),
        )
        metrics.update(autoattack)
        for lg in loggers:
            lg.log_metrics(autoattack)
    out = Path(cfg.paths.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    info = {
        "run_dir": str(out),
        "ckpt_path": str(cfg.ckpt_path),
        "module": type(model).__name__,
        "attack": attack,
        "overrides": task_overrides() or None,
        "seed": cfg.get("seed", 0),
        "seconds": round(time.time() - started, 1),
    }
    write_summary(out, metrics, info)  # metrics.json keeps ckpt_path, module, attack and metrics as before
    return metrics


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="eval.yaml")
@quiet_cli()  # no third-party advertisements or known-harmless warnings, for this call only (src/utils/console.py)
def main(cfg: DictConfig) -> None:
    announce_run(cfg)  # the first lines, before anything slow
    keep_freed_memory()  # reuse freed activation memory (docs/speed.md)
    metrics = evaluate(cfg)
    show_summary(metrics, f"RepBench {cfg.get('task_name', 'eval')}", cfg.paths.output_dir)  # as src.train ends


if __name__ == "__main__":
    main()
