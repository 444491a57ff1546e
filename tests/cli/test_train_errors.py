"""The training entry point fails loudly and usefully: a SIGTERM'd ``python -m src.train`` exits 143 with a
checkpoint and the ``ckpt_path=`` that resumes it; bad loader settings are refused when the config is built."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from src.train import train

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("data", ["digits", "gaussian"])
def test_batch_size_zero_is_refused_naming_the_key(make_cfg, data: str) -> None:
    # Hydra wraps the data module's ValueError in an InstantiationException that keeps its message
    with pytest.raises(Exception, match=r"batch_size must be an integer >= 1.*data\.batch_size") as info:
        train(make_cfg([f"data={data}", "data.batch_size=0", "callbacks=none", "logger=csv"]))
    assert isinstance(info.value, ValueError) or isinstance(info.value.__cause__, ValueError)


def test_fractional_batch_size_is_refused_naming_the_key(make_cfg) -> None:
    # X02: data.batch_size=1.5 trained with batches of 1 (int() truncation) while .hydra/config.yaml said 1.5
    with pytest.raises(Exception, match=r"batch_size must be an integer >= 1 .*got 1\.5 \(float\).*data\.batch_size"):
        train(make_cfg(["data.batch_size=1.5", "callbacks=none", "logger=csv"]))


def test_negative_num_workers_is_refused(make_cfg) -> None:
    with pytest.raises(Exception, match=r"num_workers must be an integer >= 0"):
        train(make_cfg(["data.num_workers=-1", "callbacks=none", "logger=csv"]))


@pytest.mark.parametrize(
    "override, shown",
    [
        ("model.lr=abc", "'abc'"),
        ("model.lr=-0.1", "-0.1"),
        ("model.weight_decay=nan", "nan"),
        ("model.lr=true", "True"),
    ],
)
def test_bad_optimizer_hyperparameter_is_refused_naming_the_key(make_cfg, override: str, shown: str) -> None:
    """X01: the optimizer's numbers were read only when the fit started (float()'s message, no key); the model's
    constructor refuses them, inside Hydra's instantiate, before the trainer exists."""
    key = override.split("=")[0]
    cfg = make_cfg(["debug=fast", override, "callbacks=none", "logger=csv"])
    with pytest.raises(Exception, match=rf"{key} must be a finite number >= 0, got {shown}") as info:
        train(cfg)
    assert isinstance(info.value.__cause__, ValueError)  # Hydra's InstantiationException keeps the message
    assert not list(Path(cfg.paths.output_dir).glob("**/*.ckpt"))


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_sigterm_exits_143_keeps_a_checkpoint_and_says_how_to_resume(tmp_path) -> None:
    """A real process and a real signal: Lightning's own handling exits with status 0 (a scheduler would count the
    preempted run as a success)."""
    run_dir = tmp_path / "run"
    cmd = [
        sys.executable,
        "-m",
        "src.train",
        "backbone=timm_tiny_random",
        "data.image_size=8",
        "data.batch_size=16",  # 79 batches per epoch: the signal arrives mid-epoch
        "model.epsilon=0.0",
        "model.eval_epsilons=[]",
        "trainer.max_epochs=1000",
        "logger=csv",
        "callbacks=none",
        "+callbacks.exception_checkpoint._target_=callbacks.ExceptionCheckpoint",
        f"+callbacks.exception_checkpoint.dirpath={run_dir}/checkpoints",
        f"hydra.run.dir={run_dir}",
    ]
    env = dict(os.environ, HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    log = tmp_path / "out.txt"
    with open(log, "w") as out:
        proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 400
            while time.monotonic() < deadline and proc.poll() is None:  # wait until training is under way
                text = log.read_text(errors="replace")
                # the model summary is the last line before fitting starts (no progress bar with callbacks=none)
                if "Epoch 0" in text or "Total FLOPs" in text:
                    break
                time.sleep(1)
            time.sleep(8)  # first steps of a 358 K-parameter model at 8 px: milliseconds each, even under load
            assert proc.poll() is None, log.read_text()[-3000:]
            proc.send_signal(signal.SIGTERM)
            rc = proc.wait(timeout=300)
        finally:
            if proc.poll() is None:
                proc.kill()
    text = log.read_text(errors="replace")
    assert rc == 143, text[-3000:]
    ckpt = run_dir / "checkpoints" / "on_exception.ckpt"
    assert ckpt.is_file(), text[-3000:]
    assert f"ckpt_path={ckpt}" in text
