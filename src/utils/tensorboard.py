"""Read TensorBoard scalars back (for notebooks, reports and tests)."""

from __future__ import annotations

from pathlib import Path

__all__ = ["read_scalars"]


def read_scalars(log_dir: str | Path) -> dict[str, list[tuple[int, float]]]:
    """{tag: [(step, value), ...]} from every event file under ``log_dir`` (sorted by step)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    files = sorted(Path(log_dir).rglob("events.out.tfevents.*"))
    if not files:
        raise FileNotFoundError(f"no TensorBoard event files under {log_dir}")
    out: dict[str, list[tuple[int, float]]] = {}
    for f in files:
        acc = EventAccumulator(str(f), size_guidance={"scalars": 0})
        acc.Reload()
        for tag in acc.Tags().get("scalars", []):
            out.setdefault(tag, []).extend((e.step, float(e.value)) for e in acc.Scalars(tag))
    return {k: sorted(v) for k, v in out.items()}
