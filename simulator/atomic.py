"""Atomic writes: results appear complete or not at all."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from collections.abc import Callable
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


def check_writable_target(dest: Path) -> None:
    """Refuse to rename over anything but a regular file (a folder, a device, a link)."""
    try:
        mode = dest.lstat().st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISREG(mode):
        raise IsADirectoryError(
            errno.EISDIR, "exists and is not a regular file; hetsim will not replace it", str(dest)
        )


def atomic_write(target: str | Path, write: Callable[[Path], object]) -> None:
    """Call ``write`` on a temporary file beside ``target``, then rename it over.

    ``target`` must be absent or a regular file (never a folder, device or link). The
    temporary's name carries this process's id, so a dead writer's can be cleaned up.
    """
    dest = Path(target)
    check_writable_target(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.tmp-{os.getpid()}-", dir=dest.parent)
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
