"""``python -m src.eval ckpt_path=...``: clean, PGD and (optionally) AutoAttack accuracy of a trained checkpoint.

Writes ``metrics.json`` in the run directory and logs ``test/acc``, ``test/adv/acc_<norm>_<eps>``,
``test/autoattack/acc_<norm>_<eps>``.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import hydra
import lightning as L
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from src.utils import format_eps
from src.utils.checkpoint import load_module
from src.utils.hydra_utils import instantiate_list, log_config, to_container

log = logging.getLogger("repbench")

__all__ = ["evaluate", "main"]


def _first_samples(loader: Any, n: int) -> tuple[torch.Tensor, torch.Tensor]:
    xs, ys, have = [], [], 0
    for batch in loader:
        xs.append(batch[0])
        ys.append(batch[1])
        have += len(batch[1])
        if have >= n:
            break
    return torch.cat(xs)[:n], torch.cat(ys)[:n]


def evaluate(cfg: DictConfig) -> dict[str, float]:
    """Load ``cfg.ckpt_path`` (weights_only), test it on ``cfg.data``; returns the metrics."""
    L.seed_everything(int(cfg.get("seed", 0)), workers=True)
    ev = cfg.eval
    overrides: dict[str, Any] = {"eval_attack": to_container(ev.attack)}
    if ev.get("epsilons") is not None:
        overrides["eval_epsilons"] = [float(e) for e in ev.epsilons]
    model = load_module(cfg.ckpt_path, **overrides)
    datamodule: L.LightningDataModule = instantiate(cfg.data, _convert_="all")
    loggers = instantiate_list(cfg.get("logger"))
    trainer: L.Trainer = instantiate(cfg.trainer, logger=loggers or False, callbacks=[], _convert_="all")
    results = trainer.test(model=model, datamodule=datamodule)
    metrics = {k: float(v) for k, v in (results[0] if results else {}).items()}
    if ev.get("autoattack"):
        from src.attacks.autoattack import autoattack_accuracy

        datamodule.setup("test")
        x, y = _first_samples(datamodule.test_dataloader(), int(ev.autoattack_samples))
        model.eval()
        norm = model.eval_attack_cfg["norm"]
        for eps in model.eval_epsilons:
            acc = autoattack_accuracy(
                model, x, y, eps=eps, norm=norm, version=ev.autoattack_version, seed=int(cfg.seed)
            )
            metrics[f"test/autoattack/acc_{norm}_{format_eps(eps)}"] = float(acc)
        for lg in loggers:
            lg.log_metrics({k: v for k, v in metrics.items() if "/autoattack/" in k})
    out = Path(cfg.paths.output_dir) / "metrics.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"ckpt_path": str(cfg.ckpt_path), "metrics": metrics}, indent=2))
    log.info("metrics written to %s: %s", out, metrics)
    return metrics


@hydra.main(version_base="1.3", config_path="../configs", config_name="eval.yaml")
def main(cfg: DictConfig) -> None:
    log_config(cfg)
    evaluate(cfg)


if __name__ == "__main__":
    main()
