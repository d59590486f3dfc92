"""Atomic writes: results appear complete or not at all.

Every temporary hetsim makes carries its own mark in its name:
``.<target>.<tmp|old>-<pid>-<nonce>-<check>``, where ``check`` is a hash of the target
name, the kind, the process id and the nonce (:func:`temp_name`). A file or folder of
the user's that only looks like one (``.out.tmp-99999-mybackup``) fails the check, so
the clean-up of a dead writer's temporaries (:func:`simulator.outdir.clean_stale`)
never takes it for hetsim's.
"""

from __future__ import annotations

import errno
import hashlib
import os
import re
import secrets
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from hetsim.simulator.errors import ScenarioError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_UMASK = _umask()
FILE_MODE = 0o666 & ~_UMASK
DIR_MODE = 0o777 & ~_UMASK
"""Modes of written files and folders: what ``open`` and ``mkdir`` would give."""

TempKind = Literal["tmp", "old"]
_TEMP = re.compile(
    r"^\.(?P<name>.+)\.(?P<what>tmp|old)-(?P<pid>\d+)-(?P<nonce>[0-9a-f]{8})-(?P<check>[0-9a-f]{8})$"
)


class WriteFailed(ScenarioError):
    """The file system refused a write (permission, full disk): ``PATH: option: why``."""

    def __init__(self, path: str | Path, option: str, message: str) -> None:
        super().__init__(str(path), option, message)


def _check(name: str, what: str, pid: int, nonce: str) -> str:
    text = f"hetsim-temporary\0{name}\0{what}\0{pid}\0{nonce}"
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def temp_name(name: str, what: TempKind, pid: int | None = None) -> str:
    """A fresh name for a temporary of target ``name`` (see the module's docstring)."""
    pid = os.getpid() if pid is None else pid
    nonce = secrets.token_hex(4)
    return f".{name}.{what}-{pid}-{nonce}-{_check(name, what, pid, nonce)}"


def parse_temp_name(entry: str) -> tuple[str, TempKind, int] | None:
    """(target name, kind, pid) of a name :func:`temp_name` made; None for any other."""
    m = _TEMP.match(entry)
    if m is None or _check(m["name"], m["what"], int(m["pid"]), m["nonce"]) != m["check"]:
        return None
    what: TempKind = "tmp" if m["what"] == "tmp" else "old"
    return m["name"], what, int(m["pid"])


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


def atomic_write(target: str | Path, write: Callable[[Path], object], option: str = "") -> None:
    """Call ``write`` on a temporary file beside ``target``, then rename it over.

    ``target`` must be absent or a regular file (never a folder, device or link). The
    temporary's name carries hetsim's mark (:func:`temp_name`), so a dead writer's can
    be cleaned up. A refusal of the file system (a read-only folder, a full disk) is
    :class:`WriteFailed` naming ``target`` and ``option``; the temporary is removed and
    ``target`` is as it was.
    """
    dest = Path(target)
    try:
        check_writable_target(dest)
    except IsADirectoryError as e:
        raise WriteFailed(dest, option, str(e.strerror)) from None
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        tmp = _create(dest)
    except OSError as e:
        raise WriteFailed(dest, option, f"cannot write here: {e.strerror}") from None
    try:
        write(tmp)
        os.replace(tmp, dest)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise WriteFailed(dest, option, f"cannot write: {e.strerror}") from None
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _create(dest: Path) -> Path:
    while True:
        tmp = dest.parent / temp_name(dest.name, "tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE)
        except FileExistsError:
            continue
        os.close(fd)
        return tmp


def atomic_write_text(target: str | Path, text: str, option: str = "") -> None:
    """Write ``text`` to a temporary file beside ``target``, then rename it over."""
    atomic_write(target, lambda tmp: tmp.write_text(text), option)
