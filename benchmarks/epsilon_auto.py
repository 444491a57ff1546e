"""``model.epsilon=auto`` (SynBench-guided ε, SynBench paper arXiv:2210.02989 §4.3) against the swept ε
(``hparams_search=robust_probe_optuna``, labelled validation data), over seeds, on held-out test data.

    python -m benchmarks.epsilon_auto [--seeds 0 1 2] [--n-trials 8] [--out logs/epsilon_auto] [--arms ...] [--into DIR]
                                       [--extra OVERRIDE ...]

Per seed s (the seed moves the digits train/val/test split, the head's initialisation and PGD's random starts):
  sweep  ``python -m src.train -m hparams_search=robust_probe_optuna seed=s hydra.sweeper.sampler.seed=s`` (its own
         study in ``<out>/seed_s``): the trial with the best ``val/adv/acc_pgd5_l2_0p05`` is the sweep's choice;
  auto_a07  ``python -m src.train model.epsilon=auto model.auto_epsilon.a_T=[0.7] trainer.max_epochs=3 seed=s`` (the
         sweep's epochs): no labels choose ε, at the paper's threshold accuracy alone;
  auto_a06  the same with ``model.auto_epsilon.a_T=[0.6]`` (the official integral grid's lowest threshold). The
         default, ``a_T: [0.7, 0.6]``, is auto_a07 where some score at 0.7 is positive, else auto_a06;
  zero   ``python -m src.train model.epsilon=0 trainer.max_epochs=3 seed=s``: standard probing, the reference.
``--arms`` picks some; ``--into <study folder>`` adds the arms a finished study lacks (its results.json).
Every run tests its best-val/acc checkpoint on the held-out test split (``test: true``); the figure compared is
``test/adv/acc_pgd5_l2_0p05`` (and ``test/acc``). Per-epoch monitors are off in every run (``callbacks.synbench=null
callbacks.divergence_radius=null``): they do not change training, only the wall time. Prints per-seed rows, then
mean ± standard error over seeds of each choice and of the paired difference auto − sweep, and the wall times.
Writes ``<out>/results.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OBJECTIVE = "val/adv/acc_pgd5_l2_0p05"
HELD_OUT = ("test/adv/acc_pgd5_l2_0p05", "test/acc")
QUIET = ["callbacks.synbench=null", "callbacks.divergence_radius=null", "callbacks.rich_progress_bar=null"]


def _run(args: list[str], log: Path) -> float:
    """One ``python -m src.train`` process (its output to ``log``); returns its wall time in seconds."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    with log.open("w") as fh:
        proc = subprocess.run([sys.executable, "-m", "src.train", *args], cwd=ROOT, env=env, stdout=fh, stderr=fh)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed (exit {proc.returncode}); see {log}")
    return time.perf_counter() - start


def _metrics(run_dir: Path) -> dict[str, float]:
    return json.loads((run_dir / "metrics.json").read_text())["metrics"]


def _auto_epsilon(log: Path) -> float | None:
    """The ε that epsilon=auto chose, from its log line ``epsilon=auto: ... -> eps = s x e = <ε>``."""
    text = log.read_text()
    found = re.findall(r"epsilon=auto: .*= ([0-9.eE+-]+)\s*$", text, flags=re.MULTILINE)
    if found:
        return float(found[-1])
    return 0.0 if "so the scores do not rank eps; eps = 0" in text else None  # every score 0: standard probing


def _trial_dirs(sweep_dir: Path) -> list[Path]:
    return sorted(p.parent for p in sweep_dir.glob("*/metrics.json"))


def mean_se(values: list[float]) -> tuple[float, float]:
    """Mean and standard error (sample standard deviation / sqrt(n); 0 for one value)."""
    m = statistics.fmean(values)
    return m, (statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0)


#: The single-run choices compared with the sweep: name -> overrides (each trains the sweep's 3 epochs).
ARMS: dict[str, list[str]] = {
    "auto_a07": ["model.epsilon=auto", "model.auto_epsilon.a_T=[0.7]"],  # the paper's headline threshold alone
    "auto_a06": ["model.epsilon=auto", "model.auto_epsilon.a_T=[0.6]"],  # the official grid's lowest threshold
    "zero": ["model.epsilon=0"],  # standard probing
}


def _sweep(seed: int, n_trials: int, folder: Path, common: list[str]) -> tuple[dict, float]:
    """Run the sweep; its choice (best validation objective) with its held-out figures, and the wall time."""
    sweep_dir = folder / "sweep"
    wall = _run(
        [
            "-m",
            "hparams_search=robust_probe_optuna",
            *common,
            f"hydra.sweeper.sampler.seed={seed}",
            f"hydra.sweeper.n_trials={n_trials}",
            f"hydra.sweeper.study_name=epsilon_auto_seed{seed}",
            f"paths.optuna_dir={folder}",
            f"hydra.sweep.dir={sweep_dir}",
        ],
        folder / "sweep.log",
    )
    trials = []
    for d in _trial_dirs(sweep_dir):
        m = _metrics(d)
        cfg = (d / ".hydra" / "overrides.yaml").read_text()
        trials.append({"dir": d.name, "overrides": cfg, **{k: m[k] for k in (OBJECTIVE, *HELD_OUT)}})
    if not trials:
        raise RuntimeError(f"the sweep wrote no trial metrics under {sweep_dir}")
    chosen = max(trials, key=lambda t: t[OBJECTIVE])
    row = {k: chosen[k] for k in (OBJECTIVE, *HELD_OUT)} | {"dir": chosen["dir"]}
    return row | {"best_test_of_all_trials": max(t[HELD_OUT[0]] for t in trials), "trials": trials}, wall


def one_seed(seed: int, n_trials: int, out: Path, extra: list[str], arms: list[str], row: dict | None) -> dict:
    """The arms not yet in ``row`` (the sweep's choice and the single runs of ARMS) for one seed, with their
    held-out figures."""
    folder = out / f"seed_{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    common = [f"seed={seed}", *QUIET, *extra]
    row = row or {"seed": seed, "walls_s": {}}
    for arm in arms:
        if arm in row:
            continue
        if arm == "sweep":
            row["sweep"], row["walls_s"]["sweep"] = _sweep(seed, n_trials, folder, common)
            continue
        run_dir, log = folder / arm, folder / f"{arm}.log"
        row["walls_s"][arm] = _run([*ARMS[arm], "trainer.max_epochs=3", *common, f"hydra.run.dir={run_dir}"], log)
        m = _metrics(run_dir)
        row[arm] = {k: m[k] for k in (OBJECTIVE, *HELD_OUT)} | {"epsilon": _auto_epsilon(log)}
    return row


def summary(rows: list[dict]) -> list[str]:
    """Mean ± SE over seeds of each arm's figures and of the paired difference arm − sweep."""
    arms = [a for a in ("sweep", *ARMS) if all(a in r for r in rows)]
    lines = []
    for key in (OBJECTIVE, *HELD_OUT):
        for name in arms:
            m, se = mean_se([r[name][key] for r in rows])
            lines.append(f"{key:28s} {name:8s} {m:.4f} ± {se:.4f}")
        for name in (a for a in arms if a != "sweep" and "sweep" in arms):
            m, se = mean_se([r[name][key] - r["sweep"][key] for r in rows])
            lines.append(f"{key:28s} {name} − sweep (paired) {m:+.4f} ± {se:.4f}")
    if "sweep" in arms:
        m, se = mean_se([r["sweep"]["best_test_of_all_trials"] for r in rows])
        lines.append(f"best of all trials on test (an oracle no sweep can pick) {m:.4f} ± {se:.4f}")
    for name in arms:
        m, se = mean_se([r["walls_s"][name] for r in rows])
        lines.append(f"wall {name:8s} {m:.0f} ± {se:.0f} s")
    return lines


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--n-trials", type=int, default=8)
    parser.add_argument(
        "--extra",
        nargs="*",
        default=[],
        help="more overrides for every run (a smoke run: trainer.limit_train_batches=2 model.auto_epsilon.n_train=256)",
    )
    parser.add_argument("--arms", nargs="+", default=["sweep", *ARMS], choices=["sweep", *ARMS])
    parser.add_argument("--out", type=Path, default=ROOT / "logs" / "epsilon_auto")
    parser.add_argument("--into", type=Path, default=None, help="a finished study's folder: add the arms it lacks")
    args = parser.parse_args(argv)
    if args.into is not None:
        out = args.into
        rows = {r["seed"]: r for r in json.loads((out / "results.json").read_text())}
        for r in rows.values():  # the first version's layout: the sweep's trials and oracle at the row's top level
            if "sweep_best_test" in r:
                r["sweep"] |= {"best_test_of_all_trials": r.pop("sweep_best_test"), "trials": r.pop("trials")}
    else:
        out = args.out / time.strftime("%Y-%m-%d_%H-%M-%S")
        out.mkdir(parents=True, exist_ok=False)
        rows = {}
    for seed in args.seeds:
        rows[seed] = one_seed(seed, args.n_trials, out, args.extra, args.arms, rows.get(seed))
        figures = ", ".join(
            f"{a} {rows[seed][a][HELD_OUT[0]]:.4f}"
            + (f" (ε {rows[seed][a]['epsilon']})" if "epsilon" in rows[seed][a] else "")
            for a in ("sweep", *ARMS)
            if a in rows[seed]
        )
        print(f"seed {seed}: {HELD_OUT[0]} {figures}; walls {rows[seed]['walls_s']}", flush=True)
        (out / "results.json").write_text(json.dumps(list(rows.values()), indent=2))
    print("\n".join(summary([rows[s] for s in args.seeds])))
    print(f"results: {out / 'results.json'}")


if __name__ == "__main__":
    main()
