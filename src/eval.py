"""``python -m src.eval ckpt_path=...``: clean, PGD and (optionally) AutoAttack accuracy of a trained checkpoint.

The model (class, backbone, head, training and evaluation attack) comes from the checkpoint, rebuilt only if its
class is a registered RepBench module (``src.utils.checkpoint``); ``eval.attack`` fields that are not null override
the checkpoint's evaluation attack. Writes ``metrics.json`` in the run directory and logs ``test/acc``,
``test/adv/acc_pgd<steps>_<norm>_<eps>`` (PGD-10 by default: ``test/adv/acc_pgd10_l2_0p05``, a different name from
validation's PGD-5 ``val/adv/acc_pgd5_l2_0p05``) and, with ``eval.autoattack=true``, torchattacks' port of AutoAttack
as ``test/adv/acc_autoattack_torchattacks_<version>_<norm>_<eps>`` (names: :mod:`src.attacks.naming`).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from .attacks.naming import adv_metric_name, autoattack_label
from .models.base import unpack_batch
from .utils.allocator import keep_freed_memory
from .utils.checkpoint import load_module, module_class, read_checkpoint
from .utils.hydra_utils import instantiate_list, log_config, to_container
from .utils.resources import config_dir

log = logging.getLogger("repbench")

__all__ = ["evaluate", "main"]


def _first_samples(loader: Any, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys, have = [], [], 0
    for batch in loader:
        x, y, _ = unpack_batch(batch)
        xs.append(x)
        ys.append(y)
        have += len(y)
        if have >= n:
            break
    return torch.cat(xs)[:n], torch.cat(ys)[:n]


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


def evaluate(cfg: DictConfig) -> dict[str, float]:
    """Load ``cfg.ckpt_path`` (weights_only), test it on ``cfg.data``; returns the metrics."""
    L.seed_everything(int(cfg.get("seed", 0)), workers=True)
    ckpt = read_checkpoint(cfg.ckpt_path)
    module_class(ckpt, cfg.ckpt_path)  # refuses a checkpoint of an unregistered class before anything else
    ev = to_container(cfg.eval)
    overrides = attack_overrides(ckpt.get("hyper_parameters") or {}, ev)
    del ckpt
    model = load_module(cfg.ckpt_path, **overrides)
    datamodule: L.LightningDataModule = instantiate(cfg.data, _convert_="all")
    loggers = instantiate_list(cfg.get("logger"))
    trainer: L.Trainer = instantiate(cfg.trainer, logger=loggers or False, callbacks=[], _convert_="all")
    results = trainer.test(model=model, datamodule=datamodule)
    metrics = {k: float(v) for k, v in (results[0] if results else {}).items()}
    attack = dict(getattr(model, "eval_attack_cfg", {}) or {})
    if ev.get("autoattack") and attack:
        from .attacks.autoattack import autoattack_accuracy

        datamodule.setup("test")
        x, y = _first_samples(datamodule.test_dataloader(), int(ev["autoattack_samples"]))
        model.eval()
        norm, version = attack["norm"], ev["autoattack_version"]
        log.info("AutoAttack (torchattacks' port, version %r, %s) on the first %d test samples", version, norm, len(y))
        autoattack = {
            adv_metric_name("test", autoattack_label(version), norm, eps): float(
                autoattack_accuracy(model, x, y, eps=eps, norm=norm, version=version, seed=int(cfg.seed))
            )
            for eps in model.eval_epsilons
        }
        metrics.update(autoattack)
        for lg in loggers:
            lg.log_metrics(autoattack)
    out = Path(cfg.paths.output_dir) / "metrics.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    record = {"ckpt_path": str(cfg.ckpt_path), "module": type(model).__name__, "attack": attack, "metrics": metrics}
    out.write_text(json.dumps(record, indent=2))
    log.info("metrics written to %s: %s", out, metrics)
    return metrics


@hydra.main(version_base="1.3", config_path=str(config_dir()), config_name="eval.yaml")
def main(cfg: DictConfig) -> None:
    keep_freed_memory()  # reuse freed activation memory (docs/speed.md)
    log_config(cfg)
    evaluate(cfg)


if __name__ == "__main__":
    main()
