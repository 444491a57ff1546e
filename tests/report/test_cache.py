"""The report's on-disk result cache (src.report.cache)."""

from __future__ import annotations

import math

from src.report.cache import ResultCache, settings_hash


def test_hash_is_canonical() -> None:
    assert settings_hash({"a": 1, "b": (1, 2)}) == settings_hash({"b": [1, 2], "a": 1})
    assert settings_hash({"a": 1}) != settings_hash({"a": 2})


def test_round_trip_and_keys(tmp_path) -> None:
    cache = ResultCache(tmp_path)
    assert cache.get("synbench", "ab" * 32, {"n": 1}) is None
    cache.put("synbench", "ab" * 32, {"n": 1}, {"score": 0.5, "bad": math.nan})
    assert cache.get("synbench", "ab" * 32, {"n": 1}) == {"score": 0.5, "bad": None}
    assert cache.get("synbench", "ab" * 32, {"n": 2}) is None  # other settings
    assert cache.get("synbench", "cd" * 32, {"n": 1}) is None  # other weights
    assert cache.get("baselines", "ab" * 32, {"n": 1}) is None  # other part
    assert (cache.hits, cache.misses) == (1, 4)
    assert ResultCache(None).get("x", "y", {}) is None  # no cache: always computed


def test_a_corrupt_entry_is_recomputed_with_a_warning(tmp_path, caplog) -> None:
    cache = ResultCache(tmp_path)
    cache.put("p", "ef" * 32, {}, {"v": 1})
    (path,) = (tmp_path / "p").iterdir()
    path.write_text(path.read_text()[:10])  # truncated by hand
    assert cache.get("p", "ef" * 32, {}) is None
    assert str(path) in caplog.text and "recomputed" in caplog.text
