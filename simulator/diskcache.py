"""A cache of pure computations kept between processes (start-up time).

Some results a run needs at build are costly and never change for given inputs: the
metadata-cache simulation of a protected stream, for one. :func:`cached` keeps such a
result in a file named by a hash of everything it comes from: the caller's ``key``
(the arguments, by their ``repr``) and the CONTENT of the ``sources`` files (the
code that computes it, the catalogue it reads), so an edited source file, another
catalogue or another argument is a different file, never a stale one.

Where: ``$HETSIM_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/hetsim``, else
``~/.cache/hetsim``; never the repository or a results folder. ``HETSIM_CACHE=off``
(or ``0``, ``no``, ``false``) turns the cache off. Files are written atomically (a
temporary renamed over, :func:`simulator.atomic.atomic_write`); a folder that cannot be
written, a missing, truncated or corrupt file, or a file whose stored key differs (a
hash collision) all fall back to computing, silently. A result read equals the one
computed (pickle keeps floats exact), so results do not depend on the cache. The folder
is trusted as the user's own files are (its files are unpickled).
"""

from __future__ import annotations

import hashlib
import os
import pickle
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")

FORMAT = 1
"""Bumped when the file layout changes (it enters every key)."""

_OFF = {"0", "off", "no", "false"}


def cache_dir() -> Path | None:
    """The cache folder, or None when the cache is off (module doc)."""
    if os.environ.get("HETSIM_CACHE", "").strip().lower() in _OFF:
        return None
    explicit = os.environ.get("HETSIM_CACHE_DIR")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "hetsim"


def content_hash(path: str | Path) -> str:
    """SHA-256 of a file's content, read each time ("missing" for a file that cannot be
    read): an edit is seen whatever its size or time stamp."""
    try:
        return hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:
        return "missing"


def full_key(namespace: str, key: str, sources: Iterable[str | Path] = ()) -> str:
    """The text a cache file's name hashes: format, namespace, key, sources' hashes."""
    parts = [f"hetsim-cache/{FORMAT}", namespace, key]
    parts += [f"{Path(s).name}:{content_hash(s)}" for s in sources]
    return "\0".join(parts)


def path_for(namespace: str, text: str) -> Path | None:
    """The file a full key is stored in (None: cache off)."""
    root = cache_dir()
    if root is None:
        return None
    name = hashlib.sha256(text.encode()).hexdigest()
    return root / namespace / f"{name}.pickle"


def cached(
    namespace: str, key: str, compute: Callable[[], T], sources: Iterable[str | Path] = ()
) -> T:
    """``compute()``, or its result stored by an earlier process for the same ``key`` and
    the same content of ``sources`` (module doc)."""
    text = full_key(namespace, key, sources)
    path = path_for(namespace, text)
    if path is None:
        return compute()
    found = _read(path, text)
    if found is not None:
        return found[0]
    value = compute()
    _write(path, text, value)
    return value


def _read(path: Path, text: str) -> tuple[Any] | None:
    try:
        stored_key, value = pickle.loads(path.read_bytes())
    except Exception:  # missing, truncated, corrupt: compute instead
        return None
    return (value,) if stored_key == text else None


def _write(path: Path, text: str, value: object) -> None:
    from hetsim.simulator.atomic import atomic_write

    try:
        data = pickle.dumps((text, value), protocol=pickle.HIGHEST_PROTOCOL)
        atomic_write(path, lambda tmp: tmp.write_bytes(data))
    except Exception:  # unwritable folder, full disk, unpicklable: skip
        return
