"""Every command line of README.md and docs/*.md is taken from the text and either run, composed or listed here with
the reason it is not run.

Which lines: each line of a ``bash``/``sh`` fence; in other fences (``text``, none) the lines that start with
``python``; in the prose, the inline spans that run ``python -m src.sweep_report``. Then:

* **run** (``python -m src.<cli>`` whose comment starts with "seconds", or with ``debug=fast``): for real, in the order
  of their document, from the repository root with ``REPBENCH_ROOT`` pointing at a temporary folder (the documented
  way to move ``logs/``); ``<run>`` in a later command stands for the newest run folder the earlier ones wrote (e.g.
  ``ckpt_path=logs/train/runs/<run>/...``). A line equal to one run earlier is run once.
* **debug sweep** (``-m hparams_search=<name> hydra.sweeper.n_trials=2 debug=fast``): tests/sweeps/test_debug_sweeps.py
  runs exactly that for every config of configs/hparams_search/; checked here, not run twice.
* **sweep report** (``python -m src.sweep_report ...``, whatever the fence): run on a multirun folder built here the
  way ``python -m src.train -m`` writes one, the placeholder (``<multirun dir>``, ``<sweep dir>``,
  ``logs/train/multiruns/<time>_<id>``) replaced by it.
* **composed** (any other ``python -m src.<cli>``): the config composes with exactly those overrides, for every job of
  a multirun (``-m a=1,2 b=x,y`` -> each combination), so a mistyped key or group fails here; :data:`COMPOSED` says
  why each one does not run (GPU, downloads, minutes-long defaults).
* **listed** (the rest: pip, make, benchmarks, ...): :data:`LISTED` says why; ``make <target>`` targets exist, the
  ``python -m benchmarks.<name>`` modules and the scripts exist.

A command line in none of these fails ``test_every_command_is_classified``, and so does a table entry no document
holds any more.
"""

from __future__ import annotations

import inspect
import itertools
import os
import re
import shlex
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.override_parser.overrides_parser import OverridesParser

from tests.docs.forkserver import shared_server
from tests.docs.markdown import DOCS, ROOT, SHELL, fences, inline_spans, rel

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
MULTIRUN_PLACEHOLDER = re.compile(r"(?:logs/\w+/multiruns/)?<[^<>]+>(?:_<[^<>]+>)*")
SEARCHES = sorted(p.stem for p in (ROOT / "configs" / "hparams_search").glob("*.yaml"))

# ---------------------------------------------------------------- why a command is not run
DEFAULT_RUN = "the default budget: minutes on 2 CPU cores (its debug=fast / smoke-run line runs)"
DEFAULT_TRAIN = "the main job (lite0 PGD probe): 1-5 min on 2 CPU cores; `python -m src.train debug=fast` runs"
REAL_WEIGHTS = "real backbones (lite0/1/2) at full size: minutes on 2 CPU cores; the smoke run with tiny nets runs"
SEVERAL_RUNS = "a multirun of full runs: many minutes; `python -m src.train -m debug=fast ...` runs a multirun"
MONITORED = "a training run with its monitors on (SynBench, DivergenceRadius, ...): minutes; the debug=fast line runs"
SWEEP = "a full Optuna sweep (8 trials: minutes to an hour); tests/sweeps/test_debug_sweeps.py runs its debug mode"
STUDY = "the monitoring study (36 runs, 12 min); its smoke run (docs/monitoring.md) runs"
RESUME = "resumes or evaluates a run of the main job (minutes); the Quickstart's debug=fast resume and eval run"
DOWNLOAD = "downloads weights or a data set (CI is offline)"
DATA = "needs a data set on disk that is not in the repository"
OFFICIAL = "the official budget or a paper preset: hours, with weights and data that are not offline"
REPORT_JOBS = (
    "the default report's 5 real backbones as jobs (minutes); tests/report/test_workers.py runs this launcher path and "
    "the page stage on 4 tiny backbones"
)
NATIVE_SIZES = (
    "a random-weight CLIP RN50 (text tower included) at its 224 px beside a tiny ViT: about a minute on 2 CPU cores; "
    "tests/divergence_radius/test_classifier_per_backbone.py runs the same paths with tiny nets"
)
SLURM = "submits jobs to a SLURM cluster (sbatch) with the official budget; the config composes with the launcher"

COMPOSED = {
    "HF_HUB_OFFLINE=1 .venv/bin/python -m src.train": DEFAULT_TRAIN,
    "python -m src.train": DEFAULT_TRAIN,
    "python -m src.train experiment=probe_digits": REAL_WEIGHTS,
    "python -m src.train model.epsilon=0.25 trainer.max_epochs=3 backbone=embedded_lite1": REAL_WEIGHTS,
    "python -m src.train model.epsilon=auto": DEFAULT_TRAIN,
    "python -m src.train -m model.epsilon=0,0.25,0.5": SEVERAL_RUNS,
    "python -m src.train ckpt_path=logs/train/runs/<run>/checkpoints/last.ckpt": RESUME,
    "python -m src.eval ckpt_path=logs/train/runs/<run>/checkpoints/last.ckpt eval.autoattack=true": RESUME,
    "python -m src.train data=cifar10 data.download=true backbone=timm_vit_b16": DOWNLOAD,
    "python -m src.synbench": REAL_WEIGHTS,
    "python -m src.synbench full=true": OFFICIAL,
    "python -m src.synbench 'rejection.data=[cifar10]'": DATA,
    "python -m src.synbench backbones=[embedded:efficientnet_lite0,timm:resnet50] +synbench.normalization=backbone": (
        DOWNLOAD
    ),
    "python -m src.train experiment=monitor_pretraining": MONITORED,
    "python -m src.train experiment=monitor_simclr": MONITORED,
    "python -m src.divergence_radius": REAL_WEIGHTS,
    "python -m src.train experiment=robust_finetune": REAL_WEIGHTS,
    "python -m src.train -m experiment=robust_finetune model.lam=0,1,10 seed=0,1": SEVERAL_RUNS,
    "python -m src.train experiment=task_prior": REAL_WEIGHTS,
    "python -m src.task_prior": REAL_WEIGHTS,
    "python -m src.task_prior prior_matrix=true": REAL_WEIGHTS,
    "python -m src.train experiment=monitor_pretraining callbacks=[default,task_prior]": MONITORED,
    "python -m src.report": REAL_WEIGHTS,
    "python -m src.report budgets.sizes=[2048,8192]": REAL_WEIGHTS,
    "python -m src.report report_preset=synbench_paper": OFFICIAL,
    "python -m src.report -m hydra/launcher=joblib hydra.launcher.n_jobs=2 stage=compute 'shard=range(0,5)'": REPORT_JOBS,
    "python -m src.report stage=page": REPORT_JOBS,
    "python -m src.report -m hydra/launcher=submitit_slurm hydra.launcher.gpus_per_node=1 hydra.launcher.timeout_min=120 "
    "stage=compute 'shard=range(0,5)' device=cuda full=true cache_dir=/shared/report_cache": SLURM,
    "python -m src.report stage=page full=true cache_dir=/shared/report_cache": SLURM,
    "python -m src.report report_preset=task_priors_paper": OFFICIAL,
    "python -m src.report report_preset=synbench_paper 'downstream.sets=[{option: cifar10, download: true}]'": OFFICIAL,
    "python -m src.report 'backbones=[{name:open_clip:ViT-B-16,pretrained:openai},{name:timm:vit_base_patch16_224}]' "
    "full=true downstream.sets=[cifar10] downstream.image_size=224 dr_image_size=224 tp_image_size=224": OFFICIAL,
    "python -m src.report 'parts=[synbench,baselines,divergence_radius,task_prior,downstream,depth]'": REAL_WEIGHTS,
    "python -m src.report 'parts=[depth]'": REAL_WEIGHTS,
    "python -m src.report 'parts=[depth]' 'depth_data={option: nyu_depth_v2, path: /data/nyu_depth_v2}' "
    "'depth_images={train: null, test: null}' depth_image_size=224 device=cuda": DATA,
    "python -m src.train -m hparams_search=pretraining_lr": SWEEP,
    "python -m src.train -m hparams_search=robust_finetune_pareto": SWEEP,
    "python -m src.train -m hparams_search=robust_probe_optuna": SWEEP,
    "python -m src.train -m hparams_search=pretraining_lr experiment=monitor_simclr optimized_metric=val/loss "
    "hydra.sweeper.direction=minimize hydra.sweeper.study_name=pretraining_lr_simclr": SWEEP,
    "python -m src.monitor_study": STUDY,
    "python -m src.train experiment=monitor_pretraining 'callbacks=[default,spectrum,collapse_alarm]'": MONITORED,
    "python -m src.train experiment=monitor_pretraining 'callbacks=[default,spectrum,collapse_alarm]' model.lr=1e-1 "
    "callbacks.collapse_alarm.stop=true": MONITORED,
    "python -m src.train 'callbacks=[default,select_synbench]'": MONITORED,
    "python -m src.train experiment=monitor_pretraining 'callbacks=[default,spectrum]'": MONITORED,
    "python -m src.train experiment=monitor_pretraining 'callbacks=[default,select_synbench]'": MONITORED,
    "python -m src.train experiment=monitor_pretraining 'callbacks=[default,select_tradeoff]'": MONITORED,
    "python -m src.train -m experiment=monitor_pretraining 'callbacks=[default,spectrum,task_prior,collapse_alarm]' "
    "model.lr=1e-1,2e-2,2e-3 seed=0,1 logger=csv callbacks.synbench.at_train_start=true "
    "callbacks.spectrum.at_train_start=true": SEVERAL_RUNS,
    "python -m src.divergence_radius 'backbones=[embedded:efficientnet_lite1]' n_test=400": REAL_WEIGHTS,
    "python -m src.divergence_radius task=depth": REAL_WEIGHTS,
    "python -m src.train experiment=depth_synthetic": REAL_WEIGHTS,
    "python -m src.divergence_radius task=depth 'backbones=[embedded:efficientnet_lite0]' "
    "head_checkpoint=logs/train/runs/<run>/checkpoints/last.ckpt": (
        "RMSE_p of the head trained by `python -m src.train experiment=depth_synthetic` (minutes); the smoke run and "
        "tests/divergence_radius/test_depth_cli.py run a checkpoint's head"
    ),
    "python -m src.divergence_radius task=depth data=nyu_depth_v2 data.path=/data/nyu_depth_v2 image_size=224 "
    "n_train=null n_test=null 'backbones=[{name: \"timm:vit_giant_patch14_dinov2.lvd142m\", img_size: 224}]'": DATA,
    "python -m src.divergence_radius 'backbones=[embedded:efficientnet_lite0,embedded:efficientnet_lite1]' "
    "divergence_radius.m=10": REAL_WEIGHTS,
    "python -m src.divergence_radius 'backbones=[{name: \"open_clip:ViT-B-32\", pretrained: laion2b_s34b_b79k}]' "
    "classifier=zero_shot": DOWNLOAD,
    "python -m src.divergence_radius data=imagefolder data.root=/data/food101/train data.test_root=/data/food101/test "
    "data.num_classes=101 image_size=224 'backbones=[{name: \"timm:vit_giant_patch14_dinov2.lvd142m\", img_size: 224}]'": DATA,
    'python -m src.divergence_radius \'backbones=[{name: "open_clip:RN50", pretrained: null},{name: "timm:test_vit", '
    "pretrained: false}]' classifier=auto image_size=native n_train=30 n_test=4 divergence_radius.m=1 "
    "'divergence_radius.perturbations=[brightness]'": NATIVE_SIZES,
    "python -m src.train experiment=robust_finetune 'callbacks=[default,downstream]' "
    "+data@callbacks.downstream.data=digits": REAL_WEIGHTS,
    "python -m src.train model=robust_finetune backbone=open_clip_vit_b32 data=digits data.image_size=224 test=true "
    "optimized_metric=val/utility callbacks.model_checkpoint=null": DOWNLOAD,
}

PIP = "installs packages from PyPI (network); the wheel's install is tested offline in tests/test_packaging.py"
SUITE = "runs this test suite"
BENCHMARK = "a timing benchmark (minutes of interleaved repeats); the module exists (test_benchmark_module_exists)"
LISTED = {
    "make train": "runs the main job (minutes); the target exists (test_make_target_exists), the job composes",
    "make test": SUITE,
    "HF_HUB_OFFLINE=1 .venv/bin/python -m pytest -q": SUITE,
    "python3 -m venv .venv": "creates the environment this suite runs in",
    ".venv/bin/pip install -c constraints.txt torch==2.14.1 torchvision==0.29.1": PIP,
    '.venv/bin/pip install -c constraints.txt -e ".[dev]"': PIP,
    ".venv/bin/pip install -c constraints.txt torch==2.14.1 torchvision==0.29.1 --index-url "
    "https://download.pytorch.org/whl/cpu": PIP,
    "pip install -c constraints.txt /path/to/repbench": PIP,
    "tensorboard --logdir logs/train/multiruns": "starts a server that runs until stopped",
    "python docs/figures/robust_finetune_lambda.py logs/train/multiruns/<run>": (
        "reads the TensorBoard events of the 6-run lambda sweep above (many minutes; debug runs log CSV without the "
        "DivergenceRadius monitor it plots); the script exists"
    ),
    "python -m benchmarks.engine --part forward [--compile] [--autocast bf16]": BENCHMARK,
    "python -m benchmarks.engine --part allocator": BENCHMARK,
    "python -m benchmarks.engine --part synbench": BENCHMARK,
    "python -m benchmarks.engine --part scores": BENCHMARK,
    "python -m benchmarks.probe --part channels_last": BENCHMARK,
    "python -m src.sweep_report": "named in prose, without a folder to read",
}


# ---------------------------------------------------------------- the command lines of the documents
@dataclass(frozen=True)
class Command:
    doc: str
    line: int
    fence: str  # the fence's language, "" for none, "inline" for a span in the prose
    code: str  # as written, without the comment, whitespace collapsed (the key of COMPOSED / LISTED)
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

    @property
    def search(self) -> str | None:
        return next((o.split("=", 1)[1] for o in self.overrides if o.startswith("hparams_search=")), None)

    def __str__(self) -> str:
        return f"{self.doc}:{self.line}: {self.code}"


def _command(doc: str, line: int, fence: str, raw: str) -> Command | None:
    words = shlex.split(raw, comments=True)
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        words = words[1:]
    if not words:
        return None
    code, _, comment = raw.partition(" #")
    return Command(doc, line, fence, " ".join(code.split()), tuple(words), comment.strip())


def _commands(doc: Path) -> list[Command]:
    out = []
    for fence in fences(doc):
        lines = fence.text.split("\n")
        i = 0
        while i < len(lines):
            start, raw = i, lines[i]
            while raw.endswith("\\") and i + 1 < len(lines):  # a continued line
                i += 1
                raw = raw[:-1] + " " + lines[i]
            i += 1
            if fence.lang not in SHELL and not re.match(r"\s*python3? ", raw):
                continue  # console output, a config excerpt
            cmd = _command(rel(doc), fence.line + start, fence.lang, raw)
            if cmd is not None:
                out.append(cmd)
    for line, span in inline_spans(doc):
        if span.startswith("python -m src.sweep_report"):
            out.append(_command(rel(doc), line, "inline", span))
    return out


COMMANDS = [c for doc in DOCS for c in _commands(doc)]


def _same_run(cmd: Command) -> Command | None:
    """The earlier run command of the same words (and no ``<run>``: its meaning depends on what ran before)."""
    if PLACEHOLDER.search(cmd.code):
        return None
    return next(
        (c for c in RUN if c.argv == cmd.argv and c is not cmd and COMMANDS.index(c) < COMMANDS.index(cmd)), None
    )


def _kind(cmd: Command) -> str:
    if cmd.module == "src.sweep_report" and len(cmd.argv) > 3:
        return "sweep report"
    if cmd.fast and cmd.search is not None:
        return "debug sweep"
    if cmd.fast:
        return "run"
    if cmd.code in LISTED:
        return "listed"
    if cmd.module in CLI_CONFIGS and cmd.code in COMPOSED:
        return "composed"
    return "unclassified"


RUN = [c for c in COMMANDS if _kind(c) == "run"]
RUN_ONCE = [c for c in RUN if _same_run(c) is None]
SWEEP_REPORTS = [c for c in COMMANDS if _kind(c) == "sweep report"]
CLI = [c for c in COMMANDS if c.module in CLI_CONFIGS]


def test_the_documents_hold_commands():
    assert len(COMMANDS) >= 80
    assert len(CLI) >= 60 and len(RUN) >= 12 and len(SWEEP_REPORTS) >= 5
    assert {c.fence for c in SWEEP_REPORTS} >= {"text", "inline"}


@pytest.mark.parametrize("doc", DOCS, ids=rel)
def test_every_fence_is_read(doc: Path):
    """An indented or unclosed fence would hide its commands from every test here."""
    marks = [ln for ln in doc.read_text().splitlines() if ln.lstrip().startswith("```")]
    assert len(marks) == 2 * len(fences(doc)), f"{rel(doc)}: {len(marks)} fence lines, {len(fences(doc))} fences read"


def test_every_command_is_classified():
    """Run, composed, or listed with its reason: a new command line fails here until it is one of them."""
    unclassified = [str(c) for c in COMMANDS if _kind(c) == "unclassified"]
    assert not unclassified, "add each to COMPOSED or LISTED with its reason, or make it run:\n" + "\n".join(
        unclassified
    )
    codes = {c.code for c in COMMANDS}
    stale = sorted((set(COMPOSED) | set(LISTED)) - codes)
    assert not stale, f"no document holds these any more: {stale}"
    both = sorted(set(COMPOSED) & set(LISTED))
    assert not both, both
    ran_anyway = [str(c) for c in COMMANDS if _kind(c) in ("run", "debug sweep") and c.code in {*COMPOSED, *LISTED}]
    assert not ran_anyway, f"these run: take them out of COMPOSED / LISTED: {ran_anyway}"
    non_cli = [k for k in COMPOSED if _command("", 0, "", k).module not in CLI_CONFIGS]
    assert not non_cli, f"COMPOSED holds Hydra CLIs only: {non_cli}"


def test_every_sweep_runs_in_debug_mode_in_its_own_test():
    """tests/sweeps/test_debug_sweeps.py runs ``-m hparams_search=<name> hydra.sweeper.n_trials=2 debug=fast`` for each
    config of configs/hparams_search/; the documents' sweeps are among them and their debug lines are that command."""
    from tests.sweeps import test_debug_sweeps as debug_sweeps

    test = debug_sweeps.test_every_sweep_runs_in_debug_mode
    (params,) = [m.args for m in test.pytestmark if m.name == "parametrize"]
    assert params[0] == "name" and list(params[1]) == SEARCHES and SEARCHES, params
    assert not [m for m in test.pytestmark if m.name in ("skip", "skipif", "xfail")]
    assert '"hydra.sweeper.n_trials=2", "debug=fast")' in inspect.getsource(test)
    documented = {c.search for c in COMMANDS if c.search is not None}
    assert documented and documented <= set(SEARCHES), documented - set(SEARCHES)
    for cmd in [c for c in COMMANDS if _kind(c) == "debug sweep"]:
        assert cmd.argv[3] == "-m", cmd
        assert sorted(cmd.overrides) == sorted(
            [f"hparams_search={cmd.search}", "hydra.sweeper.n_trials=2", "debug=fast"]
        )


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


@pytest.mark.parametrize("cmd", CLI, ids=str)
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


@pytest.mark.parametrize("cmd", [c for c in COMMANDS if c.argv[0] == "python" and c.argv[1].endswith(".py")], ids=str)
def test_script_exists(cmd: Command):
    assert (ROOT / cmd.argv[1]).is_file()


@pytest.mark.slow
@pytest.mark.timeout(1200)
@pytest.mark.parametrize("doc", sorted({c.doc for c in RUN_ONCE}))
def test_fast_commands_run_as_written(doc: str, tmp_path):
    # one torch thread: tiny models, and a 2-thread pool spins on a busy 2-core machine (tests/sweeps/test_debug_sweeps.py)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "REPBENCH_ROOT": str(tmp_path), "OMP_NUM_THREADS": "1"}
    for cmd in [c for c in RUN_ONCE if c.doc == doc]:
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


# ---------------------------------------------------------------- python -m src.sweep_report
# A multirun folder as `python -m src.train -m experiment=robust_finetune model.lam=...` writes it (one folder per job:
# .hydra/overrides.yaml, metrics.json through the writer src.train uses), with the robust fine-tuning trade-off's
# numbers (docs/sweep_report.md) and every metric the documented reports name; job 4 was killed (no metrics.json).
# (model.lam, val/utility, val/divergence_radius/mean, val/synbench/score, val/downstream/linear_acc)
TRIALS = [("0", 0.50, 0.007, 0.60, 0.942), ("1", 0.87, 0.19, 0.72, 0.955), ("10", 0.93, 0.23, 0.75, 0.958)]
TRIALS += [("3", 0.85, 0.25, 0.70, 0.950)]  # dominated by lam=1 on every pair of metrics


@pytest.fixture(scope="session")
def multirun(tmp_path_factory) -> Path:
    from src.utils.run_summary import write_summary

    root = tmp_path_factory.mktemp("multiruns") / "2026-11-27_10-00-00_abc123"
    for num, (lam, utility, r_dr, synbench, linear_acc) in enumerate([*TRIALS, ("30", None, None, None, None)]):
        job = root / f"{num}_model.lam-{lam}"
        (job / ".hydra").mkdir(parents=True)
        overrides = ["experiment=robust_finetune", f"model.lam={lam}"]
        (job / ".hydra" / "overrides.yaml").write_text(yaml.safe_dump(overrides))
        if utility is not None:
            metrics = {"val/utility": utility, "val/divergence_radius/mean": r_dr, "val/synbench/score": synbench}
            metrics["val/downstream/linear_acc"] = linear_acc
            write_summary(job, metrics, {"run_dir": str(job), "overrides": overrides, "pruned_epoch": None})
    return root


@pytest.mark.timeout(300)
@pytest.mark.parametrize("cmd", SWEEP_REPORTS, ids=str)
def test_sweep_report_command_runs(cmd: Command, multirun: Path, tmp_path):
    folder = shutil.copytree(multirun, tmp_path / multirun.name)
    code, n = MULTIRUN_PLACEHOLDER.subn(str(folder), cmd.code)
    assert n == 1, f"{cmd}: expected one multirun folder placeholder, found {n}"
    argv = shlex.split(code)
    assert argv[:3] == ["python", "-m", "src.sweep_report"], argv
    status, output = shared_server().run(tmp_path, module="src.sweep_report", argv=argv[3:], timeout=280)
    assert status == 0, f"{cmd}\n{output[-3000:]}"
    written = {p.name for p in (folder / "sweep_report").iterdir()}
    assert written >= {"sweep_report.md", "sweep_report.csv", "sweep_report.json", "pareto.png"}, written
