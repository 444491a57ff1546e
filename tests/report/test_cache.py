"""The report's on-disk result cache (src.report.cache); cases R04, R05, R06, R09, R10, R11 of the reliability audit."""

from __future__ import annotations

import json
import math
import re

import pytest

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


# --- R04 / R05 / R09: a valid key with a malformed value; R06: an entry path that is a folder -------------------------
def _timed_check(value):
    from src.report.audit import check_cached_entry

    check_cached_entry("divergence_radius", value)


GOOD = {"value": {"r_dr": {"fog": 0.1}, "r_cs": {"fog": 0.2}, "r_dr_mean": 0.1, "r_cs_mean": 0.2}, "seconds": 1.5}


@pytest.mark.parametrize(
    "case, value, reason",
    [
        ("R04", 5, r"the entry holds int"),
        ("R05", {"seconds": 1.0}, r"not value and seconds"),
        ("R09", {**GOOD, "seconds": "fast"}, r"seconds is 'fast'"),
        ("value", {**GOOD, "value": 5}, r"divergence_radius value is int"),
        ("part", {**GOOD, "value": {"r_dr": {}, "r_cs": {}}}, r"no 'r_dr_mean'"),
    ],
)
def test_r04_r05_r09_a_malformed_value_is_recomputed_with_a_warning(tmp_path, caplog, case, value, reason) -> None:
    """docs/report.md: "a corrupt entry is recomputed with a warning" - also when only the value is wrong."""
    cache = ResultCache(tmp_path)
    cache.put("divergence_radius", "ab" * 32, {}, GOOD)
    assert cache.get("divergence_radius", "ab" * 32, {}, check=_timed_check) == GOOD
    (path,) = (tmp_path / "divergence_radius").iterdir()
    entry = json.loads(path.read_text())
    path.write_text(json.dumps({**entry, "value": value}))
    assert cache.get("divergence_radius", "ab" * 32, {}, check=_timed_check) is None
    assert str(path) in caplog.text and "recomputed" in caplog.text
    assert re.search(reason, caplog.text), caplog.text


def test_r06_an_entry_path_that_is_a_folder_is_ignored_and_not_written(tmp_path, caplog) -> None:
    cache = ResultCache(tmp_path)
    path = cache._path("synbench", "ab" * 32, {})
    path.mkdir(parents=True)
    assert cache.get("synbench", "ab" * 32, {}) is None
    cache.put("synbench", "ab" * 32, {}, {"v": 1})  # no IsADirectoryError after the work
    assert path.is_dir() and caplog.text.count(str(path)) == 2 and "remove it" in caplog.text
    assert list(path.parent.iterdir()) == [path]  # no temporary file left behind


def test_r10_r11_a_cache_dir_or_part_folder_that_is_a_file_is_refused_up_front(tmp_path) -> None:
    blocker = tmp_path / "a_file"
    blocker.write_text("x")
    with pytest.raises(NotADirectoryError, match=r"cache_dir=.*a_file: cache_dir .* is a regular file.*cache_dir=null"):
        ResultCache(blocker).check(["synbench"])
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "task_prior").write_text("x")
    with pytest.raises(NotADirectoryError, match=r"the task_prior folder of cache_dir .* Fix: move .*task_prior away"):
        ResultCache(tmp_path / "cache").check(["synbench", "task_prior"])
    ResultCache(tmp_path / "cache").check(["synbench"])  # the other parts' folders are fine
    ResultCache(tmp_path / "new").check(["synbench"])  # a missing cache_dir is made by the first write
    assert not (tmp_path / "new").exists()
    ResultCache(None).check(["synbench"])
