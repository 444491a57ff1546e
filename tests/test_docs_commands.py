"""Every shell command in README.md and docs/*.md is taken from the text and checked as written.

* ``python -m src.<cli> ...`` (train, eval, synbench, divergence_radius, task_prior, report): the config composes with exactly those
  overrides, for every job of a multirun (``-m a=1,2 b=x,y`` -> each combination). A mistyped key or group fails here.
* Commands with ``debug=fast`` or a comment starting with "seconds" run for real, in the order of their document, from the repository root
  with ``REPBENCH_ROOT`` pointing at a temporary folder (the documented way to move ``logs/``); ``<run>`` in a later
  command stands for the newest run folder the earlier ones wrote (e.g. ``ckpt_path=logs/train/runs/<run>/...``).
* ``make <target>``: the target exists in the Makefile. ``python -m benchmarks.<name>``: the module exists.
"""

from __future__ import annotations

import itertools
import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CLI_CONFIGS = {
    "src.train": "train.yaml",
    "src.eval": "eval.yaml",
    "src.synbench": "synbench.yaml",
    "src.divergence_radius": "divergence_radius.yaml",
    "src.task_prior": "task_prior.yaml",
    "src.report": "report.yaml",
    "src.monitor_study": "monitor_study.yaml",
}
PLACEHOLDER = re.compile(r"logs/(\w+)/(runs|multiruns)/<run>")
_BLOCK = re.compile(r"```(?:bash|sh|shell)\n(.*?)```", re.S)


@dataclass(frozen=True)
class Command:
    doc: str
    line: str
    argv: tuple[str, ...]  # without leading VAR=value assignments
    comment: str = ""

    @property
    def module(self) -> str | None:
        argv = self.argv
        if len(argv) >= 3 and Path(argv[0]).name.startswith("python") and argv[1] == "-m":
            return argv[2]
        return None

    @property
    def overrides(self) -> list[str]:
        return [a for a in self.argv[3:] if a not in ("-m", "--multirun")]

    @property
    def fast(self) -> bool:
        return self.module in CLI_CONFIGS and ("debug=fast" in self.argv or self.comment.startswith("seconds"))

    def __str__(self) -> str:
        return f"{self.doc}: {self.line}"


def _commands(doc: Path) -> list[Command]:
    out = []
    for block in _BLOCK.findall(doc.read_text()):
        for raw in block.replace("\\\n", " ").splitlines():
            words = shlex.split(raw, comments=True)
            while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
                words = words[1:]
            if words:
                code, _, comment = raw.partition(" #")
                out.append(Command(doc.name, code.strip(), tuple(words), comment.strip()))
    return out


COMMANDS = [c for doc in DOCS for c in _commands(doc)]


def _jobs(overrides: list[str]) -> list[list[str]]:
    """One override list per job of a Hydra basic sweep (the cartesian product of the sweep values)."""
    parsed = OverridesParser.create().parse_overrides(overrides)
    choices = []
    for text, o in zip(overrides, parsed):
        if o.is_sweep_override():
            key = o.get_key_element()
            choices.append([f"{key}={v}" for v in o.sweep_string_iterator()])
        else:
            choices.append([text])
    return [list(c) for c in itertools.product(*choices)]


def test_the_documents_hold_commands():
    assert sum(c.module in CLI_CONFIGS for c in COMMANDS) >= 20
    assert sum(c.fast for c in COMMANDS) >= 3


@pytest.mark.parametrize("cmd", [c for c in COMMANDS if c.module in CLI_CONFIGS], ids=str)
def test_cli_command_composes(cmd: Command):
    overrides = [PLACEHOLDER.sub(r"logs/\1/\2/RUN", o) for o in cmd.overrides]
    GlobalHydra.instance().clear()
    with initialize_config_dir(version_base="1.3", config_dir=str(ROOT / "configs")):
        for job in _jobs(overrides):
            compose(config_name=CLI_CONFIGS[cmd.module], overrides=job)


@pytest.mark.parametrize("cmd", [c for c in COMMANDS if c.argv[0] == "make"], ids=str)
def test_make_target_exists(cmd: Command):
    targets = re.findall(r"^([\w-]+):", (ROOT / "Makefile").read_text(), re.M)
    assert all(t in targets for t in cmd.argv[1:] if "=" not in t), targets


@pytest.mark.parametrize("cmd", [c for c in COMMANDS if (c.module or "").startswith("benchmarks.")], ids=str)
def test_benchmark_module_exists(cmd: Command):
    assert (ROOT / (cmd.module.replace(".", "/") + ".py")).is_file()


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("doc", sorted({c.doc for c in COMMANDS if c.fast}))
def test_fast_commands_run_as_written(doc: str, tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "REPBENCH_ROOT": str(tmp_path)}
    for cmd in [c for c in COMMANDS if c.doc == doc and c.fast]:
        argv = []
        for word in cmd.argv:
            match = PLACEHOLDER.search(word)
            if match:
                runs = sorted(
                    (tmp_path / "logs" / match.group(1) / match.group(2)).iterdir(), key=lambda p: p.stat().st_mtime
                )
                word = PLACEHOLDER.sub(str(runs[-1]), word)
            argv.append(word)
        argv[0] = sys.executable
        done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
        assert done.returncode == 0, f"{cmd}\n{done.stderr[-3000:]}"
