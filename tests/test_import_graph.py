"""The package's import graph: layers import downward only, and no two subpackages import each other (no cycle).

Layers, lowest first (a subpackage may import its own layer's lower neighbours named in ALLOWED, never above):
utils -> images (the bundled photos and digits, probe images), stats (rank agreement, Pareto fronts), rng (Philox)
-> backbones, features, perturbations, attacks -> synbench, divergence_radius, task_prior (the three cores, no
Lightning data modules), baselines -> methods (the method table) -> data -> metrics -> callbacks -> models -> train / eval / hydra_callbacks / report (entry points).
The package root (``src/__init__.py``: the installed name and the repository alias) imports nothing of ours and may be
imported by anyone.

Third parties: the method cores and the foundation packages below them (:data:`FRAMEWORK_FREE`) import no Lightning,
torchmetrics, Hydra or OmegaConf outside their ``__main__.py`` (the CLIs), so importing or calling a core never loads
them; the entry points' Hydra / Lightning plumbing kept in ``src/utils`` (:data:`CLI_PLUMBING`) is used only by the CLIs.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = "<root>"

ALLOWED: dict[str, set[str]] = {
    "utils": set(),
    # foundation engines beside utils: the bundled images, shared statistics, the Philox generator
    "images": {"utils"},
    "stats": {"utils"},
    "rng": {"utils"},
    "backbones": {"utils"},
    "features": {"utils"},
    "perturbations": {"utils", "rng"},
    "attacks": {"utils"},
    "synbench": {"utils", "rng", "backbones", "features", "attacks"},  # attacks: the proxy task's PGD (Table 1)
    "divergence_radius": {"utils", "images", "stats", "backbones", "features", "perturbations"},
    "task_prior": {"utils", "images", "stats", "backbones", "features"},
    # task-agnostic baseline scores (LogME, SFDA, RankMe, alpha-ReQ, loss-data curves) on SynBench's proxy task
    "baselines": {"utils", "features", "synbench"},
    "data": {"utils", "images", "synbench"},
    # the method contract and its table (METHODS: options, scores with directions, audit parts; the rest lazily)
    "methods": {"utils", "images", "backbones", "features", "synbench", "divergence_radius", "task_prior", "baselines"},
    "metrics": {"utils", "features", "synbench", "divergence_radius", "task_prior", "baselines", "methods"},
    "callbacks": {
        "utils",
        "images",
        "rng",
        "backbones",
        "features",
        "perturbations",
        "synbench",
        "divergence_radius",
        "task_prior",
        "baselines",
        "methods",
        "metrics",
    },
    "models": {
        "utils",
        "backbones",
        "features",
        "perturbations",
        "attacks",
        "synbench",
        "divergence_radius",
        "task_prior",
        "metrics",
    },
    # Optuna pruning, SQLite storage and the objective's producer check (which monitor logs optimized_metric)
    "sweeps": {"callbacks", "metrics", "methods"},
    "train": {"utils", "backbones", "callbacks", "models", "data", "sweeps"},
    "eval": {"utils", "attacks", "models", "data"},
    "hydra_callbacks": {"utils", "task_prior"},
    # the table / Pareto front / choice of a Hydra sweep (python -m src.sweep_report): an entry point
    "sweep_report": {"utils", "stats", "callbacks"},
    # the monitoring study (python -m src.monitor_study): pretraining runs with every monitor, an entry point
    "monitor_study": {"utils", "stats", "synbench", "callbacks", "models", "data"},
    # the audit report over every method (python -m src.report): an entry point
    "report": {
        "utils",
        "images",
        "stats",
        "backbones",
        "features",
        "attacks",
        "synbench",
        "divergence_radius",
        "task_prior",
        "baselines",
        "methods",
        "data",
        "models",
    },
}


def _subpackage(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0].removesuffix(".py") if len(rel.parts) > 1 else (rel.stem if rel.stem != "__init__" else ROOT)


def import_graph() -> dict[str, set[str]]:
    """{subpackage: subpackages it imports} from every relative import in src/ (absolute imports of the package by
    name are refused by test_no_absolute_self_imports)."""
    graph: dict[str, set[str]] = defaultdict(set)
    for f in SRC.rglob("*.py"):
        me = _subpackage(f)
        here = list(f.relative_to(SRC).parent.parts)
        for node in ast.walk(ast.parse(f.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.level == 0:
                continue
            base = here[: len(here) - (node.level - 1)]
            target = base + (node.module.split(".") if node.module else [])
            other = target[0] if target else ROOT
            if other != me:
                graph[me].add(other if (SRC / other).exists() or (SRC / f"{other}.py").exists() else ROOT)
    return graph


def test_layers_import_downward_only():
    graph = import_graph()
    assert set(graph) - {ROOT} <= set(ALLOWED), f"a new subpackage needs a layer: {set(graph) - set(ALLOWED)}"
    upward = {(a, b) for a, targets in graph.items() for b in targets if b != ROOT and b not in ALLOWED.get(a, set())}
    assert not upward, f"upward imports: {sorted(upward)}"
    assert not graph.get(ROOT), "the package root must import none of its subpackages"


def test_no_cycle_between_subpackages():
    graph = import_graph()
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in graph.get(node, ()):
            assert state.get(nxt) != 1, f"import cycle: {' -> '.join([*path, node, nxt])}"
            if nxt not in state:
                visit(nxt, [*path, node])
        state[node] = 2

    for node in list(graph):
        if node not in state:
            visit(node, [])


def test_no_absolute_self_imports():
    """Inside the package every import of itself is relative (it runs as `src` here and `repbench` installed)."""
    bad = []
    for f in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(f.read_text())):
            names = [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
            names += [a.name for a in node.names] if isinstance(node, ast.Import) else []
            bad += [f"{f.relative_to(SRC)}: {n}" for n in names if n.split(".")[0] in ("src", "repbench", "callbacks")]
    assert not bad, bad


def _module_imports() -> dict[str, set[str]]:
    """{module: modules of src it imports} (dotted names relative to src; a package is its ``__init__``), from every
    relative import, module-level or inside a function."""
    graph: dict[str, set[str]] = {}
    for f in SRC.rglob("*.py"):
        parts = list(f.relative_to(SRC).with_suffix("").parts)
        package = parts[:-1]
        name = ".".join(package if parts[-1] == "__init__" else parts)
        deps = graph.setdefault(name, set())
        for node in ast.walk(ast.parse(f.read_text())):
            if not isinstance(node, ast.ImportFrom) or node.level == 0:
                continue
            target = package[: len(package) - (node.level - 1)] + (node.module.split(".") if node.module else [])
            for alias in node.names:
                is_module = (SRC.joinpath(*target, f"{alias.name}.py")).exists()
                deps.add(".".join([*target, alias.name] if is_module else target))
    return graph


def test_no_two_files_import_each_other():
    """A file cycle (a.py imports b.py, b.py imports a.py, even lazily) means their shared piece belongs in one of
    them (the DivergenceRadius compare.py <-> report.py cycle ended by moving the Report builders into report.py)."""
    graph = _module_imports()
    pairs = {tuple(sorted((a, b))) for a, deps in graph.items() for b in deps if a != b and a in graph.get(b, ())}
    assert not pairs, f"files importing each other: {sorted(pairs)}"


#: the method cores and the foundation packages below them (ALLOWED's lower layers): free of the frameworks
FRAMEWORK_FREE = (
    "utils",
    "images",
    "stats",
    "rng",
    "backbones",
    "features",
    "perturbations",
    "attacks",
    "synbench",
    "divergence_radius",
    "task_prior",
    "baselines",
)
FRAMEWORKS = frozenset({"lightning", "pytorch_lightning", "lightning_fabric", "torchmetrics", "hydra", "omegaconf"})
#: the entry points' plumbing in src/utils (Hydra's config and run folder, the CLIs' console lines, configs/data
#: through Hydra, Lightning's HParams and checkpoint IO, the end-of-run summary): imported only by train.py, eval.py
#: and the CLIs' __main__.py (test_cores_import_no_framework holds that no core or foundation module reaches them)
CLI_PLUMBING = frozenset(
    f"utils.{m}"
    for m in ("hydra_utils", "run_dir", "console", "data_tensors", "hparams", "checkpoint_io", "run_summary")
)


def _framework_imports(f: Path) -> list[str]:
    """``line: module`` of every import of a framework in ``f``, module-level or inside a function."""
    found = []
    for node in ast.walk(ast.parse(f.read_text())):
        names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
        names += [node.module or ""] if isinstance(node, ast.ImportFrom) and node.level == 0 else []
        found += [f"{node.lineno}: {n}" for n in names if n.split(".")[0] in FRAMEWORKS]
    return found


def _framework_free_modules() -> dict[str, Path]:
    """{dotted module name relative to src: file} of the FRAMEWORK_FREE packages, less their __main__ and
    CLI_PLUMBING."""
    out = {}
    for package in FRAMEWORK_FREE:
        for f in (SRC / package).rglob("*.py"):
            parts = list(f.relative_to(SRC).with_suffix("").parts)
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            if parts[-1] != "__main__" and name not in CLI_PLUMBING:
                out[name] = f
    return out


def test_cores_import_no_framework():
    """No module of a method core or a foundation package (outside __main__.py and CLI_PLUMBING) imports Lightning,
    torchmetrics, Hydra or OmegaConf, itself or through any module of src it imports (module-level or lazily)."""
    graph = _module_imports()
    files = {name: f for name, f in ((n, _module_file(n)) for n in graph) if f is not None}
    direct = {name for name, f in files.items() if _framework_imports(f)}
    bad = []
    for name, f in _framework_free_modules().items():
        bad += [f"{f.relative_to(SRC)} {hit}" for hit in _framework_imports(f)]
        seen, todo = {name}, [name]
        while todo:
            for dep in graph.get(todo.pop(), ()):
                if dep not in seen:
                    seen.add(dep)
                    todo.append(dep)
        bad += [f"{f.relative_to(SRC)} reaches {dep}" for dep in sorted((seen - {name}) & direct)]
    assert not bad, bad


def test_importing_the_cores_loads_no_framework():
    """The same seen from Python: importing every such module leaves Lightning, torchmetrics, Hydra and OmegaConf
    unloaded (a third-party library that pulled one in would show here)."""
    names = sorted(f"src.{n}" for n in _framework_free_modules())
    code = (
        "import importlib, sys\n"
        f"for n in {names!r}:\n    importlib.import_module(n)\n"
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({sorted(FRAMEWORKS)!r})))"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=SRC.parent, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]", f"loaded by importing the cores: {out.stdout}"


def _module_file(name: str) -> Path | None:
    """The file of a dotted module name relative to src (a package: its __init__.py)."""
    path = SRC.joinpath(*name.split(".")) if name else SRC
    for f in (path.with_suffix(".py"), path / "__init__.py"):
        if f.is_file():
            return f
    return None
