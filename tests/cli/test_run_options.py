"""The run options the comparison CLIs share (configs/run_options/default.yaml: ``device``, ``progress``, ``seed``,
``extractor``), stated once: every CLI config composes the group and states none of its keys itself; an ``extractor.*``
override reaches every FeatureExtractor of each CLI's backbone forwards; ``seed=`` is the seed of each method block
that leaves its own null; the extractor block is checked (``src.features.extractor_options``) before any backbone is
built; task_prior.yaml's top-level ``max_batch`` is a deprecated alias of ``extractor.max_batch``."""

from __future__ import annotations

import importlib

import pytest
from omegaconf import OmegaConf

from src.features import EXTRACTOR_OPTIONS, FeatureExtractor, extractor_options
from src.utils.resources import config_dir
from tests.report.test_report_cli import TINY as REPORT_TINY

from .conftest import compose_cfg
from .test_report_clis import ROBUSTNESS, SYNBENCH_TINY, TASKPRIOR

SHARED = ("device", "progress", "seed", "extractor")
NET = "{name:timm:test_efficientnet,pretrained:false}"
#: the tiny settings of each CLI's existing tests (DivergenceRadius: a small split)
TINY = {
    "synbench": SYNBENCH_TINY,
    "divergence_radius": ROBUSTNESS + ["n_train=30", "n_test=4", "progress=false"],
    "task_prior": TASKPRIOR,
    "report": [f"backbones=[{NET}]", *REPORT_TINY, "cache_dir=null"],
}
CLIS = tuple(TINY)


def _run(cli: str):
    return importlib.import_module(f"src.{cli}.__main__").run


@pytest.mark.parametrize("cli", CLIS)
def test_every_cli_composes_the_group_and_states_none_of_its_keys(cli, tmp_path) -> None:
    shared = OmegaConf.load(config_dir() / "run_options" / "default.yaml")
    assert tuple(shared.extractor) == EXTRACTOR_OPTIONS and set(shared) == set(SHARED)
    own = OmegaConf.load(config_dir() / f"{cli}.yaml")
    assert {"run_options": "default"} in list(own.defaults)
    assert not set(own) & set(SHARED), f"{cli}.yaml states {set(own) & set(SHARED)} itself"
    cfg = compose_cfg(f"{cli}.yaml", [], tmp_path)
    for key in SHARED:
        assert cfg[key] == shared[key], key
    assert extractor_options(OmegaConf.to_container(cfg.extractor)) == {}  # the defaults: no option at all


@pytest.fixture
def built(monkeypatch):
    """(max_batch, precision) of every FeatureExtractor built."""
    seen: list[tuple[int, str]] = []
    init = FeatureExtractor.__init__

    def record(self, *args, **kwargs):
        init(self, *args, **kwargs)
        seen.append((self.max_batch, self.precision))

    monkeypatch.setattr(FeatureExtractor, "__init__", record)
    return seen


@pytest.mark.timeout(600)
@pytest.mark.parametrize("cli", CLIS)
def test_an_extractor_override_reaches_every_forward_of_each_cli(cli, tmp_path, built) -> None:
    cfg = compose_cfg(f"{cli}.yaml", TINY[cli] + ["extractor.precision=bf16", "extractor.max_batch=7"], tmp_path)
    _run(cli)(cfg)
    assert built and set(built) == {(7, "bf16")}, built
    if cli == "report":  # each part: SynBench, the baselines' proxy task, DR, the Task-Prior prior and backbone, probes
        assert len(built) >= 6, built


def test_the_report_caches_other_extractor_options_apart(tmp_path, monkeypatch) -> None:
    """Default options leave every part's cache key as it was; other options enter each key (never a stale reuse)."""
    from src.report.cache import ResultCache

    keys: dict[str, list[tuple[str, dict]]] = {"default": [], "fp32": []}
    current: list[list[tuple[str, dict]]] = []

    def get(self, part, fp, settings, **kw):  # every job asks the cache first; downstream is the last job
        current[-1].append((part, settings))
        if part == "downstream":
            raise _Stop()
        return {"value": {}, "seconds": 0.0}

    monkeypatch.setattr(ResultCache, "get", get)
    base = [o for o in TINY["report"] if not o.startswith("cache_dir=")] + [f"cache_dir={tmp_path / 'cache'}"]
    for name, extra in (("default", []), ("fp32", ["extractor.precision=fp32"])):
        current.append(keys[name])
        with pytest.raises(_Stop):
            _run("report")(compose_cfg("report.yaml", base + extra, tmp_path))
    parts = [p for p, _ in keys["default"]]
    assert {"synbench", "baselines", "divergence_radius", "task_prior", "downstream"} <= set(parts)
    assert all("extractor" not in s for _, s in keys["default"])
    assert [p for p, _ in keys["fp32"]] == parts
    for (_, default), (_, other) in zip(keys["default"], keys["fp32"]):
        assert other == {**default, "extractor": {"precision": "fp32"}}


class _Stop(Exception):
    """Raised by a stub: the test has seen what it needs."""


def test_the_run_seed_is_each_null_method_seed(tmp_path, monkeypatch) -> None:
    from src.divergence_radius.__main__ import comparison_arguments
    from src.report.__main__ import audit_config
    from src.synbench import SynBenchConfig
    from src.synbench.__main__ import protocol_fields

    def compose(cli, extra):
        return compose_cfg(f"{cli}.yaml", TINY[cli] + extra, tmp_path)

    assert SynBenchConfig(**protocol_fields(compose("synbench", ["seed=3"]))[0]).seed == 3
    assert SynBenchConfig(**protocol_fields(compose("synbench", []))[0]).seed == 0
    own = protocol_fields(compose("synbench", ["seed=3", "+synbench.seed=12"]))[0]  # benchmarks/engine.py's override
    assert SynBenchConfig(**own).seed == 12  # a method block's own seed wins
    assert comparison_arguments(compose("divergence_radius", ["seed=3"]))["config"].seed == 3
    own = comparison_arguments(compose("divergence_radius", ["seed=3", "divergence_radius.seed=5"]))
    assert own["config"].seed == 5  # a method block's own seed wins
    audit = audit_config(compose("report", ["seed=3"]))
    assert (audit.synbench.seed, audit.divergence_radius.seed, audit.task_prior.seed) == (3, 3, 3)
    audit = audit_config(compose("report", ["seed=3", "task_prior.seed=4"]))
    assert (audit.synbench.seed, audit.divergence_radius.seed, audit.task_prior.seed) == (3, 3, 4)
    seen = {}
    monkeypatch.setattr("src.task_prior.__main__.compare_backbones", lambda b, c, **kw: _stop(seen.setdefault("c", c)))
    with pytest.raises(_Stop):
        _run("task_prior")(compose("task_prior", ["seed=3"]))
    assert seen["c"].seed == 3
    with pytest.raises(ValueError, match=r"seed must be an integer >= 0, got -1"):
        comparison_arguments(compose("divergence_radius", ["seed=-1"]))


def _stop(*_):
    raise _Stop()


@pytest.fixture
def no_backbone(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("a backbone was built: the bad setting was not refused first")

    monkeypatch.setattr("src.backbones.spec.create_backbone", refuse)


@pytest.mark.parametrize("cli", CLIS)
@pytest.mark.parametrize(
    "override,match",
    [
        ("extractor.max_batch=0", r"extractor\.max_batch must be an integer >= 1, got 0"),
        ("extractor.precision=fp8", r"extractor\.precision / extractor\.autocast: unknown precision 'fp8'"),
        ("extractor.memory_format=nhwc", r"extractor\.memory_format must be one of \['auto', 'contiguous'"),
        ("extractor.compile=maybe", r"extractor\.compile must be true or false, got 'maybe'"),
    ],
)
def test_a_bad_extractor_option_is_refused_before_any_backbone(cli, override, match, tmp_path, no_backbone) -> None:
    with pytest.raises(ValueError, match=match):
        _run(cli)(compose_cfg(f"{cli}.yaml", TINY[cli] + [override], tmp_path))


def test_task_prior_max_batch_is_a_deprecated_alias(tmp_path, monkeypatch) -> None:
    seen = []
    monkeypatch.setattr("src.task_prior.__main__.compare_backbones", lambda b, c, **kw: _stop(seen.append(kw)))
    with pytest.warns(FutureWarning, match=r"max_batch=7 is deprecated; use extractor\.max_batch=7"):
        with pytest.raises(_Stop):
            _run("task_prior")(compose_cfg("task_prior.yaml", TASKPRIOR + ["max_batch=7"], tmp_path))
    assert seen[-1]["extractor"] == {"max_batch": 7}
    with pytest.raises(ValueError, match=r"max_batch=7 \(deprecated\) and extractor\.max_batch=5 disagree"):
        _run("task_prior")(
            compose_cfg("task_prior.yaml", TASKPRIOR + ["max_batch=7", "extractor.max_batch=5"], tmp_path)
        )


def test_extractor_options() -> None:
    defaults = {"max_batch": None, "memory_format": "auto", "compile": False, "precision": None, "autocast": None}
    assert extractor_options(None) == extractor_options(defaults) == extractor_options({"precision": "tf32"}) == {}
    given = {"max_batch": 256, "memory_format": "contiguous", "compile": True, "precision": "fp32"}
    assert extractor_options(given) == given  # a given max_batch stays, even at the default: the caller's may differ
    with pytest.warns(DeprecationWarning, match="autocast"):
        assert extractor_options({"autocast": "bf16"}) == {"precision": "bf16"}
    with pytest.raises(ValueError, match=r"extractor: unknown option\(s\) \['batch'\]; the options are \['max_batch'"):
        extractor_options({"batch": 7})
    with pytest.raises(ValueError, match=r"callbacks\.x\.max_batch must be an integer >= 1, got 1\.5"):
        extractor_options({"max_batch": 1.5}, key="callbacks.x")
