"""The authors' probe (convention "authors"): one BCE logit per binary task on the raw features, Adam, shuffled batches
of 256, lr cosine-annealed to 1e-6 per epoch, trained and scored (recall of class 1) on every image — as
``linear_probe_multi`` of the authors' ``examples/mieb/3_run_linear_probes.py`` (Task Priors, Patel & Balestriero,
arXiv:2507.09871). Checked against an independent transcription of their training loop (nn.Linear, BCEWithLogitsLoss,
DataLoader, CosineAnnealingLR), plus invariances; the other conventions keep RepBench's probe."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, Sampler, TensorDataset

from src.task_prior import CONVENTIONS, TaskPriorConfig
from src.task_prior.probing import (
    BatchedLinearHead,
    BatchedLogitHead,
    cosine_lr,
    evaluate_task_probes,
    fit_task_probes,
    make_probe_head,
    task_accuracies,
    task_positive_recalls,
)

F64 = torch.float64


class _EpochOrders(Sampler):
    """Yields the given permutations, one per pass: the rows ``DataLoader(shuffle=True)`` would visit, made
    reproducible (the authors' loader draws them from the unseeded global generator)."""

    def __init__(self, orders: list[torch.Tensor]) -> None:
        self.orders, self.epoch = orders, 0

    def __len__(self) -> int:
        return len(self.orders[0])

    def __iter__(self):
        order = self.orders[self.epoch % len(self.orders)]
        self.epoch += 1
        return iter(order.tolist())


def _their_probe(x, y, *, epochs, batch_size, seed, lr=1e-2):
    """Transcription of ``linear_probe_multi`` (their features (n, D), labels (num_tasks, n) in {0, 1}): one
    nn.Linear(D, num_tasks), BCEWithLogitsLoss, Adam(lr=1e-2), CosineAnnealingLR(T_max=epochs, eta_min=1e-6) stepped
    after every epoch, shuffled batches; then 100 · TP / P per task over the same loader. Two seams make it
    reproducible: the initial weights are drawn from a seeded generator (as nn.Linear draws them: weight, then bias,
    U(±1/√D)), and the per-epoch permutations come from that generator next (a DataLoader sampler). CUDA autocast (a
    no-op on the CPU) is left out."""
    n, d = x.shape
    t = y.shape[0]
    gen = torch.Generator().manual_seed(seed)
    head = nn.Linear(d, t, dtype=x.dtype)
    with torch.no_grad():
        head.weight.uniform_(-1 / math.sqrt(d), 1 / math.sqrt(d), generator=gen)
        head.bias.uniform_(-1 / math.sqrt(d), 1 / math.sqrt(d), generator=gen)
    orders = [torch.randperm(n, generator=gen) if batch_size < n else torch.arange(n) for _ in range(epochs)]
    loader = DataLoader(TensorDataset(x, y.T.to(x.dtype)), batch_size=batch_size, sampler=_EpochOrders(orders))
    crit = nn.BCEWithLogitsLoss()
    opt = torch.optim.Adam(head.parameters(), lr=lr)
    sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=epochs, eta_min=1e-6)
    lrs = []
    for _ in range(epochs):
        lrs.append(opt.param_groups[0]["lr"])
        for feats, lbls in loader:
            opt.zero_grad(set_to_none=True)
            loss = crit(head(feats), lbls)
            loss.backward()
            opt.step()
        sched.step()
    correct, total = torch.zeros(t, dtype=x.dtype), torch.zeros(t, dtype=x.dtype)
    with torch.no_grad():
        for feats, lbls in loader:
            preds = (head(feats) > 0).to(x.dtype)
            correct += ((preds == lbls) & (lbls == 1)).sum(dim=0)
            total += (lbls == 1).sum(dim=0)
    return head, 100 * correct / total, lrs


def _task(n=40, d=6, t=5, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, d, generator=g, dtype=dtype) * 2.0 + 1.0  # raw features: not centred, not unit scale
    w = torch.randn(t, d, generator=g, dtype=dtype)
    y = ((x @ w.T).T + 0.5 * torch.randn(t, n, generator=g, dtype=dtype) > 0).long()  # noisy linear tasks
    return x, y


def test_the_authors_probe_equals_a_transcription_of_their_training_loop() -> None:
    """Same seed -> same weights and the same per-task recalls. 40 rows in batches of 16 (two full batches and a
    short one of 8 per epoch, as DataLoader's last batch), 7 epochs: 21 Adam steps under the cosine schedule.

    Tolerance: both run in float64 on the same (B, T) logits; they can differ only by the cosine lr (closed form vs
    CosineAnnealingLR's recursion, ~epochs·u relative) and by the order of the gradient sums (autograd of one
    F.linear either way; bound it anyway). Per step the gradient differs by <= c·B·u relative; Adam's update lr·m/(√v + ε) carries a relative gradient change about one to one,
    so after S = 21 steps the weights differ by <= S·lr·c·B·u ≈ 21·0.01·10·16·2.2e-16 ≈ 7e-15; 1e-10 leaves >10^4.
    The recalls count sign(z), so their counts equal exactly (no logit lies within 1e-10 of 0 here: checked)."""
    x, y = _task()
    epochs, bs, seed = 7, 16, 3
    ours = fit_task_probes(x, y, 2, epochs=epochs, lr=1e-2, batch_size=bs, seed=seed, head="logit", schedule="cosine")
    theirs, their_recall, lrs = _their_probe(x, y, epochs=epochs, batch_size=bs, seed=seed)
    assert isinstance(ours, BatchedLogitHead)
    assert torch.allclose(ours.weight, theirs.weight, rtol=0, atol=1e-10)
    assert torch.allclose(ours.bias, theirs.bias, rtol=0, atol=1e-10)
    with torch.no_grad():
        assert bool((ours.logit(x).abs() > 1e-10).all())
    # equal counts TP / P; theirs is 100·TP/P in percent (two roundings apart from ours: rel 1e-14 is ~45 ulps)
    assert task_positive_recalls(ours, x, y).tolist() == pytest.approx((their_recall / 100).tolist(), rel=1e-14)
    # the schedule: epoch e at min + (lr − min)(1 + cos(πe/E))/2, CosineAnnealingLR's value to rounding
    assert [cosine_lr(1e-2, e, epochs) for e in range(epochs)] == pytest.approx(lrs, rel=1e-13, abs=0)
    # the probe learned: trained weights moved away from the initialisation
    init = BatchedLogitHead(5, 6, generator=torch.Generator().manual_seed(seed), dtype=F64)
    assert not torch.allclose(ours.weight, init.weight)


def test_the_logit_head_is_their_linear_layer_and_rule() -> None:
    """Initialisation as nn.Linear(D, num_tasks) from the same draws; [0, z] logits: argmax predicts 1 exactly when
    z > 0 (a tie predicts 0, as their ``logit > 0``); the loss is their BCEWithLogitsLoss over the (B, num_tasks)
    matrix (the same float64 terms in the same (B, T) layout: equal to rounding, rel 1e-14 leaves margin)."""
    x, y = _task(n=12, d=4, t=3)
    head = BatchedLogitHead(3, 4, generator=torch.Generator().manual_seed(1), dtype=F64)
    gen = torch.Generator().manual_seed(1)
    lin = nn.Linear(4, 3, dtype=F64)
    with torch.no_grad():
        lin.weight.uniform_(-0.5, 0.5, generator=gen)
        lin.bias.uniform_(-0.5, 0.5, generator=gen)
    assert torch.equal(head.weight, lin.weight) and torch.equal(head.bias, lin.bias)
    logits = head(x)
    assert logits.shape == (3, 12, 2) and torch.equal(logits[..., 0], torch.zeros(3, 12, dtype=F64))
    with torch.no_grad():
        z = lin(x).T
    assert torch.equal(logits[..., 1], z)
    assert torch.equal(logits.argmax(-1), (z > 0).long())
    tie = BatchedLogitHead(1, 1)
    with torch.no_grad():
        tie.weight.zero_()
        tie.bias.zero_()
    assert tie(torch.ones(2, 1)).argmax(-1).tolist() == [[0, 0]]
    expected = nn.BCEWithLogitsLoss()(lin(x), y.T.to(F64))
    assert head.loss(x, y).item() == pytest.approx(expected.item(), rel=1e-14)


def test_on_separable_data_the_bce_probe_reaches_recall_and_accuracy_one() -> None:
    """Binary tasks separable with margin on raw (uncentred, unscaled) features: the authors' probe, at their settings
    (100 epochs, batches of 256, lr 1e-2 annealed, raw features), recalls every positive and classifies every row."""
    g = torch.Generator().manual_seed(0)
    n, d = 300, 5
    x = torch.randn(n, d, generator=g) * 0.1 + 3.0
    y = torch.randint(0, 2, (2, n), generator=g)
    x[:, 0] += 2.0 * (2 * y[0] - 1)  # task 0 separable along dimension 0
    x[:, 1] += 2.0 * (2 * y[1] - 1)  # task 1 along dimension 1
    idx = torch.arange(n)
    opts = CONVENTIONS["authors"].probe_options
    assert opts == {"standardize": False, "head": "logit", "batch_size": 256, "schedule": "cosine"}
    recall = evaluate_task_probes(x, y, idx, idx, 2, metric="positive_recall", split="train", epochs=100, **opts)
    assert recall.tolist() == [1.0, 1.0]
    head = fit_task_probes(x, y, 2, epochs=100, lr=1e-2, batch_size=256, head="logit", schedule="cosine")
    assert task_accuracies(head, x, y).tolist() == [1.0, 1.0]


def test_probe_settings_of_every_convention() -> None:
    a = CONVENTIONS["authors"]
    assert (a.probe_head, a.probe_features, a.probe_batch_size, a.probe_schedule) == ("logit", "raw", 256, "cosine")
    for name in ("paper", "repbench"):  # RepBench's probe (the paper states none): unchanged
        c = CONVENTIONS[name]
        assert (c.probe_head, c.probe_features, c.probe_batch_size, c.probe_schedule) == (
            "softmax",
            "standardized",
            None,
            "constant",
        )
        assert c.probe_options == {"standardize": True, "head": "softmax", "batch_size": None, "schedule": "constant"}
    cfg = TaskPriorConfig()
    assert (cfg.epochs, cfg.lr, cfg.weight_decay) == (100, 1e-2, 0.0)  # the authors' 100 epochs, Adam lr 1e-2, no decay


def test_the_logit_head_needs_binary_tasks() -> None:
    with pytest.raises(ValueError, match=r"one BCE logit per task .* task_classes=3; use task_classes=2"):
        TaskPriorConfig(convention="authors", task_classes=3)
    with pytest.raises(ValueError, match=r"probe_head='logit' .* needs binary tasks, got 3 classes"):
        make_probe_head("logit", 2, 3, 4)
    with pytest.raises(ValueError, match=r"probe_head must be one of \('softmax', 'logit'\)"):
        make_probe_head("bce", 2, 2, 4)
    with pytest.raises(ValueError, match=r"probe_schedule must be one of \('constant', 'cosine'\)"):
        fit_task_probes(torch.zeros(4, 2), torch.zeros(1, 4, dtype=torch.long), 2, epochs=1, schedule="step")
    assert isinstance(make_probe_head("softmax", 2, 3, 4), BatchedLinearHead)


def test_compare_features_trains_the_authors_probe_on_every_image() -> None:
    """``convention="authors"``: no held-out split (their probe trains and scores on all images); the row's scores
    are the authors' probe's recalls, bit for bit those of evaluate_task_probes on all rows with their settings."""
    from src.task_prior.compare import compare_features

    g = torch.Generator().manual_seed(3)
    prior = torch.randn(30, 5, generator=g, dtype=F64)
    feats = torch.randn(30, 7, generator=g, dtype=F64) + 2.0
    cfg = TaskPriorConfig(convention="authors", num_tasks=3, epochs=4)
    (row,) = compare_features({"a": feats}, prior, cfg)
    labels = cfg.sample_labels(prior)
    idx = torch.arange(30)
    expected = evaluate_task_probes(feats, labels, idx, idx, 2, metric="positive_recall", split="train", epochs=4,
                                    lr=1e-2, weight_decay=0.0, seed=0, **CONVENTIONS["authors"].probe_options)  # fmt: skip
    assert row["convention"] == "authors" and row["accuracies"] == expected.tolist()


def test_the_probe_module_trains_the_authors_probe(tmp_path) -> None:
    """TaskPriorProbe(convention="authors"): the one-logit head on the raw features, lr annealed per epoch to 1e-6
    over trainer.max_epochs (after 2 of 2 epochs the optimizer holds eta_min), recall of class 1 logged."""
    import json

    from src.data import DigitsDataModule
    from src.models import TaskPriorProbe
    from tests._lightning import quiet_trainer

    tiny = {"name": "timm:test_efficientnet", "pretrained": False}
    out = tmp_path / "row.json"
    model = TaskPriorProbe(backbone=tiny, prior_backbone=tiny, convention="authors", num_tasks=3, max_samples=48,
                           results_file=str(out), seed=1)  # fmt: skip
    assert isinstance(model.head, BatchedLogitHead) and model.standardize is False
    assert TaskPriorProbe(backbone=tiny, prior_backbone=tiny, convention="authors", standardize=True).standardize
    trainer = quiet_trainer(max_epochs=2, num_sanity_val_steps=0)
    trainer.fit(model, datamodule=DigitsDataModule(image_size=16, batch_size=32))
    (sched,) = trainer.lr_scheduler_configs
    assert isinstance(sched.scheduler, torch.optim.lr_scheduler.CosineAnnealingLR) and sched.interval == "epoch"
    assert sched.scheduler.T_max == 2 and trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(1e-6)
    row = json.loads(out.read_text())
    assert (row["probe_head"], row["standardize"], row["probe_metric"]) == ("logit", False, "positive_recall")
    assert len(row["accuracies"]) == 3 and all(0.0 <= r <= 1.0 for r in row["accuracies"])
    # the other conventions keep a softmax head on z-scored features and no scheduler
    rb = TaskPriorProbe(backbone=tiny, prior_backbone=tiny)
    assert isinstance(rb.head, BatchedLinearHead) and rb.standardize is True
