"""Output folders hetsim owns: a marker file, refusal of anything else, no data loss.

hetsim writes results (``run --out``, ``sweep --out``) only into a directory that is
absent, empty, or holds the marker file :data:`MARKER` (JSON: hetsim version, kind,
run key or scenario hash, and the relative paths of the files hetsim wrote there).
Anything else -- a folder of other files, a regular file, a device, a symbolic link --
is refused with one line (:class:`OutputRefused`, exit 2). ``force`` lets hetsim add
its outputs beside files it did not write; it still never deletes, renames or
overwrites a file it did not write (a name clash is refused even then).

Replacing an earlier result folder is atomic when the folder holds only hetsim's files
(build a temporary sibling, move the old one aside, rename, delete the old one); with
other files present, each output is renamed into place and the marker (written first
with the union of old and new files, last with the new ones) says which are hetsim's.
Temporaries carry the writer's process id; :func:`clean_stale` removes those of dead
processes and restores a folder left aside by a writer killed between two renames.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from hetsim.simulator.atomic import DIR_MODE, atomic_write_text, check_writable_target
from hetsim.simulator.errors import ScenarioError

MARKER = ".hetsim.json"
OutputKind = Literal["run", "sweep", "plot"]
TRACE_GENERATOR = "hetsim"
"""``otherData.generator`` of a hetsim trace file: how ``--trace`` recognises its own."""
TRACE_SNIFF_BYTES = 4096


class OutputRefused(ScenarioError):
    """An output path hetsim will not write to: ``PATH: message``."""

    def __init__(self, path: str | Path, option: str, message: str) -> None:
        super().__init__(str(path), option, message)


def content_key(data: Any) -> str:
    """Stable 16-hex-digit hash of a JSON-able value (keys sorted)."""
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def read_marker(folder: Path) -> dict[str, Any] | None:
    """The marker of ``folder`` (None if absent or not a hetsim marker)."""
    path = folder / MARKER
    try:
        if not stat.S_ISREG(path.lstat().st_mode) or path.lstat().st_size > 16 << 20:
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or data.get("generator") != TRACE_GENERATOR:
        return None
    files = data.get("files", [])
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return None
    return data


def _tree(folder: Path) -> set[str]:
    """Relative paths (posix) of every file, symbolic link and empty folder below."""
    out: set[str] = set()
    for root, dirs, files in os.walk(folder):
        rel = Path(root).relative_to(folder)
        for name in files:
            out.add((rel / name).as_posix())
        for name in list(dirs):
            if (Path(root) / name).is_symlink():
                out.add((rel / name).as_posix())
                dirs.remove(name)  # never followed
        if not dirs and not files and rel != Path("."):
            out.add(rel.as_posix() + "/")
    return out


def _owned(marker: dict[str, Any] | None) -> set[str]:
    if marker is None:
        return set()
    owned = {MARKER, *marker.get("files", [])}
    if marker.get("kind") == "sweep":
        owned |= {"shards/"}
    return owned


def _is_owned(rel: str, owned: set[str], marker: dict[str, Any] | None) -> bool:
    if rel in owned:
        return True
    if marker is not None and marker.get("kind") == "sweep":
        return rel.startswith("shards/") and rel.endswith(".parquet") and "/" not in rel[7:]
    return False


def foreign_files(folder: Path) -> list[str]:
    """Entries of ``folder`` that hetsim did not write (sorted)."""
    marker = read_marker(folder)
    owned = _owned(marker)
    return sorted(r for r in _tree(folder) if not _is_owned(r, owned, marker))


def check_path_text(path: str | Path, what: str) -> Path:
    """``path`` as a Path, refusing text no file system accepts (a NUL byte, empty)."""
    text = str(path)
    if not text or "\x00" in text:
        raise OutputRefused(repr(text), what, "not a usable path")
    return Path(text)


def check_output_dir(
    path: str | Path, kind: OutputKind, *, force: bool = False, what: str = "--out"
) -> dict[str, Any] | None:
    """Refuse ``path`` unless hetsim may write ``kind`` results there; its marker if any.

    Allowed: absent, an empty folder, a folder with a marker of the same kind, or (with
    ``force``) any folder. Never a symbolic link or anything that is not a folder.
    """
    dest = check_path_text(path, what)
    try:
        st = dest.lstat()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise OutputRefused(dest, what, f"cannot inspect: {e.strerror}") from None
    if stat.S_ISLNK(st.st_mode):
        raise OutputRefused(
            dest, what, f"is a symbolic link; give the folder it points to "
            f"({os.path.realpath(dest)}) or a new path",
        )  # fmt: skip
    if not stat.S_ISDIR(st.st_mode):
        raise OutputRefused(dest, what, "exists and is not a folder; hetsim will not replace it")
    marker = read_marker(dest)
    if marker is not None and marker.get("kind") != kind:
        raise OutputRefused(
            dest, what, f"holds hetsim {marker.get('kind')} results, not a {kind}'s; "
            "choose another folder",
        )  # fmt: skip
    if marker is None and not force:
        try:
            others = sorted(os.listdir(dest))
        except OSError as e:
            raise OutputRefused(dest, what, f"cannot list: {e.strerror}") from None
        if others:
            shown = ", ".join(repr(o) for o in others[:3]) + (", ..." if len(others) > 3 else "")
            raise OutputRefused(
            dest, what, f"holds files hetsim did not write ({shown}); choose a new or "
                "empty folder, or add --force to write beside them (nothing of yours is "
                "deleted)",
            )  # fmt: skip
    return marker


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True  # exists, owned by someone else
    return True


_STALE = re.compile(r"^\.(?P<name>.+)\.(?P<what>tmp|old)-(?P<pid>\d+)(?:-.*)?$")


def clean_stale(parent: Path, name: str | None = None) -> int:
    """Remove temporaries of dead hetsim writers in ``parent`` (for target ``name``, or
    all); a folder moved aside whose target is missing is renamed back. Returns how
    many entries were removed or restored."""
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return 0
    count = 0
    for entry in entries:
        m = _STALE.match(entry.name)
        if m is None or (name is not None and m["name"] != name) or _alive(int(m["pid"])):
            continue
        path = Path(entry.path)
        if m["what"] == "old":
            target = parent / m["name"]
            if read_marker(path) is None:
                continue  # not provably ours: leave it
            if not os.path.lexists(target):
                os.replace(path, target)
            else:
                shutil.rmtree(path, ignore_errors=True)
        elif entry.is_dir(follow_symlinks=False):
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        count += 1
    return count


def _marker_text(kind: OutputKind, files: list[str], **extra: Any) -> str:
    from hetsim.simulator.version import __version__

    body = {"generator": TRACE_GENERATOR, "hetsim_version": __version__, "kind": kind, **extra}
    body["files"] = sorted(files)
    return json.dumps(body, indent=2) + "\n"


@contextmanager
def output_dir(
    target: str | Path, kind: OutputKind, *, force: bool = False, **marker: Any
) -> Iterator[Path]:
    """Yield a temporary folder; on success its files become ``target``'s hetsim outputs.

    ``target`` is checked (:func:`check_output_dir`) before and again at install. On an
    exception the temporary folder is removed and ``target`` is untouched. ``marker``
    entries (e.g. ``run_key``) go into the marker file.
    """
    dest = check_path_text(target, "--out")
    check_output_dir(dest, kind, force=force)
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        clean_stale(dest.parent, dest.name)
        tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.tmp-{os.getpid()}-", dir=dest.parent))
        tmp.chmod(DIR_MODE)
    except OSError as e:
        raise OutputRefused(dest, "--out", f"cannot write here: {e.strerror}") from None
    try:
        yield tmp
        files = sorted(_tree(tmp))
        (tmp / MARKER).write_text(_marker_text(kind, files, **marker))
        _install(tmp, dest, kind, force, files)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _overlap(a: str, b: str) -> bool:
    """Whether relative paths ``a`` and ``b`` are equal or one lies inside the other."""
    a, b = a.rstrip("/"), b.rstrip("/")
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def _install(tmp: Path, dest: Path, kind: OutputKind, force: bool, files: list[str]) -> None:
    old = check_output_dir(dest, kind, force=force)
    if not dest.exists():
        os.replace(tmp, dest)
        return
    present = _tree(dest)
    if not present:
        os.replace(tmp, dest)  # rename(2) replaces an empty folder
        return
    owned = _owned(old)
    foreign = {r for r in present if not _is_owned(r, owned, old)}
    if not foreign:  # only hetsim's files: swap the whole folder
        aside = dest.parent / f".{dest.name}.old-{os.getpid()}"
        os.replace(dest, aside)
        os.replace(tmp, dest)
        shutil.rmtree(aside, ignore_errors=True)
        return
    new = set(files) | {MARKER}
    clash = sorted(r for r in foreign if any(_overlap(r, n) for n in new))
    if clash:
        raise OutputRefused(
            dest, "--out", f"{clash[0]!r} is not hetsim's and would be overwritten; move it "
            "or choose another folder",
        )  # fmt: skip
    old_files = [f for f in (old or {}).get("files", []) if f not in new]
    union = _marker_text(kind, sorted(set(files) | set(old_files)), complete=False)
    atomic_write_text(dest / MARKER, union)
    for rel in files:
        if rel.endswith("/"):
            (dest / rel).mkdir(parents=True, exist_ok=True)
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        check_writable_target(dest / rel)
        os.replace(tmp / rel, dest / rel)
    for rel in old_files:  # earlier outputs of hetsim this run did not write again
        p = dest / rel
        if p.is_file() and not p.is_symlink():
            p.unlink()
    os.replace(tmp / MARKER, dest / MARKER)


def record_files(folder: str | Path, files: list[str], kind: OutputKind | None = None) -> None:
    """Add ``files`` (paths relative to ``folder``, written there by hetsim after the
    results, e.g. figures) to the folder's marker, so later runs treat them as hetsim's
    own (replace or remove them) instead of as the user's. A folder without a marker
    gets one of ``kind`` (None: refused, not a folder hetsim made)."""
    dest = Path(folder)
    marker = read_marker(dest)
    if marker is None and kind is not None:
        marker = {"kind": kind, "files": []}
    if marker is None:
        raise OutputRefused(dest, "", f"no {MARKER}: not a folder hetsim made")
    rel = [Path(f).as_posix() for f in files]
    extra = {k: v for k, v in marker.items() if k not in ("generator", "hetsim_version",
                                                           "kind", "files")}  # fmt: skip
    text = _marker_text(marker["kind"], sorted(set(marker["files"]) | set(rel)), **extra)
    atomic_write_text(dest / MARKER, text)


# ---- sweeps ---------------------------------------------------------------------------
def open_sweep_dir(
    target: str | Path, scenario_hash: str, *, resume: bool, force: bool = False
) -> Path:
    """Check (and create, with its marker) the folder of a sweep's shards.

    A folder with shards needs ``resume``; ``resume`` needs a hetsim sweep folder of
    the same scenario (``force`` accepts another scenario's shards: run keys keep
    points apart, so none is reused wrongly).
    """
    dest = check_path_text(target, "--resume" if resume else "--out")
    what = "--resume" if resume else "--out"
    marker = check_output_dir(dest, "sweep", force=force, what=what)
    if resume and marker is None and not force:
        raise OutputRefused(dest, what, f"not a sweep folder made by hetsim (no {MARKER})")
    if marker is not None:
        shards = dest / "shards"
        has_shards = shards.is_dir() and any(shards.glob("*.parquet"))
        if has_shards and not resume:
            raise OutputRefused(dest, what, "already holds a sweep; resume it with --resume")
        if resume and marker.get("scenario_hash") != scenario_hash and not force:
            raise OutputRefused(
            dest, what, f"holds a sweep of another scenario (hash "
                f"{marker.get('scenario_hash')}, this one {scenario_hash}); use a new --out, "
                "or --force to keep its shards",
            )  # fmt: skip
    try:
        dest.mkdir(parents=True, exist_ok=True)
        clean_stale(dest.parent, dest.name)
        files = list((marker or {}).get("files", []))
        atomic_write_text(
            dest / MARKER,
            _marker_text("sweep", files, scenario_hash=scenario_hash, complete=False),
        )
        (dest / "shards").mkdir(exist_ok=True)
        clean_stale(dest / "shards")
    except OSError as e:
        raise OutputRefused(dest, what, f"cannot write here: {e.strerror}") from None
    return dest


def finish_sweep_dir(folder: Path, scenario_hash: str, files: list[str]) -> None:
    """Record the sweep's table files in its marker (the sweep is complete)."""
    atomic_write_text(
        folder / MARKER, _marker_text("sweep", files, scenario_hash=scenario_hash, complete=True)
    )


def check_sweep_file(folder: Path, name: str) -> None:
    """Refuse to overwrite ``folder/name`` unless the marker says hetsim wrote it."""
    path = folder / name
    if not os.path.lexists(path):
        return
    marker = read_marker(folder)
    if marker is None or name not in marker.get("files", []):
        raise OutputRefused(path, "", "is not hetsim's; hetsim will not overwrite it")
    check_writable_target(path)


# ---- trace files ----------------------------------------------------------------------
def check_trace_target(path: str | Path, *, force: bool = False) -> Path:
    """Refuse a ``--trace`` path that exists and is not a trace hetsim wrote.

    ``force`` does not change this: a file hetsim did not write is never overwritten.
    """
    dest = check_path_text(path, "--trace")
    try:
        st = dest.lstat()
    except FileNotFoundError:
        return dest
    except OSError as e:
        raise OutputRefused(dest, "--trace", f"cannot inspect: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise OutputRefused(dest, "--trace", "exists and is not a regular file; hetsim will "
                                  "not replace it")  # fmt: skip
    try:
        with open(dest, "rb") as f:
            head = f.read(TRACE_SNIFF_BYTES)
    except OSError as e:
        raise OutputRefused(dest, "--trace", f"cannot read: {e.strerror}") from None
    if f'"generator": "{TRACE_GENERATOR}"'.encode() not in head:
        raise OutputRefused(dest, "--trace", "exists and is not a trace hetsim wrote; hetsim "
                                  "will not overwrite it")  # fmt: skip
    return dest
