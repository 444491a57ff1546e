"""Draw docs/figures/robust_finetune_lambda.png from a λ × seed multirun of ``experiment=robust_finetune``.

python -m src.train -m experiment=robust_finetune model.lam=0,1,10 seed=0,1
python docs/figures/robust_finetune_lambda.py logs/train/multiruns/<run>
"""

from __future__ import annotations

import glob
import os
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import yaml
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

PANELS = (
    ("val/utility", "teacher cosine (utility) ↑"),
    ("val/divergence_radius/jpeg_compression", "DivergenceRadius, JPEG ↓"),
    ("val/pairwise_cos", "cosine between images (collapse → 1)"),
)


def load(job_dir: str) -> tuple[dict[str, str], dict[str, list[tuple[int, float]]]]:
    overrides = dict(o.split("=", 1) for o in yaml.safe_load(open(os.path.join(job_dir, ".hydra/overrides.yaml"))))
    series: dict[str, list[tuple[int, float]]] = {}
    for f in sorted(glob.glob(os.path.join(job_dir, "tensorboard", "events*"))):
        acc = EventAccumulator(f)
        acc.Reload()
        for key in acc.Tags()["scalars"]:
            series.setdefault(key, []).extend((e.step, e.value) for e in acc.Scalars(key))
    return overrides, series


def main(sweep_dir: str, out: str = os.path.join(os.path.dirname(__file__), "robust_finetune_lambda.png")) -> None:
    fig, axes = plt.subplots(1, len(PANELS), figsize=(12, 3.4))
    colors = {}
    jobs = [d for d in os.listdir(sweep_dir) if os.path.isfile(os.path.join(sweep_dir, d, ".hydra", "overrides.yaml"))]
    for job in sorted(jobs, key=lambda d: int(d.split("_", 1)[0])):  # job folders: <num>[_<overrides>]
        overrides, series = load(os.path.join(sweep_dir, job))
        lam, seed = overrides["model.lam"], overrides.get("seed", "0")
        color = colors.setdefault(lam, f"C{len(colors)}")
        for ax, (key, _) in zip(axes, PANELS):
            steps, values = zip(*sorted(series[key]))
            ax.plot(steps, values, color=color, ls="-" if seed == "0" else "--", marker="o", ms=3,
                    label=f"λ = {lam}, seed {seed}")  # fmt: skip
    for ax, (_key, title) in zip(axes, PANELS):
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("training step")  # the monitors log on Lightning's step axis, as the module's val/* metrics
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(out)


if __name__ == "__main__":
    main(sys.argv[1])
