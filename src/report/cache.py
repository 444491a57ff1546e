"""On-disk cache of per-backbone report results, keyed by what determines them: the backbone's weights (a sha256 of
its state dict, :func:`src.backbones.weights.state_fingerprint` — so a re-trained or re-downloaded checkpoint is a new
entry even under the same name), the part of the report and its settings (a sha256 of their canonical JSON), and
the code version that computes it (:data:`CACHE_VERSION`, raised whenever a part's numbers would change).

Adding a backbone to a report runs only that backbone; a killed report resumes with the parts already written. Each
entry is one JSON file written atomically (a full disk or a kill leaves the entry absent, never truncated; several
processes writing one entry at once leave one of their complete files: the report's jobs, src/report/jobs.py). A
kill in the middle of a write leaves a ``.<entry>.<pid>.<random>.tmp`` file, never read as an entry and removed by
:meth:`ResultCache.remove_stale_temps` (every computing run) once it is an hour old. An entry
that does not parse, whose key differs, whose value fails the caller's ``check`` (a hand-edited ``"value": 5``) or
whose path is not a regular file (a folder) is treated as absent and recomputed, with a warning naming the file; a
path that is not a regular file is not written either. A ``cache_dir`` that is a regular file, or a part folder in it
that is one, is refused by :meth:`ResultCache.check` before any work."""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..utils.atomic_write import atomic_write_bytes, remove_stale_temps
from ..utils.report_writer import json_safe

__all__ = ["CACHE_VERSION", "CACHE_DIR_FIX", "ResultCache", "settings_hash"]

CACHE_VERSION = 1
CACHE_DIR_FIX = "point cache_dir at a folder (e.g. cache_dir=logs/report_cache), or cache_dir=null for no cache"
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

    def check(self, parts: Iterable[str]) -> None:
        """Refuse, before any work, a cache that cannot hold ``parts``: ``cache_dir`` or a part folder in it that
        exists but is not a folder (a regular file) — a NotADirectoryError naming ``cache_dir``, the file and the
        fix. Creates nothing (a missing folder is made by the first write)."""
        if self.root is None:
            return
        for folder, what in [
            (self.root, "cache_dir"),
            *((self.root / p, f"the {p} folder of cache_dir") for p in parts),
        ]:
            if folder.exists() and not folder.is_dir():
                raise NotADirectoryError(
                    f"cache_dir={self.root}: {what} ({folder}) is a regular file, not a folder, so no result could "
                    f"be cached; nothing was computed. Fix: move {folder} away, or {CACHE_DIR_FIX}"
                )

    def remove_stale_temps(self, parts: Iterable[str], older_than_s: float = 3600.0) -> list[Path]:
        """Remove the temporary files a writer killed mid-write left in the folders of ``parts`` (older than
        ``older_than_s``: a younger one may be another job's write in progress); returns them."""
        if self.root is None:
            return []
        return [p for part in parts for p in remove_stale_temps(self.root / part, older_than_s)]

    def _path(self, part: str, weights: str, settings: Mapping[str, Any]) -> Path:
        assert self.root is not None
        return self.root / part / f"{weights[:16]}-{settings_hash({**settings, '_version': CACHE_VERSION})[:16]}.json"

    def get(
        self,
        part: str,
        weights: str,
        settings: Mapping[str, Any],
        check: Callable[[Any], None] | None = None,
    ) -> Any | None:
        """The cached value, or None (no cache, no entry, or an unusable entry — recomputed, with a warning naming
        the file). ``check(value)`` raises ValueError/TypeError/KeyError for a value of the wrong shape (an entry
        with a valid key but an edited or foreign value), which is then unusable too."""
        if self.root is None:
            return None
        path = self._path(part, weights, settings)
        if path.exists() and not path.is_file():
            log.warning(
                "report cache: ignoring %s (not a regular file); it is recomputed and not cached: remove it", path
            )
            self.misses += 1
            return None
        if not path.is_file():
            self.misses += 1
            return None
        try:
            entry = json.loads(path.read_text())
            key = entry["key"]
            if key["weights"] != weights or key["settings"] != json_safe(dict(settings)):
                raise ValueError("the key stored in the entry differs from the one asked for (hash collision?)")
            value = entry["value"]
            if check is not None:
                check(value)
            self.hits += 1
            return value
        except (OSError, ValueError, KeyError, TypeError) as err:
            log.warning("report cache: ignoring %s (%s); it is recomputed", path, err)
            self.misses += 1
            return None

    def put(self, part: str, weights: str, settings: Mapping[str, Any], value: Mapping[str, Any]) -> None:
        """Store ``value`` (JSON-able; NaN written as null) atomically; an entry path that exists but is not a regular
        file (a folder) is left alone, with a warning."""
        if self.root is None:
            return
        path = self._path(part, weights, settings)
        if path.exists() and not path.is_file():
            log.warning("report cache: not caching into %s (not a regular file): remove it to cache this part", path)
            return
        entry = {"key": {"part": part, "weights": weights, "settings": json_safe(dict(settings))}, "value": value}
        atomic_write_bytes(json.dumps(json_safe(entry), indent=1).encode(), path)
