"""What a person sees on the console (issue 25): a ``debug=fast`` train run and the ``src.eval`` of its checkpoint print
RepBench's own lines only (no third-party advertisement or warning), say what runs before any slow step, end with
the same Rich summary, and write ``summary.md``; ``python src/train.py`` works as in lightning-hydra-template."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: what a RepBench run must never print: third-party advertisements, warnings, the whole config as YAML
NOISE = re.compile(r"💡|Tip:|litlogger|litmodels|warning|deprecated|LeafSpec|_target_:", re.IGNORECASE)


def _run(args: list[str], root: Path, cwd: Path = ROOT) -> str:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "REPBENCH_ROOT": str(root), "COLUMNS": "80"}
    env.pop("PYTHONWARNINGS", None)
    done = subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        timeout=420,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:]
    return done.stdout


def _repbench_lines(out: str) -> list[str]:
    return [line.split("[repbench][INFO] - ", 1)[1] for line in out.splitlines() if "[repbench][INFO] - " in line]


@pytest.fixture(scope="module")
def train_run(tmp_path_factory) -> tuple[str, Path]:
    root = tmp_path_factory.mktemp("console")
    out = _run(["-m", "src.train", "debug=fast"], root)
    (run_dir,) = (root / "logs" / "train" / "runs").iterdir()
    return out, run_dir


@pytest.mark.timeout(900)
def test_a_debug_run_prints_repbench_lines_only_and_says_what_runs_first(train_run) -> None:
    out, run_dir = train_run
    assert not NOISE.findall(out), out
    first = out.lstrip().splitlines()[0]
    assert "[repbench][INFO] - RepBench train → " in first, out  # nothing (no YAML, no Lightning line) before it
    lines = _repbench_lines(out)
    assert lines[0].startswith(f"RepBench train → {run_dir}") and "--cfg job --resolve" in lines[0]
    assert lines[1] == (
        "RobustLinearProbe · backbone timm:test_efficientnet · DigitsDataModule 16 px · 1 epoch · seed 0 · "
        "overrides: debug=fast"
    )
    # before the slow steps: building the model, fitting, testing, each announced before it starts
    assert lines[2] == "building DigitsDataModule and RobustLinearProbe (backbone timm:test_efficientnet)"
    assert lines.index("fit: up to 1 epoch(s)") < lines.index("test: best checkpoint epoch_000.ckpt")
    assert lines[-1] == f"summary.md and metrics.json in {run_dir}"
    assert "RepBench train" in out and "│ val/acc " in out  # the Rich summary table
    assert (run_dir / "summary.md").is_file() and (run_dir / "metrics.json").is_file()
    log = (run_dir / "train.log").read_text()
    assert "resolved config:" in log and "_target_: repbench.models.RobustLinearProbe" in log


@pytest.mark.timeout(900)
def test_eval_ends_with_the_same_summary_and_writes_summary_md(train_run) -> None:
    _, run_dir = train_run
    root = run_dir.parents[3]
    out = _run(["-m", "src.eval", "debug=fast", f"ckpt_path={run_dir / 'checkpoints' / 'last.ckpt'}"], root)
    assert not NOISE.findall(out), out
    assert "DataLoader 0" not in out  # Lightning's own test table: replaced by RepBench's summary
    (eval_dir,) = (root / "logs" / "eval" / "runs").iterdir()
    lines = _repbench_lines(out)
    assert (
        lines[0].startswith(f"RepBench eval → {eval_dir}") and lines[-1] == f"summary.md and metrics.json in {eval_dir}"
    )
    assert "RepBench eval" in out and "│ test/adv/acc_pgd10_l2_0p05 " in out
    summary = (eval_dir / "summary.md").read_text()
    assert "| `test/acc` |" in summary and "RobustLinearProbe" in summary


@pytest.mark.timeout(300)
def test_python_src_train_py_runs_as_a_script_from_anywhere(tmp_path) -> None:
    """lightning-hydra-template's habit: the script puts the repository root on sys.path itself (as rootutils)."""
    out = _run([str(ROOT / "src" / "train.py"), "debug=fast", "--cfg", "job"], tmp_path, cwd=tmp_path)
    assert "_target_: repbench.models.RobustLinearProbe" in out and "timm:test_efficientnet" in out


TINY_NET = "backbones=[{name:timm:test_efficientnet,pretrained:false}]"
COMPARISONS = {
    "synbench": [TINY_NET, "input_size=16", "reduced.s_values=[1.0,3.0]", "reduced.n_train=64", "reduced.n_test=32",
                 "synbench.eps=[0.0,0.4]", "synbench.a_T=[0.7]"],
    "task_prior": [TINY_NET, "task_prior.prior_backbone={name:timm:test_efficientnet,pretrained:false}",
                   "task_prior.num_tasks=4", "task_prior.epochs=5", "data.num_images=40", "data.image_size=16"],
}  # fmt: skip


@pytest.mark.parametrize("cli", sorted(COMPARISONS))
def test_a_comparison_cli_says_what_runs_first_and_prints_repbench_lines_only(cli, tmp_path) -> None:
    """The comparison CLIs open as every RepBench CLI does (the run folder, then the backbones, the run's seed and the
    overrides) and print no third-party noise (``python -m src.task_prior`` lacked both before)."""
    out = _run(["-m", f"src.{cli}", *COMPARISONS[cli], f"hydra.run.dir={tmp_path}"], tmp_path)
    lines = _repbench_lines(out)
    assert lines[0].startswith(f"RepBench {cli} → ") and "seed 0" in lines[1], lines[:2]
    noise = [line for line in out.splitlines() if NOISE.search(line) and "No CUDA runtime" not in line]
    assert not noise, noise
