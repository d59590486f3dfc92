"""The disk cache of pure computations: keyed by content, never stale, corrupt files
ignored, off and unwritable folders fall back to computing."""

from __future__ import annotations

import os
import pickle
from pathlib import Path

import pytest

from hetsim.devices import catalogue, mee
from hetsim.simulator import diskcache

USER_CATALOGUE = """\
devices:
  test-gpu:
    display_name: Test GPU
    vendor: test
    kind: gpu
    peak_flops: {fp16: 100e12}
    memory_bytes: 16e9
    memory_bandwidth_Bps: 1.0e12
    compute_efficiency:
      default: {max_eff: 0.8, half_size: 1e9, exponent: 1.0}
    memory_efficiency: {max_eff: 0.9, half_size: 1e6, exponent: 1.0}
    launch_overhead_s: 5e-6
    source: a test entry
"""


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "cache"
    monkeypatch.setenv("HETSIM_CACHE_DIR", str(root))
    monkeypatch.delenv("HETSIM_CACHE", raising=False)
    return root


def _files(root: Path, namespace: str) -> list[Path]:
    return sorted((root / namespace).glob("*.pickle"))


def test_where_the_cache_lives(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("HETSIM_CACHE", raising=False)
    monkeypatch.delenv("HETSIM_CACHE_DIR", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert diskcache.cache_dir() == tmp_path / "xdg" / "hetsim"
    monkeypatch.delenv("XDG_CACHE_HOME")
    assert diskcache.cache_dir() == Path.home() / ".cache" / "hetsim"
    monkeypatch.setenv("HETSIM_CACHE_DIR", str(tmp_path / "mine"))
    assert diskcache.cache_dir() == tmp_path / "mine"
    monkeypatch.setenv("HETSIM_CACHE", "off")
    assert diskcache.cache_dir() is None


def test_a_result_is_computed_once_then_read(cache_dir: Path) -> None:
    calls: list[int] = []

    def compute() -> dict[str, float]:
        calls.append(1)
        return {"x": 0.1 + 0.2}

    assert diskcache.cached("t", "k", compute) == {"x": 0.1 + 0.2}
    assert diskcache.cached("t", "k", compute) == {"x": 0.1 + 0.2}
    assert len(calls) == 1
    assert len(_files(cache_dir, "t")) == 1
    diskcache.cached("t", "other key", compute)
    assert len(calls) == 2


def test_an_edited_source_file_is_a_new_key(cache_dir: Path, tmp_path: Path) -> None:
    src = tmp_path / "table.yaml"
    src.write_text("a: 1\n")
    reads: list[str] = []

    def compute() -> str:
        reads.append(src.read_text())
        return src.read_text()

    assert diskcache.cached("t", "k", compute, [src]) == "a: 1\n"
    src.write_text("a: 2\n")  # same size, maybe the same time stamp: the content decides
    assert diskcache.cached("t", "k", compute, [src]) == "a: 2\n"
    assert len(reads) == 2


@pytest.mark.parametrize("junk", [b"", b"not a pickle", pickle.dumps(("other key", 42))[:-3]])
def test_a_corrupt_or_foreign_file_is_ignored_and_replaced(cache_dir: Path, junk: bytes) -> None:
    assert diskcache.cached("t", "k", lambda: 1.5) == 1.5
    (path,) = _files(cache_dir, "t")
    path.write_bytes(junk)
    assert diskcache.cached("t", "k", lambda: 2.5) == 2.5  # recomputed, not the junk
    assert diskcache.cached("t", "k", lambda: 9.9) == 2.5  # and stored again


def test_a_file_holding_another_key_is_not_served(cache_dir: Path) -> None:
    diskcache.cached("t", "k", lambda: 1.0)
    (path,) = _files(cache_dir, "t")
    path.write_bytes(pickle.dumps(("some other full key", 7.0)))
    assert diskcache.cached("t", "k", lambda: 3.0) == 3.0


def test_off_or_unwritable_falls_back_silently(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HETSIM_CACHE", "0")
    calls: list[int] = []

    def compute() -> float:
        calls.append(1)
        return 4.0

    for _ in range(2):
        assert diskcache.cached("t", "k", compute) == 4.0
    assert len(calls) == 2
    monkeypatch.delenv("HETSIM_CACHE")
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("HETSIM_CACHE_DIR", str(blocker / "cache"))  # cannot be created
    assert diskcache.cached("t", "k", lambda: 5.0) == 5.0
    if os.geteuid() != 0:  # root writes through permissions
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        monkeypatch.setenv("HETSIM_CACHE_DIR", str(ro))
        assert diskcache.cached("t", "k", lambda: 6.0) == 6.0
        ro.chmod(0o700)


def test_a_user_catalogue_edit_is_seen(cache_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(USER_CATALOGUE)
    assert catalogue.load_device_catalogue(path)["test-gpu"].memory_bytes == 16e9
    assert _files(cache_dir, "catalogue")  # it went through the cache
    path.write_text(USER_CATALOGUE.replace("memory_bytes: 16e9", "memory_bytes: 24e9"))
    assert catalogue.load_device_catalogue(path)["test-gpu"].memory_bytes == 24e9
    # a corrupt cache file for the current content is ignored
    for f in _files(cache_dir, "catalogue"):
        f.write_bytes(b"\x80garbage")
    assert catalogue.load_device_catalogue(path)["test-gpu"].memory_bytes == 24e9


def test_a_bad_catalogue_is_never_cached(cache_dir: Path, tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(USER_CATALOGUE.replace("memory_bytes: 16e9", "memory_bytes: -1"))
    for _ in range(2):
        with pytest.raises(catalogue.CatalogueError, match="memory_bytes"):
            catalogue.load_device_catalogue(path)
    assert not _files(cache_dir, "catalogue")


def test_the_mee_simulation_reads_back_the_same_numbers(cache_dir: Path) -> None:
    pattern = mee.AccessPattern(streams=2, write=True, footprint_bytes=1 << 26)
    cache = mee.MetadataCache(capacity_bytes=8192, ways=4)
    computed = mee._simulate_lines(pattern, cache, None, 2048)
    mee._simulate.cache_clear()
    first = mee._simulate(pattern, cache, None, 2048)  # computed, stored
    mee._simulate.cache_clear()
    again = mee._simulate(pattern, cache, None, 2048)  # read from disk
    assert first == again == computed
    assert _files(cache_dir, "mee-metadata")
