"""On-disk cache of per-backbone report results, keyed by what determines them: the backbone's weights (a sha256 of
its state dict, :func:`src.backbones.weights.state_fingerprint` — so a re-trained or re-downloaded checkpoint is a new
entry even under the same name), the part of the report and its settings (a sha256 of their canonical JSON), and
the code version that computes it (:data:`CACHE_VERSION`, raised whenever a part's numbers would change).

Adding a backbone to a report runs only that backbone; a killed report resumes with the parts already written. Each
entry is one JSON file written atomically (a full disk or a kill leaves the entry absent, never truncated); a file that
does not parse is treated as absent and recomputed, with a warning naming it."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..utils.atomic_write import atomic_write_bytes
from ..utils.report_writer import json_safe

__all__ = ["CACHE_VERSION", "ResultCache", "settings_hash"]

CACHE_VERSION = 1
log = logging.getLogger("repbench")


def settings_hash(settings: Mapping[str, Any]) -> str:
    """sha256 (hex) of the canonical JSON of ``settings`` (sorted keys; tuples as lists; NaN as null)."""
    text = json.dumps(json_safe(dict(settings)), sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


class ResultCache:
    """``root/<part>/<weights[:16]>-<settings[:16]>.json``: ``{"key": {...}, "value": {...}}`` per entry."""

    def __init__(self, root: str | Path | None) -> None:
        self.root = Path(root) if root is not None else None
        self.hits = self.misses = 0

    def _path(self, part: str, weights: str, settings: Mapping[str, Any]) -> Path:
        assert self.root is not None
        return self.root / part / f"{weights[:16]}-{settings_hash({**settings, '_version': CACHE_VERSION})[:16]}.json"

    def get(self, part: str, weights: str, settings: Mapping[str, Any]) -> dict[str, Any] | None:
        """The cached value, or None (no cache, no entry, or an unreadable entry — recomputed)."""
        if self.root is None:
            return None
        path = self._path(part, weights, settings)
        if not path.is_file():
            self.misses += 1
            return None
        try:
            entry = json.loads(path.read_text())
            key = entry["key"]
            if key["weights"] != weights or key["settings"] != json_safe(dict(settings)):
                raise ValueError("the key stored in the entry differs from the one asked for (hash collision?)")
            self.hits += 1
            return entry["value"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            log.warning("report cache: ignoring %s (%s); it is recomputed", path, err)
            self.misses += 1
            return None

    def put(self, part: str, weights: str, settings: Mapping[str, Any], value: Mapping[str, Any]) -> None:
        """Store ``value`` (JSON-able; NaN written as null) atomically."""
        if self.root is None:
            return
        entry = {"key": {"part": part, "weights": weights, "settings": json_safe(dict(settings))}, "value": value}
        atomic_write_bytes(json.dumps(json_safe(entry), indent=1).encode(), self._path(part, weights, settings))
