"""One report, many processes (issue 27, item 3; src/report/jobs.py): two local workers (Hydra's joblib launcher) over
4 tiny backbones, then ``stage=page``, give exactly the one-process report; the page stage computes nothing and, with
an entry missing, fails naming it before writing anything; a worker killed mid-backbone leaves no partial entry and
the next run computes only that backbone's missing parts; the GPU rule of a sharded job.

Compared between the one-process report and the merged one: every value of report.json (its ``values``, ``rows``,
``agreement``, ``budget_choices`` and ``config``), report.csv and agreement.csv, except what measures the run rather
than the backbones — the wall-clock seconds (``timings`` of SynBench, ``seconds`` of the baselines, the ``time_*_s``
columns and report.json's ``seconds``) and which parts came from the cache (``cached``: all of them for the page).
Both sides run with one torch thread (``OMP_NUM_THREADS=1``; joblib's workers would otherwise get fewer threads than
the one process, and a float sum in another order is another number in the last bit)."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.cli.conftest import compose_cfg
from tests.report.test_report_cli import TINY as REPORT_TINY

ROOT = Path(__file__).resolve().parents[2]
TINY = [o for o in REPORT_TINY if not o.startswith("progress=")]  # the CLI test's tiny settings; progress shown
LABELS = ["timm:test_efficientnet", "timm:test_vit", "timm:test_resnet", "timm:resnet10t"]


def _nets(labels: list[str]) -> str:
    return "backbones=[" + ",".join(f"{{name:{n},pretrained:false}}" for n in labels) + "]"


NETS = _nets(LABELS)
PARTS = ["synbench", "baselines", "divergence_radius", "task_prior", "downstream"]
TIMING_KEYS = {"timings", "seconds"}


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "src.report", *args]


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1", "REPBENCH_ROOT": str(tmp_path)}


def _untimed(value):
    if isinstance(value, dict):
        return {k: _untimed(v) for k, v in value.items() if k not in TIMING_KEYS and not re.fullmatch(r"time_.*_s", k)}
    if isinstance(value, list):
        return [_untimed(v) for v in value]
    return value


def _rows(path: Path) -> list[dict[str, str]]:
    return [{k: v for k, v in r.items() if not re.fullmatch(r"time_.*_s", k)} for r in csv.DictReader(open(path))]


def _forbid_computation(monkeypatch) -> None:
    """Any audit part, probe or backbone forward (nn.Module call) raises from here on."""
    import torch

    def refuse(*args, **kwargs):
        raise AssertionError("stage=page computed something")

    for name in ("synbench_run", "baselines_run", "divergence_radius_run", "task_prior_run"):
        monkeypatch.setattr(f"src.methods.audit_parts.{name}", refuse)
    monkeypatch.setattr("src.report.audit.part_downstream", refuse)
    monkeypatch.setattr("src.features.FeatureExtractor.__call__", refuse)
    monkeypatch.setattr(torch.nn.Module, "__call__", refuse)


def _page_cfg(tmp_path: Path, cache: Path, out: Path, *extra: str):
    cfg = compose_cfg("report.yaml", [NETS, *TINY, "progress=false", *extra], tmp_path)
    cfg.cache_dir = str(cache)
    cfg.paths.output_dir = str(out)
    return cfg


def _entries(cache: Path) -> dict[str, list[Path]]:
    """{part: its entry files}, each checked to be a complete entry of that part (parses; value of its shape)."""
    from src.report.audit import check_cached_entry

    out: dict[str, list[Path]] = {}
    for path in sorted(cache.glob("*/*.json")):
        entry = json.loads(path.read_text())
        assert entry["key"]["part"] == path.parent.name
        check_cached_entry(path.parent.name, entry["value"])
        out.setdefault(path.parent.name, []).append(path)
    return out


@pytest.mark.timeout(300)
def test_two_local_workers_give_exactly_the_one_process_report(tmp_path, monkeypatch) -> None:
    # the one-process report and the two workers (one joblib job per backbone) at the same time: 2 cores, 3 processes
    one = subprocess.Popen(
        _cli(NETS, *TINY, f"cache_dir={tmp_path / 'one_cache'}", f"hydra.run.dir={tmp_path / 'one'}"),
        cwd=ROOT, env=_env(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    sweep = tmp_path / "sweep"
    workers = subprocess.run(
        _cli("-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=2", "stage=compute", "shard=range(0,4)",
             NETS, *TINY, f"cache_dir={tmp_path / 'cache'}", f"hydra.sweep.dir={sweep}"),
        cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True, timeout=280,
    )  # fmt: skip
    one_out = one.communicate(timeout=280)[0]
    assert workers.returncode == 0, workers.stderr[-3000:]
    assert one.returncode == 0, one_out[-3000:]

    # one folder and one readable log per job; each job computed its own backbone and wrote no page
    logs = sorted(sweep.glob("*/report.log"))
    assert len(logs) == 4 and len({p.parent for p in logs}) == 4
    for shard, label in enumerate(LABELS):
        (log,) = [p for p in logs if p.parent.name.startswith(f"{shard}_")]
        assert f"Computed 1 backbone(s) ({label}) into cache_dir={tmp_path / 'cache'}" in log.read_text()
        assert "stage=page" in log.read_text()
    assert not list(sweep.rglob("report.json"))
    assert {part: len(files) for part, files in _entries(tmp_path / "cache").items()} == dict.fromkeys(PARTS, 4)

    # the merge step: the page from the cache, with every computation refused
    from src.report.__main__ import run

    _forbid_computation(monkeypatch)
    run(_page_cfg(tmp_path, tmp_path / "cache", tmp_path / "page", "stage=page"))
    merged, single = tmp_path / "page", tmp_path / "one"
    a, b = (json.loads((d / "report.json").read_text()) for d in (single, merged))
    assert set(a) == set(b)
    for key in set(a) - {"seconds", "cached"}:
        assert _untimed(a[key]) == _untimed(b[key]), key
    assert all(all(v.values()) for v in b["cached"].values()) and not any(any(v.values()) for v in a["cached"].values())
    assert _rows(single / "report.csv") == _rows(merged / "report.csv")
    assert (single / "agreement.csv").read_text() == (merged / "agreement.csv").read_text()
    assert [r["backbone"] for r in csv.DictReader(open(merged / "report.csv"))] == sorted(
        LABELS, key=[r["backbone"] for r in csv.DictReader(open(single / "report.csv"))].index
    )


@pytest.mark.timeout(300)
def test_the_page_computes_nothing_and_a_missing_entry_fails_naming_it(tmp_path, monkeypatch) -> None:
    from src.report.__main__ import run
    from src.report.jobs import MissingEntries

    def report(out: str, *overrides: str) -> str:  # 2 backbones; task_prior: the prior's forward is its run's only
        cfg = _page_cfg(tmp_path, tmp_path / "cache", tmp_path / out, "parts=[synbench,task_prior,downstream]",
                        _nets(LABELS[:2]), *overrides)  # fmt: skip
        return run(cfg)

    done = report("compute", "stage=compute")
    assert "cache: 0 reused, 6 computed" in done and "stage=page" in done
    assert not list((tmp_path / "compute").glob("report*"))

    with monkeypatch.context() as m:
        _forbid_computation(m)
        report("page", "stage=page")
        assert (tmp_path / "page" / "report.html").is_file()
        (gone,) = [p for p in _entries(tmp_path / "cache")["task_prior"] if p.name.startswith(_fp(1))]
        gone.unlink()
        with pytest.raises(MissingEntries) as err:
            report("page2", "stage=page")
    text = str(err.value)
    assert "(timm:test_vit, task_prior)" in text and "1 (backbone, part) entry is missing" in text
    assert "python -m src.report stage=compute shard=1" in text and "wrote nothing" in text
    assert not list((tmp_path / "page2").glob("report*"))

    # the command it names computes that entry alone; then the page builds
    again = report("compute2", "stage=compute", "shard=1")
    assert "(timm:test_vit)" in again and "cache: 2 reused, 1 computed" in again
    with monkeypatch.context() as m:
        _forbid_computation(m)
        report("page3", "stage=page")
        assert (tmp_path / "page3" / "report.html").is_file()


def _fp(index: int) -> str:
    """The 16-hex weights prefix of the cache entries of LABELS[index] (random weights, seeded as the report does)."""
    import torch

    from src.backbones.spec import build_backbone
    from src.methods.audit_parts import backbone_fingerprint

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return backbone_fingerprint(build_backbone({"name": LABELS[index], "pretrained": False}))[:16]


@pytest.mark.timeout(300)
def test_a_killed_worker_leaves_no_partial_entry_and_its_backbone_resumes(tmp_path) -> None:
    from src.report.__main__ import run

    cache = tmp_path / "cache"
    job = subprocess.Popen(
        _cli(NETS, *TINY, "stage=compute", "shard=3", f"cache_dir={cache}", f"hydra.run.dir={tmp_path / 'j'}"),
        cwd=ROOT, env=_env(tmp_path), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 240
    while not list(cache.glob("synbench/*.json")):  # the first part is written: the backbone is under way
        assert job.poll() is None and time.monotonic() < deadline, "the job ended before its first entry"
        time.sleep(0.005)
    job.send_signal(signal.SIGKILL)  # mid-backbone: the baselines (seconds) are running
    job.wait(timeout=60)

    entries = _entries(cache)  # every file under its entry name is a complete entry
    done = [p for p in PARTS if p in entries]
    assert done == PARTS[: len(done)] and 1 <= len(done) < len(PARTS), done
    # what a kill during a write would leave: a temporary file, never read as an entry; removed once stale
    old = cache / "synbench" / f".{entries['synbench'][0].name}.4242.0123abcd.tmp"
    fresh = cache / "synbench" / f".{entries['synbench'][0].name}.4343.4567cdef.tmp"
    for tmp in (old, fresh):
        tmp.write_text('{"key": ')
    os.utime(old, (time.time() - 7200, time.time() - 7200))

    cfg = _page_cfg(tmp_path, cache, tmp_path / "again", "stage=compute", "shard=3")
    again = run(cfg)
    assert f"cache: {len(done)} reused, {len(PARTS) - len(done)} computed" in again
    assert {part: len(files) for part, files in _entries(cache).items()} == dict.fromkeys(PARTS, 1)
    assert not old.exists() and fresh.exists()  # a young temporary file may be a live write: kept


def test_gpu_rule_one_gpu_per_job_then_shared() -> None:
    from src.report.jobs import gpu_for_job

    assert [gpu_for_job(i, 4) for i in range(6)] == [0, 1, 2, 3, 0, 1]  # nothing held: the job's own GPU
    assert gpu_for_job(0, 4, busy={0, 1}) == 2  # the first free one, round-robin from the job's own
    assert gpu_for_job(3, 4, busy={3}) == 0
    assert gpu_for_job(5, 4, busy={0, 1, 2, 3}) == 1  # all held: shared, its own
    assert gpu_for_job(7, 1) == 0 and gpu_for_job(7, 1, busy={0}) == 0
    with pytest.raises(ValueError, match="n_gpus"):
        gpu_for_job(0, 0)


def test_job_device_holds_a_gpu_for_the_job_and_releases_it(tmp_path, monkeypatch) -> None:
    from src.report import jobs

    monkeypatch.setattr(jobs, "_lock_dir", lambda: tmp_path)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with jobs.job_device("cuda", None, n_gpus=2) as d:
        assert d == "cuda"  # not a shard: the device as given
    with jobs.job_device("cuda:1", [0], n_gpus=2) as d:
        assert d == "cuda:1"  # an explicit GPU is kept
    with jobs.job_device("cuda", [0], n_gpus=1) as d:
        assert d == "cuda"  # one visible GPU (SLURM: the job's own)
    with jobs.job_device("cuda", [2], n_gpus=2) as a:
        with jobs.job_device("cuda", [2], n_gpus=2) as b:  # another job while the first runs
            with jobs.job_device("cuda", [3], n_gpus=2) as c:  # both held: shared
                assert (a, b, c) == ("cuda:0", "cuda:1", "cuda:1")
    with jobs.job_device("cuda", [3], n_gpus=2) as d:
        assert d == "cuda:1"  # released when the jobs ended


def test_stage_and_shard_are_checked_before_any_work() -> None:
    from src.report.jobs import check_stage, compute_command, page_command, shard_indices

    assert shard_indices(None, LABELS) is None
    assert shard_indices(2, LABELS) == [2]
    assert shard_indices("timm:test_vit", LABELS) == [1]
    assert shard_indices([3, "timm:test_efficientnet", 3], LABELS) == [3, 0]
    for bad in (4, -1, True, "timm:nope", []):
        with pytest.raises(ValueError, match="shard=") as err:
            shard_indices(bad, LABELS)
        assert bad == [] or "3: timm:resnet10t" in str(err.value)
    assert check_stage("all", None, None) == "all" and check_stage("compute", 1, "c") == "compute"
    with pytest.raises(ValueError, match="stage must be one of"):
        check_stage("merge", None, "c")
    with pytest.raises(ValueError, match="needs stage=compute"):
        check_stage("all", 1, "c")
    with pytest.raises(ValueError, match="cache_dir is null"):
        check_stage("page", None, None)
    overrides = ["stage=compute", "shard=2", "backbones=[{name:timm\\:test_vit}]", "input_size=16"]
    assert (
        page_command(overrides) == "python -m src.report stage=page 'backbones=[{name:timm\\:test_vit}]' input_size=16"
    )
    assert compute_command([0, 3], ["stage=page", *overrides[2:]]).startswith(
        "python -m src.report stage=compute shard=[0,3] 'backbones="
    )


def test_two_writers_of_one_entry_never_leave_a_broken_one(tmp_path) -> None:
    """Overlapping jobs computing the same (backbone, part): every read sees no entry or a complete one, never a mix."""
    import threading

    from src.report.cache import ResultCache

    values = [{"value": {"who": w, "pad": "x" * 20000}, "seconds": 1.0} for w in range(2)]
    seen: list[object] = []
    stop = threading.Event()

    def write(value) -> None:
        cache = ResultCache(tmp_path)
        for _ in range(150):
            cache.put("synbench", "f" * 64, {"n": 1}, value)

    def read() -> None:
        cache = ResultCache(tmp_path)
        while not stop.is_set():
            seen.append(cache.get("synbench", "f" * 64, {"n": 1}))

    reader = threading.Thread(target=read)
    reader.start()
    writers = [threading.Thread(target=write, args=(v,)) for v in values]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    reader.join()
    assert seen and all(s is None or s in values for s in seen)
    assert [p.name for p in (tmp_path / "synbench").iterdir() if p.name.endswith(".tmp")] == []
