"""Atomic writes: results appear complete or not at all."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()
FILE_MODE = 0o666 & ~_UMASK
DIR_MODE = 0o777 & ~_UMASK
"""Modes of written files and folders: what ``open`` and ``mkdir`` would give
(``mkstemp`` and ``mkdtemp`` make private 0600 and 0700 temporaries)."""


@contextmanager
def atomic_dir(target: str | Path) -> Iterator[Path]:
    """Yield a temporary sibling directory; on success it replaces ``target``.

    On an exception the temporary directory is removed and ``target`` is untouched.
    An existing ``target`` is moved aside first and deleted only after the rename.
    """
    dest = Path(target)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-", dir=dest.parent))
    tmp.chmod(DIR_MODE)
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    old = None
    if dest.exists():
        old = dest.parent / f".{dest.name}.old-{os.getpid()}"
        os.replace(dest, old)
    os.replace(tmp, dest)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def atomic_write(target: str | Path, write: Callable[[Path], object]) -> None:
    """Call ``write`` on a temporary file beside ``target``, then rename it over."""
    dest = Path(target)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.tmp-", dir=dest.parent)
    os.fchmod(fd, FILE_MODE)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, dest)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(target: str | Path, text: str) -> None:
    """Write ``text`` to a temporary file beside ``target``, then rename it over."""
    atomic_write(target, lambda tmp: tmp.write_text(text))
