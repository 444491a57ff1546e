"""Train mode ("Monitors you can trust", item 2): every RepBench LightningModule trains its trainable parts in train
mode and keeps its frozen parts in eval mode, at every training step: the first one (after the sanity-check
validation), those after a validation inside an epoch and at an epoch's end, and those after a resume from a
mid-epoch checkpoint into a freshly built module (whose backbone ``build_backbone`` returns in eval mode).

Lightning >= 2.2 keeps the modes modules have at fit start, so without ``RepBenchModule``'s hooks the backbone of
SupervisedPretraining would train with frozen BatchNorm statistics. The BatchNorm counters make the modes
observable in the forward itself: ``num_batches_tracked`` counts the forwards a layer ran in train mode.

Also: importing RepBench changes no process-wide state (warnings filters, torch flags, RNG), and only RepBench's own
CLI fit silences Lightning's "module(s) in eval mode" warning.
"""

from __future__ import annotations

import json
import subprocess
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import lightning as L
import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Dataset

from src.models import (
    PerturbationRobustFineTune,
    RobustLinearProbe,
    SimCLRPretraining,
    SupervisedPretraining,
    TaskPriorProbe,
)
from tests._lightning import quiet_trainer

TINY = {"name": "timm:test_efficientnet", "pretrained": False}
EVAL_MODE_WARNING = "module(s) in eval mode at the start of training"
BATCH, N_TRAIN, N_VAL = 4, 16, 4
STEPS_PER_EPOCH, EPOCHS, RESUME_AT = N_TRAIN // BATCH, 2, 2  # the checkpoint is mid-epoch: 2 of 4 batches done
STEPS = STEPS_PER_EPOCH * EPOCHS


class _Images(Dataset):
    """(x, y, index): smooth images in [0, 1] (perturbations act on them as on photos), two classes."""

    def __init__(self, n: int, seed: int) -> None:
        g = torch.Generator().manual_seed(seed)
        low = torch.rand(n, 3, 4, 4, generator=g)
        self.x = nn.functional.interpolate(low, size=(16, 16), mode="bilinear", align_corners=False).clamp(0, 1)
        self.y = torch.arange(n) % 2

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, i: int):
        return self.x[i], self.y[i], i


class _Data(L.LightningDataModule):
    """Fixed train/val splits (what TaskPriorProbe needs), no shuffling, 4 training batches per epoch."""

    num_classes = 2

    def __init__(self) -> None:
        super().__init__()
        self.train_dataset, self.val_dataset = _Images(N_TRAIN, 0), _Images(N_VAL, 1)

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.train_dataset, batch_size=BATCH)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(self.val_dataset, batch_size=BATCH)


def _bn(module: nn.Module) -> list[nn.modules.batchnorm._BatchNorm]:
    return [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]


def _outside_bn(module: nn.Module) -> list[nn.Module]:
    """Submodules that are neither a BatchNorm layer nor inside one (timm's BatchNormAct2d holds its activation)."""
    bn = [name for name, m in module.named_modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    return [m for name, m in module.named_modules() if not any(name == b or name.startswith(f"{b}.") for b in bn)]


Parts = Callable[[L.LightningModule], dict[str, list[nn.Module]]]


def _whole(*names: str) -> Parts:
    """Parts: each named submodule with all its own submodules."""
    return lambda m: {name: list(getattr(m, name).modules()) for name in names}


class _Modes(L.Callback):
    """The set of ``training`` flags of each watched part (a list of modules, each counted alone: a part that
    means a whole network lists all its submodules), at every training and validation batch."""

    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        self.train: list[tuple[int, int, dict[str, set[bool]]]] = []  # (global_step, batch_idx, modes)
        self.val: list[dict[str, set[bool]]] = []

    def _modes(self, pl_module: L.LightningModule) -> dict[str, set[bool]]:
        return {k: {m.training for m in v} for k, v in self.parts(pl_module).items()}

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self.train.append((trainer.global_step, batch_idx, self._modes(pl_module)))

    def on_validation_batch_start(self, trainer, pl_module, batch, batch_idx, dataloader_idx=0) -> None:
        self.val.append(self._modes(pl_module))


class _SaveAt(L.Callback):
    """A checkpoint after optimizer step ``step`` (mid-epoch): resuming from it skips ``on_train_epoch_start``."""

    def __init__(self, path: Path, step: int) -> None:
        self.path, self.step = path, step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            trainer.save_checkpoint(self.path)


def _trainer(*callbacks: L.Callback) -> L.Trainer:
    # a validation after every 2 training batches (mid-epoch and at the epoch's end) and a sanity check first
    return quiet_trainer(
        max_epochs=EPOCHS,
        val_check_interval=2,
        num_sanity_val_steps=1,
        inference_mode=False,  # RobustLinearProbe's validation PGD needs gradients
        callbacks=list(callbacks),
    )


def _fit_and_resume(make: Callable[[], L.LightningModule], parts: Parts, tmp_path: Path, *extra: L.Callback):
    """A fit of 2 epochs, then a fresh module resumed from its mid-epoch checkpoint to the same end (``extra``
    callbacks in both). Returns (model, modes, eval-mode warnings) of both runs."""
    runs = []
    ckpt = tmp_path / "mid.ckpt"
    for resume in (False, True):
        torch.manual_seed(0)
        model, modes = make(), _Modes(parts)
        callbacks = [*extra, modes] if resume else [*extra, modes, _SaveAt(ckpt, RESUME_AT)]
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            _trainer(*callbacks).fit(model, datamodule=_Data(), ckpt_path=ckpt if resume else None)
        assert model.global_step == STEPS
        seen = [str(w.message) for w in caught if EVAL_MODE_WARNING in str(w.message)]
        runs.append((model, modes, seen))
    first, resumed = runs
    assert [s for s, _, _ in first[1].train] == list(range(STEPS))
    assert [s for s, _, _ in resumed[1].train] == list(range(RESUME_AT, STEPS))
    # 1 sanity batch + 2 validations per epoch in the first run (1 batch each); the resumed run skips the sanity check
    # (and Lightning 2.6 does not redo the validation due right after the checkpoint's step), but validates later on
    assert len(first[1].val) == 1 + 2 * EPOCHS and len(resumed[1].val) >= EPOCHS
    return first, resumed


def _state(module: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in module.state_dict().items()}


def _assert_modes(modes: _Modes, expected: dict[str, bool]) -> None:
    for step, batch_idx, seen in modes.train:
        for part, mode in expected.items():
            assert seen[part] == {mode}, f"step {step} (batch {batch_idx}): {part} modes {seen[part]}, want {mode}"
    for seen in modes.val:  # Lightning's validation: everything in eval mode, restored afterwards
        assert all(v == {False} for v in seen.values()), seen


# ---------------------------------------------------------------------------------------------------- the modules
def test_supervised_pretraining_trains_backbone_and_head_in_train_mode(tmp_path) -> None:
    def make():
        return SupervisedPretraining(TINY, num_classes=2, scheduler=None)

    torch.manual_seed(0)  # the seed _fit_and_resume builds its modules with: the same initial weights
    initial = _state(make().backbone)
    (model, modes, warned), (resumed, resumed_modes, _) = _fit_and_resume(make, _whole("backbone", "head"), tmp_path)
    for run in (modes, resumed_modes):
        _assert_modes(run, {"backbone": True, "head": True})
    assert warned == []  # nothing is in eval mode at the start of training: Lightning has nothing to warn about
    for m in (model, resumed):  # one training forward per step, every one in train mode (validation's don't count)
        assert all(int(bn.num_batches_tracked) == STEPS for bn in _bn(m.backbone))
    assert _bn(model.backbone) and all(
        not torch.equal(bn.running_mean, initial[f"{name}.running_mean"])
        for name, bn in model.backbone.named_modules()
        if isinstance(bn, nn.modules.batchnorm._BatchNorm)
    ), "BatchNorm running statistics never updated"


def test_simclr_pretraining_trains_backbone_and_projection_in_train_mode(tmp_path) -> None:
    def make():
        return SimCLRPretraining(TINY, scheduler=None, perturbations=["brightness"])

    torch.manual_seed(0)
    initial = _state(make().backbone)
    (model, modes, warned), (_, resumed_modes, _) = _fit_and_resume(make, _whole("backbone"), tmp_path)
    for run in (modes, resumed_modes):
        _assert_modes(run, {"backbone": True})
    assert warned == []
    assert _bn(model.backbone) and all(
        not torch.equal(bn.running_mean, initial[f"{name}.running_mean"])
        for name, bn in model.backbone.named_modules()
        if isinstance(bn, nn.modules.batchnorm._BatchNorm)
    ), "BatchNorm running statistics never updated"


@pytest.mark.parametrize("freeze_bn_stats", [False, True])
def test_fine_tune_student_trains_teacher_stays_eval(tmp_path, freeze_bn_stats) -> None:
    def make():
        return PerturbationRobustFineTune(
            TINY, perturbations=["gaussian_noise"], freeze_bn_stats=freeze_bn_stats, lr=1e-3, scheduler=None
        )

    torch.manual_seed(0)
    initial = make()
    student0, teacher0 = _state(initial.backbone), _state(initial.teacher)
    parts = {
        "student_bn": lambda m: _bn(m.backbone),
        "student_rest": lambda m: _outside_bn(m.backbone),
        "teacher": lambda m: list(m.teacher.modules()),
    }
    (model, modes, warned), (resumed, resumed_modes, _) = _fit_and_resume(
        make, lambda m: {k: f(m) for k, f in parts.items()}, tmp_path
    )
    for run in (modes, resumed_modes):
        _assert_modes(run, {"student_bn": not freeze_bn_stats, "student_rest": True, "teacher": False})
    assert len(warned) == 1  # the teacher (and frozen BatchNorm layers) in eval mode: Lightning says so, truthfully
    for m in (model, resumed):
        teacher = m.teacher.state_dict()
        assert all(torch.equal(teacher0[k], v) for k, v in teacher.items()), "the teacher changed"
        student = m.backbone.state_dict()
        assert any(not torch.equal(student0[k], v) for k, v in student.items() if k.endswith("weight")), "no training"
        stats = {k: v for k, v in student.items() if k.rsplit(".", 1)[-1] in ("running_mean", "running_var")}
        if freeze_bn_stats:
            assert all(torch.equal(student0[k], v) for k, v in stats.items()), "frozen BatchNorm statistics moved"
            assert all(int(bn.num_batches_tracked) == 0 for bn in _bn(m.backbone))
        else:  # one student forward per training step (clean and perturbed images in one batch)
            assert all(int(bn.num_batches_tracked) == STEPS for bn in _bn(m.backbone))
            assert all(not torch.equal(student0[k], v) for k, v in stats.items() if k.endswith("running_mean"))


@pytest.mark.parametrize(
    "make",
    [
        # epsilon > 0: every training step runs PGD and the features through the backbone (BatchNorm would drift)
        lambda: RobustLinearProbe(
            TINY,
            num_classes=2,
            epsilon=0.1,
            attack={"steps": 1},
            eval_epsilons=[0.1],
            eval_attack={"steps": 1},
            scheduler=None,
        ),
        lambda: TaskPriorProbe(backbone=TINY, prior_backbone=TINY, num_tasks=3, seed=0),
    ],
    ids=["RobustLinearProbe", "TaskPriorProbe"],
)
def test_probe_backbone_stays_eval_and_unchanged(tmp_path, make) -> None:
    torch.manual_seed(0)
    initial = _state(make().backbone)
    (model, modes, warned), (resumed, resumed_modes, _) = _fit_and_resume(make, _whole("backbone", "head"), tmp_path)
    for run in (modes, resumed_modes):
        _assert_modes(run, {"backbone": False, "head": True})
    assert len(warned) == 1  # the frozen backbone in eval mode: Lightning says so, truthfully
    for m in (model, resumed):  # weights and buffers (BatchNorm statistics, counters) exactly as built
        state = m.backbone.state_dict()
        assert state.keys() == initial.keys() and all(torch.equal(initial[k], v) for k, v in state.items())


def test_train_mode_hooks_hold_when_a_callback_flips_modes(tmp_path) -> None:
    """A callback that leaves the module in eval mode at train start or at an epoch's end does not freeze the
    backbone: on_train_epoch_start undoes the latter; on_train_start the former, also after a mid-epoch resume
    (where Lightning skips on_train_epoch_start)."""

    class _Flip(L.Callback):
        def on_train_start(self, trainer, pl_module) -> None:
            pl_module.eval()

        def on_train_epoch_end(self, trainer, pl_module) -> None:
            pl_module.eval()

    def make():
        return SupervisedPretraining(TINY, num_classes=2, scheduler=None)

    (_, modes, _), (_, resumed_modes, _) = _fit_and_resume(make, _whole("backbone", "head"), tmp_path, _Flip())
    for run in (modes, resumed_modes):
        _assert_modes(run, {"backbone": True, "head": True})


# ------------------------------------------------------------------------------------------- the CLI and imports
def test_cli_fit_silences_the_eval_mode_warning_for_that_call_only() -> None:
    from src.train import _run_stage

    model = RobustLinearProbe(TINY, num_classes=2, epsilon=0.0, eval_epsilons=[], scheduler=None)
    before = list(warnings.filters)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _run_stage(quiet_trainer(max_steps=1, num_sanity_val_steps=0), "fit", model=model, datamodule=_Data())
    assert not [w for w in caught if EVAL_MODE_WARNING in str(w.message)]
    assert warnings.filters == before


_IMPORT_PROBE = r"""
import json, os, sys, warnings
import torch, lightning, lightning.pytorch.trainer.connectors.callback_connector, torchmetrics  # third-party first: only RepBench's own effects are compared

def state():
    b = torch.backends
    return {
        "warnings.filters": [repr(f) for f in warnings.filters],
        "num_threads": torch.get_num_threads(),
        "num_interop_threads": torch.get_num_interop_threads(),
        "cudnn.benchmark": b.cudnn.benchmark,
        "cudnn.deterministic": b.cudnn.deterministic,
        "cudnn.allow_tf32": b.cudnn.allow_tf32,
        "cuda.matmul.allow_tf32": b.cuda.matmul.allow_tf32,
        "deterministic_algorithms": torch.are_deterministic_algorithms_enabled(),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "grad_enabled": torch.is_grad_enabled(),
        "default_dtype": str(torch.get_default_dtype()),
        "rng": torch.random.get_rng_state().sum().item(),
        "environ": sorted(os.environ.items()),
        # Lightning's module-level functions (a patched check would change every Trainer of the process)
        "lightning.callback_connector": sorted(
            f"{k}={id(v)}" for k, v in vars(lightning.pytorch.trainer.connectors.callback_connector).items()
            if callable(v)
        ),
    }

before = state()
import repbench, repbench.models, repbench.callbacks
after = state()
print(json.dumps({k: [before[k], after[k]] for k in before if before[k] != after[k]}))
"""


def test_importing_repbench_changes_no_global_state(tmp_path) -> None:
    """``import repbench`` (and its models and callbacks) in a fresh process leaves warnings filters, torch's global
    flags, the global RNG and the environment as they were."""
    out = subprocess.run(
        [sys.executable, "-c", _IMPORT_PROBE], capture_output=True, text=True, cwd=tmp_path, timeout=300, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {}
