"""The paper's Table 1 SA / RA on the proxy task (src/synbench/proxy.py), against closed forms.

With an identity "backbone" the probe is a linear classifier f(u) = w·u + c in the Gaussian space. Exact on the sample:
SA = #(m_i > 0)/n and, since the worst ℓ2 perturbation of radius ε lowers every signed margin m_i = (2y_i − 1) f(u_i)
by exactly ε‖w‖ and PGD without a random start walks straight to it (each step moves 2.5ε/steps along the constant
direction −(2y − 1) w/‖w‖; the projection keeps radius ε from step ⌈steps/2.5⌉ on), RA = #(m_i > ε‖w‖)/n — up to
samples whose margin lies within float rounding of ε‖w‖. In the population (u = 0.5·1 ± s·1/√d + N(0, I)):
P(correct | y) = Φ(a_y − ε) with a_1 = f(0.5·1 + μ̃)/‖w‖, a_0 = −f(0.5·1 − μ̃)/‖w‖, so the sample SA / RA lie within a
few binomial standard errors of Σ_i Φ(a_{y_i} − ε)/n, which is at most the Bayes accuracy Φ(s − ε) and close to it.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch
from scipy.stats import norm

from src.synbench import SynBenchConfig, SynBenchResult, synbench
from src.synbench.config import ProxyAccuracy
from src.synbench.plan import SamplingPlan
from src.synbench.proxy import fit_probe
from src.utils.threads import torch_threads

D = 16
S, EPS = 1.5, 0.2
# 2048 training samples fit the probe; 4096 test samples: the binomial SE of an accuracy near 0.93 is 0.004
CFG = SynBenchConfig(s_values=(1.0,), n_train=2048, n_test=4096, eps=(0.0,), normalization="none")


def identity(x: torch.Tensor) -> torch.Tensor:
    return x.double().flatten(1)


def _task(cfg: SynBenchConfig, backbone_mean_std=None):
    """The proxy task's train and test samples (pixels fed to the feature function) and the probe fitted on them."""
    plan = SamplingPlan.from_config(cfg, (D,), identity, backbone_mean_std)
    p = cfg.proxy
    xs = {}
    for split in ("train", "test"):
        parts = list(plan.batches(p.s, split))
        xs[split] = (torch.cat([x for x, _ in parts]).double(), torch.cat([y for _, y in parts]))
    W, b = fit_probe(identity(xs["train"][0]), xs["train"][1], C=p.C)
    return xs["test"], W[1] - W[0], float(b[1] - b[0])


def _run(cfg: SynBenchConfig, **kwargs) -> dict:
    with torch_threads(1):  # a tiny model's many small autograd steps: one thread (two collapse on a busy CPU)
        return synbench(identity, input_shape=(D,), config=cfg, **kwargs).proxy


def test_identity_backbone_sa_ra_equal_the_linear_closed_forms() -> None:
    cfg = SynBenchConfig(**{**CFG.to_dict(), "proxy": {"s": S, "eps": EPS}})
    got = _run(cfg, backbone_mean_std=None)
    (x, y), w, c = _task(cfg)
    margin = (2.0 * y.double() - 1.0) * (x @ w + c)
    wn = float(w.norm())
    # exact on the sample
    assert got["sa"] == pytest.approx(float((margin > 0).double().mean()), abs=1e-12)
    near = int(((margin - EPS * wn).abs() < 1e-6).sum())  # float rounding decides these; there are none here
    assert abs(got["ra"] * len(y) - int((margin > EPS * wn).sum())) <= near
    assert got["pixel_scale"] == [1.0] and got["n_train"] == 2048 and got["n_test"] == 4096
    # in the population, given the sample's labels
    mu = S / math.sqrt(D)
    a1 = float(w @ torch.full((D,), 0.5 + mu, dtype=torch.float64) + c) / wn
    a0 = -float(w @ torch.full((D,), 0.5 - mu, dtype=torch.float64) + c) / wn
    n1 = int(y.sum())
    n0 = len(y) - n1
    for key, e in (("sa", 0.0), ("ra", EPS)):
        p1, p0 = norm.cdf(a1 - e), norm.cdf(a0 - e)
        expected = (n1 * p1 + n0 * p0) / len(y)
        se = math.sqrt(n1 * p1 * (1 - p1) + n0 * p0 * (1 - p0)) / len(y)
        assert abs(got[key] - expected) < 4 * se, (key, got[key], expected, se)
        # the fitted rule is no better than the Bayes rule Φ(s − ε) and close to it: its excess error
        # φ(s)·s·θ²/2 + O(intercept²) for a direction θ off the Bayes one, θ² ≈ (d − 1)/(n s²) ≈ 0.003 at
        # n = 2048, d = 16, s = 1.5: ≈ 3e-4; 0.005 leaves an order of magnitude
        bayes = norm.cdf(S - e)
        population = 0.5 * (p1 + p0)
        assert population <= bayes + 1e-12
        assert bayes - population < 0.005
        # so the proxy's SA / RA estimate the input-space Bayes SA / RA
        assert abs(got[key] - bayes) < 4 * se + 0.005


@pytest.mark.parametrize("space, radius", [("gaussian", 1.0), ("input", 2.0)])
def test_the_ball_lies_in_the_chosen_space(space: str, radius: float) -> None:
    """normalization='backbone' with a backbone normalising by std 2: SynBench feeds its Gaussian samples as pixels
    (x' = u), the network sees x'/2. A Gaussian-space ball of ε is a pixel ball of ε; an input-space ball of ε is a
    pixel ball of 2ε (pixel_scale 2)."""
    mean_std = ((0.0,), (2.0,))
    base = {**CFG.to_dict(), "normalization": "backbone", "n_test": 1024}
    cfg = SynBenchConfig(**{**base, "proxy": {"s": S, "eps": EPS, "space": space}})
    got = _run(cfg, backbone_mean_std=mean_std)
    (x, y), w, c = _task(cfg, mean_std)
    margin = (2.0 * y.double() - 1.0) * (x @ w + c)
    r = radius * EPS * float(w.norm())
    near = int(((margin - r).abs() < 1e-6).sum())
    assert abs(got["ra"] * len(y) - int((margin > r).sum())) <= near
    assert got["pixel_scale"] == [radius] and got["space"] == space


def test_pgd_reaches_the_linear_worst_case_for_every_radius() -> None:
    """Radii where the worst case flips many samples: PGD (no random start, 10 steps) equals the closed form."""
    for eps in (0.0, 0.5, 1.0):
        cfg = SynBenchConfig(**{**CFG.to_dict(), "n_test": 512, "proxy": {"s": 1.0, "eps": eps}})
        got = _run(cfg, backbone_mean_std=None)
        (x, y), w, c = _task(cfg)
        margin = (2.0 * y.double() - 1.0) * (x @ w + c)
        r = eps * float(w.norm())
        assert abs(got["ra"] * len(y) - int((margin > r).sum())) <= int(((margin - r).abs() < 1e-6).sum()), eps
    assert got["ra"] < got["sa"] - 0.2  # ε = 1 is a real attack here


def test_result_round_trip_and_the_default_result_is_unchanged() -> None:
    cfg = SynBenchConfig(**{**CFG.to_dict(), "n_train": 64, "n_test": 32, "proxy": {"s": 3.0, "steps": 2}})
    with torch_threads(1):
        res = synbench(identity, input_shape=(D,), config=cfg)
    d = json.loads(json.dumps(res.to_dict()))
    back = SynBenchResult.from_dict(d)
    assert back.proxy == res.proxy and back.config == cfg and back.config.proxy == ProxyAccuracy(s=3.0, steps=2)
    assert "proxy_s" in res.timings and res.proxy["seconds"] >= 0
    plain = synbench(identity, input_shape=(D,), config=SynBenchConfig(**{**cfg.to_dict(), "proxy": None}))
    assert plain.proxy is None and "proxy" not in plain.to_dict() and "proxy" not in plain.to_dict()["config"]
    assert "proxy_s" not in plain.timings
    assert SynBenchResult.from_dict(plain.to_dict()).proxy is None


def test_proxy_options() -> None:
    assert SynBenchConfig().proxy is None
    assert SynBenchConfig(proxy=True).proxy == ProxyAccuracy() == SynBenchConfig(proxy={}).proxy
    assert SynBenchConfig(proxy=False).proxy is None
    p = ProxyAccuracy()
    assert (p.s, p.eps, p.steps, p.space, p.C, p.n_train, p.n_test) == (3.0, 0.2, 10, "gaussian", 1.0, None, None)
    assert norm.cdf(p.s) > 0.998  # above every SA of the paper's Table 1 (99.8 % at most)
    assert SynBenchConfig.coerce({"proxy": {"s": 2, "n_test": None}}).proxy == ProxyAccuracy(s=2.0)
    for bad, match in (
        ({"s": 0}, "proxy.s"),
        ({"eps": -0.1}, "proxy.eps"),
        ({"eps": float("nan")}, "proxy.eps"),
        ({"steps": 0}, "proxy.steps"),
        ({"space": "pixel"}, "proxy.space"),
        ({"n_train": 2}, "proxy.n_train"),
        ({"sigma": 1}, "unknown field"),
    ):
        with pytest.raises(ValueError, match=match):
            SynBenchConfig(proxy=bad)
    with pytest.raises(TypeError, match="proxy"):
        SynBenchConfig(proxy=0.2)


def test_the_metric_refuses_a_proxy_it_would_ignore() -> None:
    from src.metrics import SynBenchScore

    with pytest.raises(ValueError, match="synbench\\(\\)"):
        SynBenchScore(SynBenchConfig(proxy=True), input_shape=(3, 8, 8))


def test_fit_probe_is_the_report_probe() -> None:
    from src.divergence_radius.downstream import fit_linear_probe

    g = torch.Generator().manual_seed(0)
    y = (torch.rand(300, generator=g) < 0.4).long()
    z = torch.randn(300, 5, generator=g, dtype=torch.float64) * torch.tensor([1.0, 3, 0.1, 1, 2]) + y[:, None]
    W, b = fit_probe(z, y, C=0.5)
    ref = fit_linear_probe(z, y, C=0.5)
    logits = z @ W.T + b
    assert torch.allclose(logits, ref(z).double(), atol=1e-9)
    with pytest.raises(ValueError, match="both classes"):
        fit_probe(z, torch.zeros(300, dtype=torch.long))


def test_through_a_network_the_attack_only_lowers_accuracy() -> None:
    """A conv net (random timm test net, 16 px, official normalisation): gradients flow through the frozen backbone,
    RA <= SA, and ε = 0 gives RA = SA (the attack then returns the clean samples)."""
    from src.backbones import create_backbone

    torch.manual_seed(0)
    bb = create_backbone("timm:test_efficientnet", pretrained=False)
    for eps in (0.0, 0.2):
        cfg = SynBenchConfig(
            s_values=(1.0,), n_train=64, n_test=32, eps=(0.0,), proxy={"s": 3.0, "eps": eps, "steps": 3}
        )
        with torch_threads(1):
            res = synbench(bb.embed, input_shape=(3, 16, 16), config=cfg)
        p = res.proxy
        assert 0.0 <= p["ra"] <= p["sa"] + 1 / 32 and 0.0 <= p["sa"] <= 1.0
        assert p["pixel_scale"] == pytest.approx([1.0, 1.0, 1.0])  # imagenet normalisation, an ImageNet backbone
        if eps == 0.0:
            assert abs(p["ra"] - p["sa"]) <= 1 / 32
    assert bb.training is False
    np.testing.assert_array_less(-1e-12, np.array([p["seconds"]]))


def test_report_columns_directions_and_cache_keys() -> None:
    """The report's synbench part: synbench_sa / synbench_ra columns (higher is better, METHODS), present only with
    synbench.proxy; the cache key holds the proxy options only when set, and the baselines' key never."""
    from src.methods import column_direction
    from src.methods.audit_parts import baselines_settings, synbench_columns, synbench_settings
    from src.methods.spec import PartContext
    from src.report.audit import AuditConfig, run_audit

    assert column_direction("synbench_sa") is True and column_direction("synbench_ra") is True
    small = dict(s_values=(1.0, 2.0), n_train=64, n_test=32, eps=(0.0,))
    plain, on = (AuditConfig(parts=("synbench",), input_size=16, synbench={**small, "proxy": p}) for p in (None, True))
    keys = [synbench_settings(PartContext(c.synbench, c)) for c in (plain, on)]
    assert "proxy" not in keys[0]["synbench"] and keys[1]["synbench"]["proxy"]["s"] == 3.0
    assert {k: v for k, v in keys[1]["synbench"].items() if k != "proxy"} == keys[0]["synbench"]
    assert baselines_settings(PartContext(plain.synbench, plain)) == baselines_settings(PartContext(on.synbench, on))
    net = [{"name": "timm:test_efficientnet", "pretrained": False}]
    with torch_threads(1):
        res = run_audit(net, AuditConfig(parts=("synbench",), input_size=16, synbench={**small, "proxy": {"steps": 2}}))
    (value,) = res.values.values()
    cols = synbench_columns(value["synbench"])
    assert cols["synbench_sa"] == value["synbench"]["proxy"]["sa"] and 0 <= cols["synbench_ra"] <= 1
    assert set(synbench_columns({k: v for k, v in value["synbench"].items() if k != "proxy"})) == {
        "synbench",
        "synbench_best_eps",
    }


@pytest.mark.parametrize("full", [False, True])
def test_the_report_and_synbench_clis_take_the_proxy_option(full: bool, tmp_path) -> None:
    """configs/report.yaml and configs/synbench.yaml: synbench.proxy is null (off) by default; synbench.proxy={...}
    turns it on, with full=true too (the official protocol plus the proxy task)."""
    from src.report.__main__ import audit_config
    from src.synbench.__main__ import protocol_fields
    from tests.cli.conftest import compose_cfg

    def composed(name: str, overrides: list[str]):
        return compose_cfg(name, [f"full={str(full).lower()}", *overrides], tmp_path)

    assert audit_config(composed("report.yaml", [])).synbench.proxy is None
    on = audit_config(composed("report.yaml", ["synbench.proxy={s: 2.5, steps: 5}"])).synbench
    assert on.proxy == ProxyAccuracy(s=2.5, steps=5)
    assert (on.n_test == 2048) is full  # full=true: the official protocol's samples, with the proxy task on top
    assert SynBenchConfig(**protocol_fields(composed("synbench.yaml", []))[0]).proxy is None
    fields = protocol_fields(composed("synbench.yaml", ["synbench.proxy={}"]))[0]
    assert SynBenchConfig(**fields).proxy == ProxyAccuracy()
