"""RepBench as an installed package: one import name (`repbench`), configs inside it, console scripts, usable beside a
researcher's own project that has its own ``src`` package (the lightning-hydra-template layout)."""

from __future__ import annotations

import subprocess
import textwrap
import zipfile
from pathlib import Path

import pytest

tomllib = pytest.importorskip("tomllib")  # Python >= 3.11

ROOT = Path(__file__).resolve().parents[1]


def _pyproject() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def test_package_list_covers_the_tree_exactly():
    """Every folder of src/ with an __init__.py is listed as repbench.<folder> (a new subpackage can't be left out of
    the wheel), plus the configs data package."""
    listed = set(_pyproject()["tool"]["setuptools"]["packages"])
    tree = {
        ".".join(("repbench", *p.parent.relative_to(ROOT / "src").parts)) for p in (ROOT / "src").rglob("__init__.py")
    }
    assert listed == tree | {"repbench.configs", "hydra_plugins.repbench_sweeper"}


def test_repository_alias_gives_the_same_modules():
    """In the repository, `repbench.X` (configs' targets) is the module `src.X` itself, not a second copy."""
    import repbench.callbacks
    import repbench.models.robust_probe
    import src.callbacks
    import src.models.robust_probe

    assert repbench.models.robust_probe is src.models.robust_probe
    assert repbench.callbacks.SynBenchCallback is src.callbacks.SynBenchCallback
    module = src.models.robust_probe
    assert module.__spec__.name == module.__name__  # the alias leaves the real module's spec alone


def test_checkpoint_class_keys_are_canonical():
    """Checkpoints record `repbench.` names whichever way the package was imported; older `src.` keys still load."""
    from src.models import RobustLinearProbe
    from src.utils.checkpoint import canonical_class_key, class_key

    assert class_key(RobustLinearProbe) == "repbench.models.robust_probe:RobustLinearProbe"
    assert canonical_class_key("src.models.robust_probe:RobustLinearProbe") == class_key(RobustLinearProbe)


@pytest.mark.slow
def test_wheel_holds_one_package_with_its_configs(wheel):
    names = zipfile.ZipFile(wheel).namelist()
    # repbench, and RepBench's Optuna sweeper where Hydra looks for plugins (hydra_plugins/repbench_sweeper only)
    assert {n.split("/")[0] for n in names} == {"repbench", "hydra_plugins", f"{wheel.name.split('-py3')[0]}.dist-info"}
    assert {n.split("/")[1] for n in names if n.startswith("hydra_plugins/")} == {"repbench_sweeper"}
    yamls = {n.removeprefix("repbench/configs/") for n in names if n.endswith(".yaml")}
    assert yamls == {str(p.relative_to(ROOT / "configs")) for p in (ROOT / "configs").rglob("*.yaml")}
    assert "repbench/train.py" in names and "repbench/callbacks/synbench_callback.py" in names
    csvs = {n.removeprefix("repbench/report/data/") for n in names if n.endswith(".csv")}
    assert csvs == {p.name for p in (ROOT / "src" / "report" / "data").glob("*.csv")}  # downstream.external tables
    entry_points = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    for script in (
        "repbench-train",
        "repbench-eval",
        "repbench-synbench",
        "repbench-divergence-radius",
        "repbench-task-prior",
        "repbench-report",
    ):
        assert script in entry_points


_USER_MODEL = '''
import lightning as L, torch
from torch import nn


class TinyModule(L.LightningModule):
    """The user's own module: any LightningModule exposing .backbone."""

    def __init__(self):
        super().__init__()
        self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3, 2), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.head = nn.Linear(8, 2)

    def training_step(self, batch, i):
        x, y = batch
        return nn.functional.cross_entropy(self.head(self.backbone(x)), y)

    def validation_step(self, batch, i):
        pass

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.1)
'''

_USER_SCRIPT = """
import json, sys
import lightning as L, torch
import src                                   # the user's own package, not RepBench's
from src.model import TinyModule
from repbench.callbacks import DivergenceRadiusCallback
import repbench

assert src.__file__.startswith(sys.argv[1]), src.__file__
assert "site-packages" in repbench.__file__, repbench.__file__
x = torch.rand(8, 3, 32, 32)
data = torch.utils.data.TensorDataset(x, torch.randint(0, 2, (8,)))
loader = torch.utils.data.DataLoader(data, batch_size=4)
cb = DivergenceRadiusCallback(num_images=4, image_size=32, m=2, perturbations=["brightness"], log_figure=False,
                              source="photos")
trainer = L.Trainer(max_epochs=1, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                    enable_model_summary=False, callbacks=[cb])
trainer.fit(TinyModule(), loader, loader)
print(json.dumps({"repbench": repbench.__file__, "metrics": sorted(trainer.callback_metrics)}))
"""


@pytest.mark.slow
def test_wheel_in_a_fresh_venv_beside_a_project_with_its_own_src(installed_repbench, tmp_path):
    """pip-install the wheel into a new venv; a dummy project with its own `src` package uses a RepBench callback in
    its own Trainer, and the console script trains from the configs shipped inside the package."""
    py, site, env = installed_repbench
    venv = py.parent.parent
    project = tmp_path / "my_project"
    (project / "src").mkdir(parents=True)
    (project / "src" / "__init__.py").write_text("")
    (project / "src" / "model.py").write_text(textwrap.dedent(_USER_MODEL))
    (project / "run.py").write_text(textwrap.dedent(_USER_SCRIPT))
    done = subprocess.run(
        [py, "run.py", str(project)], cwd=project, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]
    import json

    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["repbench"].startswith(str(site))
    assert "val/divergence_radius/mean" in report["metrics"]

    # every `from repbench... import ...` line of README's and docs' examples works from the installed package
    imports = sorted(
        {
            line.split("#")[0].strip()
            for doc in [ROOT / "README.md", *(ROOT / "docs").glob("*.md")]
            for line in doc.read_text().splitlines()
            if line.startswith("from repbench") and "(" not in line
        }
    )
    assert len(imports) >= 8
    done = subprocess.run(
        [py, "-c", "\n".join(imports)], cwd=project, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr[-3000:]

    script = venv / "bin" / "repbench-train"
    done = subprocess.run(
        [script, "debug=fast", "trainer.max_epochs=1"],
        cwd=project,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    (summary,) = (project / "logs" / "train" / "runs").glob("*/metrics.json")
    assert json.loads(summary.read_text())["metrics"]["val/acc"] >= 0.0
