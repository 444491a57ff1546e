"""RepBench's monitors inside a researcher's own Lightning project, from the installed wheel (issue "Monitors you can
trust"): a project with its own ``src`` package, a DataModule that normalises its images as torchvision pipelines do,
a plain ``nn.Sequential`` backbone and its own training step. Every monitor is constructed as README shows, with
``normalize=(mean, std)``; every value it logs must equal the functional API's value on the same probe images with
an explicit ``lambda x: backbone(normalize(x))``; its values sit on Lightning's step axis (the x of the module's own
``val/acc``); importing RepBench leaves ``warnings.filters`` alone; and a trained ``SupervisedPretraining`` updates its
BatchNorm running statistics (train mode)."""

from __future__ import annotations

import json
import subprocess
import textwrap

import pytest

_DATA = '''
"""The user's data: scikit-learn's digits at 64 px, normalised as a torchvision pipeline does."""
import lightning as L
import torch
import torch.nn.functional as F
from sklearn.datasets import load_digits
from torch.utils.data import DataLoader, TensorDataset

MEAN, STD = 0.3, 0.4


def pixels(size=64):
    d = load_digits()
    x = torch.tensor(d.images, dtype=torch.float32)[:, None] / 16.0
    x = F.interpolate(x, size=(size, size), mode="bilinear", align_corners=False).clamp(0, 1)
    return x.expand(-1, 3, -1, -1).contiguous(), torch.tensor(d.target)


class Digits(L.LightningDataModule):
    def __init__(self, normalise=True):
        super().__init__()
        self.normalise = normalise

    def setup(self, stage=None):
        x, y = pixels()
        if self.normalise:
            x = (x - MEAN) / STD
        idx = torch.randperm(len(x), generator=torch.Generator().manual_seed(0))
        self.train_dataset = TensorDataset(x[idx[:1437]], y[idx[:1437]])
        self.val_dataset = TensorDataset(x[idx[1437:]], y[idx[1437:]])

    def train_dataloader(self):
        return DataLoader(self.train_dataset, batch_size=64, shuffle=True)

    def val_dataloader(self):
        return DataLoader(self.val_dataset, batch_size=128)
'''

_MODEL = '''
"""The user's model: a plain nn.Sequential backbone (no embed, no mean/std) and its own training step."""
import lightning as L
import torch
from torch import nn


class Classifier(L.LightningModule):
    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.backbone = nn.Sequential(
            nn.Conv2d(3, 16, 3, 2, 1), nn.BatchNorm2d(16), nn.ReLU(),
            nn.Conv2d(16, 32, 3, 2, 1), nn.BatchNorm2d(32), nn.ReLU(),
            nn.Conv2d(32, 128, 3, 2, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )
        self.head = nn.Linear(128, 10)

    def training_step(self, batch, i):
        x, y = batch
        loss = nn.functional.cross_entropy(self.head(self.backbone(x)), y)
        self.log("train/loss", loss)
        return loss

    def validation_step(self, batch, i):
        x, y = batch
        self.log("val/acc", (self.head(self.backbone(x)).argmax(1) == y).float().mean())

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-3)
'''

_RUN = """
import csv, json, sys, warnings
import lightning, torch, torchmetrics  # these install warning filters of their own
before = list(warnings.filters)
import repbench, repbench.callbacks, repbench.models  # RepBench must not
filters_unchanged = list(warnings.filters) == before

import src                                   # the user's own package
from lightning.pytorch.loggers import CSVLogger
from repbench.callbacks import (CollapseAlarm, DivergenceRadiusCallback, RepresentationSpectrumCallback,
                                SynBenchCallback, TaskPriorCallback, mean_cross_cosine)
from src.data import MEAN, STD, Digits
from src.model import Classifier

assert src.__file__.startswith(sys.argv[1]) and "site-packages" in repbench.__file__
NORM = (MEAN, STD)  # README: the normalisation the pipeline applies
sb = SynBenchCallback(every_n_epochs=1, normalize=NORM)
dr = DivergenceRadiusCallback(every_n_epochs=1, normalize=NORM)
tp = TaskPriorCallback(every_n_epochs=1, normalize=NORM)
sp = RepresentationSpectrumCallback(every_n_epochs=1, normalize=NORM)
alarm = CollapseAlarm(normalize=NORM)
trainer = lightning.Trainer(
    max_epochs=2, limit_train_batches=3, callbacks=[sb, dr, tp, sp, alarm], logger=CSVLogger("logs", name="", version=""),
    enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False, log_every_n_steps=1,
    num_sanity_val_steps=0,
)
model = Classifier()
trainer.fit(model, datamodule=Digits())

logged, steps = {}, {}
with open("logs/metrics.csv") as f:
    for row in csv.DictReader(f):
        for k, v in row.items():
            if v and k not in ("epoch", "step"):
                logged[k] = float(v)
                steps.setdefault(k, []).append(int(row["step"]))

# the references: the functional API on the same probe images, the backbone fed explicitly normalised images
from repbench.backbones import create_backbone
from repbench.baselines import alpha_req, rankme
from repbench.callbacks.synbench_callback import callback_budget
from repbench.divergence_radius import DivergenceRadiusConfig, robustness_sweep
from repbench.synbench import SynBenchConfig, synbench
from repbench.task_prior import task_prior_moments

backbone = model.backbone.eval()
normalize = lambda x: (x - MEAN) / STD
fn = lambda x: backbone(normalize(x))
ref = {}
with torch.no_grad():
    res = synbench(fn, input_shape=(3, 32, 32), config=SynBenchConfig(**callback_budget()))
    for e in res.config.eps:
        ref[f"val/synbench/score_eps_{e:g}".replace(".", "p")] = res.score(e)
    ref["val/synbench/score"] = res.score(res.config.eps[0])
    out = robustness_sweep(dr.images, fn, DivergenceRadiusConfig())
    for fam, values in (("divergence_radius", out.r_dr), ("cosine_robustness", out.r_cs)):
        means = values.mean(0)
        ref.update({f"val/{fam}/{n}": float(v) for n, v in zip(out.names, means)})
        ref[f"val/{fam}/mean"] = float(means.mean())
    prior = create_backbone("embedded:efficientnet_lite2").eval().embed(tp.images).double()
    mean, var = task_prior_moments(fn(tp.images).double(), prior, temperature=0.01)
    ref.update({"val/task_prior/mean": float(mean), "val/task_prior/var": float(var),
                "val/task_prior/z": float(mean / var ** 0.5)})
    z = fn(sp.images)
    ref["val/spectrum/rankme"], ref["val/spectrum/alpha_req"] = rankme(z), alpha_req(z)
    ref["val/collapse/cosine"] = mean_cross_cosine(fn(alarm.images))
    ref["val/collapse/alarm"] = 0.0

# the probe images are the user's pixels (validation images mapped back from the normalisation)
pixels = Digits(normalise=False)
pixels.setup()
val_pixels = torch.stack([pixels.val_dataset[i][0] for i in range(len(pixels.val_dataset))])
image_error = max(float((cb.images - val_pixels[: len(cb.images)]).abs().max()) for cb in (dr, tp, sp))
print(json.dumps({"filters_unchanged": filters_unchanged, "logged": logged, "steps": steps, "ref": ref,
                  "best_eps": [logged["val/synbench/best_eps"], res.best_eps()], "image_error": image_error}))
"""

_TRAIN_MODE = """
import json, torch
from repbench.models import SupervisedPretraining
from src.data import Digits
import lightning

model = SupervisedPretraining(backbone={"name": "timm:resnet10t", "pretrained": False}, num_classes=10)
bn = [m for m in model.backbone.modules() if isinstance(m, torch.nn.BatchNorm2d)]
before = [m.running_mean.clone() for m in bn]
dm = Digits(normalise=False)
trainer = lightning.Trainer(max_epochs=1, limit_train_batches=2, limit_val_batches=1, logger=False,
                            enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False)
trainer.fit(model, datamodule=dm)
print(json.dumps({"changed": sum(not torch.equal(a, m.running_mean) for a, m in zip(before, bn)), "bn": len(bn),
                  "batches": [int(m.num_batches_tracked) for m in bn]}))
"""


def _project(tmp_path):
    project = tmp_path / "my_project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "__init__.py").write_text("")
    (project / "src" / "data.py").write_text(textwrap.dedent(_DATA))
    (project / "src" / "model.py").write_text(textwrap.dedent(_MODEL))
    return project


def _run(py, env, project, script: str) -> dict:
    (project / "script.py").write_text(textwrap.dedent(script))
    done = subprocess.run(
        [py, "script.py", str(project)], cwd=project, env=env, capture_output=True, text=True, timeout=900
    )
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.slow
def test_monitors_in_a_foreign_project_log_what_the_functional_api_computes(installed_repbench, tmp_path):
    py, _, env = installed_repbench
    out = _run(py, env, _project(tmp_path), _RUN)
    logged, ref, steps = out["logged"], out["ref"], out["steps"]
    assert out["filters_unchanged"]
    # ((p - 0.3) / 0.4) * 0.4 + 0.3 in float32: two roundings of size <= 2^-24 * |value| <= 2^-24 * 2.5 each, and
    # clip of the rounding below 0 / above 1: |error| <= 2 * 2.5 * 6e-8 = 3e-7 < 1e-6
    assert out["image_error"] <= 1e-6
    assert set(ref) <= set(logged), sorted(set(ref) - set(logged))
    # Tolerances. Logged values pass Lightning's float32 (relative 2^-24 = 6e-8). The monitors' feature engine runs
    # the conv net channels_last, the reference lambda NCHW: float32 features equal up to summation order, a sum of
    # at most 288 products (32 channels x 3 x 3) per conv output, relative error <= 288 * 2^-24 = 1.7e-5 of the summed
    # magnitudes (post-BatchNorm ReLU nets keep that within ~10x of the feature norm: <= 2e-4 relative).
    for name, value in ref.items():
        got = logged[name]
        if "divergence_radius" in name or "cosine_robustness" in name or name == "val/collapse/cosine":
            # radii and cosines of unit vectors move at most twice the relative feature change: 4e-4
            assert abs(got - value) <= 4e-4, (name, got, value)
        elif "synbench" in name:
            # accuracies of a linear rule on 6 x 512 test samples: a 2e-4 feature change flips a sample only within
            # 2e-4 of the decision margin (expected < 0.1 samples in all); the score moves 1/512 per flip and per
            # a_t step: 0.02 allows 10 flips
            assert abs(got - value) <= 0.02, (name, got, value)
        elif name == "val/collapse/alarm":
            assert got == value
        else:  # Task-Prior moments, RankMe, alpha-ReQ: smooth in the features, relative 2e-4 -> 1e-3 with margin
            assert got == pytest.approx(value, rel=1e-3), (name, got, value)
    # the logged best epsilon is a best one for the reference too (within the score tolerance)
    best_logged = f"val/synbench/score_eps_{out['best_eps'][0]:g}".replace(".", "p")
    assert ref[best_logged] >= max(v for k, v in ref.items() if "score_eps_" in k) - 0.02
    # Lightning's step axis: every monitor value of an epoch at the x of the module's own val/acc of that epoch
    assert len(steps["val/acc"]) == 2
    for name in ref:
        assert steps[name] == steps["val/acc"], (name, steps[name], steps["val/acc"])


@pytest.mark.slow
def test_supervised_pretraining_from_the_wheel_updates_batchnorm(installed_repbench, tmp_path):
    py, _, env = installed_repbench
    out = _run(py, env, _project(tmp_path), _TRAIN_MODE)
    assert out["bn"] > 0 and out["changed"] == out["bn"]  # every BatchNorm's running mean moved (train mode)
    assert set(out["batches"]) == {2}  # each counted exactly the 2 training batches (not validation's)
