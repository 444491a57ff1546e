"""Defaults live once, in configs/: every class that a YAML file instantiates has code defaults equal to that YAML or
no default at all (design principle "Defaults once").

For each case the YAML is composed into train.yaml (so interpolations such as ``${seed}`` resolve as in a run) and
every ``__init__`` parameter that has a code default and appears in the YAML node must agree. A code default of
``None`` that means "the documented defaults" is compared through ``effective``. Extend ``CASES`` when you add a class
with a YAML config.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from omegaconf import OmegaConf, open_dict

from src.backbones.spec import plain as _plain  # Mappings -> dict, tuples -> list, recursively

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def _attr(path: str) -> Callable[[], Any]:
    """Lazy ``module:attribute`` lookup (the effective default a ``None`` argument stands for)."""

    def get() -> Any:
        module, _, name = path.partition(":")
        value = getattr(importlib.import_module(module), name)
        return value() if callable(value) else value

    return get


def _field(path: str, name: str) -> Callable[[], Any]:
    """Lazy default of field ``name`` of the dataclass ``module:Class`` (what a None argument stands for)."""

    def get() -> Any:
        module, _, cls = path.partition(":")
        return getattr(getattr(importlib.import_module(module), cls)(), name)

    return get


@dataclass
class Case:
    target: str  # the class, "module:Class"
    yaml: str  # the file under configs/ that instantiates it
    node: str  # where that file lands in the composed train config
    overrides: list[str] = field(default_factory=list)  # selecting the file in train.yaml
    wiring: dict[str, str] = field(default_factory=dict)  # YAML keys that wire values in (not defaults): why
    effective: dict[str, Callable[[], Any]] = field(default_factory=dict)  # param -> what a None default means


_BACKBONE = {"backbone": "the backbone group (${backbone}); compared by test_backbone_defaults"}
_DATA_WIRING = {"num_classes": "a check against the data (None = no check), set from the data config"}

CASES = [
    Case(
        "src.models:RobustLinearProbe",
        "model/robust_probe.yaml",
        "model",
        effective={
            "attack": _attr("src.models.robust_probe:ATTACK_DEFAULTS"),
            "eval_attack": _attr("src.models.robust_probe:EVAL_ATTACK_DEFAULTS"),
            "auto_epsilon": _attr("src.models.auto_epsilon:auto_epsilon_defaults"),
        },
        wiring=dict(_BACKBONE),
    ),
    Case(
        "src.models:SupervisedPretraining",
        "model/supervised.yaml",
        "model",
        ["model=supervised", "backbone=timm_resnet10t_random"],
        wiring=dict(_BACKBONE),
    ),
    Case(
        "src.models:SimCLRPretraining",
        "model/simclr.yaml",
        "model",
        ["model=simclr", "backbone=timm_resnet10t_random"],
        wiring=dict(_BACKBONE),
    ),
    Case(
        "src.callbacks:SynBenchCallback",
        "callbacks/synbench.yaml",
        "callbacks.synbench",
        ["callbacks=synbench"],
        effective={"config": _attr("src.callbacks.synbench_callback:callback_budget")},
    ),
    Case(
        "src.callbacks:DivergenceRadiusCallback",
        "callbacks/divergence_radius.yaml",
        "callbacks.divergence_radius",
        effective={
            k: _field("src.divergence_radius.config:DivergenceRadiusConfig", k)
            for k in ("m", "mode", "seed", "chunk_size")
        },
    ),
    Case(
        "src.callbacks:TaskPriorCallback", "callbacks/task_prior.yaml", "callbacks.task_prior", ["callbacks=task_prior"]
    ),
    Case(
        "src.callbacks:RepresentationSpectrumCallback",
        "callbacks/spectrum.yaml",
        "callbacks.spectrum",
        ["callbacks=[default,spectrum]"],
    ),
    Case(
        "src.callbacks:ExceptionCheckpoint",
        "callbacks/default.yaml",
        "callbacks.exception_checkpoint",
        wiring={"dirpath": "the run's output folder"},
    ),
    Case("src.data:DigitsDataModule", "data/digits.yaml", "data", wiring=dict(_DATA_WIRING)),
    Case("src.data:GaussianTaskDataModule", "data/gaussian.yaml", "data", ["data=gaussian"], wiring=dict(_DATA_WIRING)),
    Case("src.data:PhotosDataModule", "data/photos.yaml", "data", ["data=photos", "model=robust_finetune"]),
    Case("src.data:SyntheticDepthDataModule", "data/synthetic_depth.yaml", "data", ["data=synthetic_depth"]),
    Case(
        "src.data:NYUDepthV2DataModule",
        "data/nyu_depth_v2.yaml",
        "data",
        ["data=nyu_depth_v2"],
        wiring={"path": "under the run's data folder (${paths.data_dir})"},
    ),
    Case(
        "src.models:PerturbationRobustFineTune",
        "model/robust_finetune.yaml",
        "model",
        ["model=robust_finetune", "data=photos"],
        wiring=dict(_BACKBONE),
    ),
    Case(
        "src.models:DepthProbe",
        "model/depth_probe.yaml",
        "model",
        ["experiment=depth_synthetic"],
        wiring={**_BACKBONE, "image_size": "the data's image size (${data.image_size})"},
    ),
    Case(
        "src.models:TaskPriorProbe",
        "model/task_prior_probe.yaml",
        "model",
        ["model=task_prior_probe"],
        wiring={**_BACKBONE, "results_file": "a file in the run's output folder"},
    ),
]


def _equal(a: Any, b: Any) -> bool:
    a, b = _plain(a), _plain(b)
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return math.isclose(float(a), float(b), rel_tol=0.0, abs_tol=0.0)  # written numbers: exactly equal
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return a == b


def _same_backbone(code: Any, yaml: Any) -> bool:
    """Backbone specs: a name equals ``{name: ...}``; options given on both sides must agree."""
    code = {"name": code} if isinstance(code, str) else _plain(code)
    yaml = {"name": yaml} if isinstance(yaml, str) else _plain(yaml)
    if not isinstance(code, dict) or not isinstance(yaml, dict):
        return _equal(code, yaml)
    return code.get("name") == yaml.get("name") and all(_equal(code[k], yaml[k]) for k in code.keys() & yaml.keys())


def _composed(case: Case) -> dict[str, Any]:
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONFIGS)):
        cfg = compose(config_name="train.yaml", overrides=case.overrides)
    GlobalHydra.instance().clear()
    with open_dict(cfg):
        cfg.paths.root_dir = cfg.paths.output_dir = "/tmp/repbench_test_defaults"
    node = OmegaConf.select(cfg, case.node)
    assert node is not None, f"{case.yaml} does not land at {case.node} with overrides {case.overrides}"
    return OmegaConf.to_container(node, resolve=True)


def _class(case: Case) -> type:
    if not (CONFIGS / case.yaml).is_file():
        pytest.skip(f"configs/{case.yaml} does not exist (yet)")
    module, _, name = case.target.partition(":")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError):
        pytest.skip(f"{case.target} is not importable (yet)")


@pytest.mark.parametrize("case", CASES, ids=[c.target.rpartition(":")[2] for c in CASES])
def test_code_defaults_equal_the_yaml(case: Case) -> None:
    cls = _class(case)
    node = _composed(case)
    # configs name the installed package (repbench.*); in the repository that is an alias of src.*
    from src import canonical_module_name

    assert node.get("_target_") == canonical_module_name(case.target.replace(":", "."))
    params = inspect.signature(cls.__init__).parameters
    accepts_kwargs = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    unknown = sorted(k for k in node if k != "_target_" and k not in params)
    assert accepts_kwargs or not unknown, f"{case.yaml}: keys {unknown} are not arguments of {cls.__name__}"
    differ = {}
    for name, param in params.items():
        if name == "self" or param.default is inspect.Parameter.empty or name not in node or name in case.wiring:
            continue
        code = param.default
        if code is None and name in case.effective:
            code = case.effective[name]()
        if name.endswith("backbone") and not _same_backbone(code, node[name]):
            differ[name] = (code, node[name])
        elif not name.endswith("backbone") and not _equal(code, node[name]):
            differ[name] = (code, node[name])
    assert not differ, f"{cls.__name__}: code default != configs/{case.yaml} for {differ} (code, yaml)"


@pytest.mark.parametrize(
    "case", [c for c in CASES if "backbone" in c.wiring], ids=lambda c: c.target.rpartition(":")[2]
)
def test_backbone_defaults(case: Case) -> None:
    """A module's default backbone is the backbone its YAML run uses (same name; options equal where given)."""
    cls = _class(case)
    code = inspect.signature(cls.__init__).parameters["backbone"].default
    if code is inspect.Parameter.empty:
        return
    yaml = _composed(case)["backbone"]
    assert _same_backbone(code, yaml), (code, yaml)


@dataclass
class CliBlock:
    """Keys of a CLI's own config (``configs/<yaml>``, composed as the CLI composes it) that repeat the defaults of
    ``target``: a dataclass (its field defaults; every key of the block must be a field) or a function (its parameter
    defaults; other keys are the CLI's own)."""

    yaml: str
    node: str  # the block ("" = the top-level keys)
    target: str  # "module:name"
    differ: dict[str, str] = field(default_factory=dict)  # keys set to another value on purpose: why
    effective: dict[str, Callable[[], Any]] = field(default_factory=dict)  # param -> what a None default means


def _item(path: str, key: str) -> Callable[[], Any]:
    """Lazy ``module:MAPPING[key]``."""
    return lambda: _attr(path)()[key]


CLI_BLOCKS = [
    CliBlock(
        "divergence_radius.yaml",
        "divergence_radius",
        "src.divergence_radius.config:DivergenceRadiusConfig",
        differ={
            "chunk_size": "32: the chunking of the run quoted in docs/divergence_radius.md (chunks seed draws)",
            "seed": "null: the run's seed (configs/run_options/default.yaml, seed: 0 = the code's default)",
        },
    ),
    CliBlock(
        "divergence_radius.yaml",
        "",
        "src.divergence_radius.compare:compare_backbones",
        differ={  # the keys of the shared configs/run_options group
            "progress": "true: a CLI shows its progress; the function is quiet unless asked",
            "extractor": "the FeatureExtractor options, each at its default (null / auto / false) = the function's None",
            "depth": "the depth: block, its fields each at DepthHeadConfig's default (the block below) = the function's None",
        },
        effective={
            k: _item("src.divergence_radius.compare:DIGITS_SPLIT", k) for k in ("image_size", "n_train", "n_test")
        },
    ),
    # the depth head and its fit (task=depth): every key a DepthHeadConfig field, at its default
    CliBlock("divergence_radius.yaml", "depth", "src.divergence_radius.depth:DepthHeadConfig"),
    # the Task-Prior CLI's data: block (num_images, image_size of the bundled digits; split is the CLI's own)
    CliBlock("task_prior.yaml", "data", "src.task_prior.report:digits_images"),
]


@pytest.mark.parametrize("block", CLI_BLOCKS, ids=lambda b: f"{b.yaml}:{b.node or 'top'}")
def test_cli_config_defaults_equal_the_code(block: CliBlock) -> None:
    module, _, name = block.target.partition(":")
    target = getattr(importlib.import_module(module), name)
    if dataclasses.is_dataclass(target):
        code = {f.name: f.default for f in dataclasses.fields(target) if f.default is not dataclasses.MISSING}
    else:
        params = inspect.signature(target).parameters.values()
        code = {p.name: p.default for p in params if p.default is not inspect.Parameter.empty}
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(CONFIGS)):
        cfg = compose(config_name=block.yaml)
    GlobalHydra.instance().clear()
    node = OmegaConf.select(cfg, block.node) if block.node else cfg
    if dataclasses.is_dataclass(target):
        unknown = sorted(set(node) - set(code))
        assert not unknown, f"configs/{block.yaml}: {block.node} keys {unknown} are not fields of {block.target}"
    differ = {}
    for key, default in code.items():
        if key not in node or key in block.differ:
            continue
        if default is None and key in block.effective:
            default = block.effective[key]()
        value = OmegaConf.to_container(node[key]) if OmegaConf.is_config(node[key]) else node[key]
        if not _equal(default, value):
            differ[key] = (default, value)
    assert not differ, f"{block.target}: code default != configs/{block.yaml} for {differ} (code, yaml)"
