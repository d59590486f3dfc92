"""Output folders hetsim owns: a marker file, refusal of anything else, no data loss.

hetsim writes results (``run --out``, ``sweep --out``, ``plot --out``, ``fidelity
--out``) only into a directory that is absent, empty, or holds the marker file
:data:`MARKER` (JSON: hetsim version, kind, run key or scenario hash, the relative
paths of the files hetsim wrote there and the SHA-256 of each). Anything else -- a
folder of other files, a regular file, a device, a symbolic link, a folder that cannot
be written -- is refused with one line (:class:`OutputRefused`, exit 2). ``force`` lets
hetsim add its outputs beside files it did not write; it still never deletes, renames
or overwrites a file it did not write (a name clash is refused even then).

A file counts as hetsim's only when all of these hold: the marker lists it under a
plain relative path (no ``..``, no absolute path; a marker listing one is refused as
not hetsim's), every folder on the way to it is a real folder (no symbolic link), it is
a regular file, and its bytes still hash to what the marker recorded when hetsim wrote
it. Anything else in the folder is the user's: kept, never overwritten. Old outputs are
removed one by one, each re-hashed through no link just before it is unlinked.

Replacing an earlier result folder is atomic when the folder holds only hetsim's files
(build a temporary sibling, move the old one aside, rename, delete the old one's
verified files); with other files present, each output is renamed into place and the
marker (written first with the union of old and new files, last with the new ones)
says which are hetsim's. The new folder keeps the mode of the one it replaces. A
refusal of the file system (read-only, full disk) is one line and leaves the target
as it was. Temporaries carry hetsim's mark in their name (:func:`atomic.temp_name`)
and, for folders, a marker naming the temporary; :func:`clean_stale` removes only
those of dead processes and restores a folder left aside by a writer killed between
two renames.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from hetsim.simulator.atomic import (
    DIR_MODE,
    atomic_write,
    atomic_write_text,
    check_writable_target,
    parse_temp_name,
    temp_name,
)
from hetsim.simulator.errors import ScenarioError

MARKER = ".hetsim.json"
OutputKind = Literal["run", "sweep", "plot", "fidelity"]
TRACE_GENERATOR = "hetsim"
"""``otherData.generator`` of a hetsim trace file: how ``--trace`` recognises its own."""
TRACE_SNIFF_BYTES = 4096
MAX_MARKER_BYTES = 16 << 20
_CHUNK = 1 << 20
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)


class OutputRefused(ScenarioError):
    """An output path hetsim will not write to: ``PATH: message``."""

    def __init__(self, path: str | Path, option: str, message: str) -> None:
        super().__init__(str(path), option, message)


def content_key(data: Any) -> str:
    """Stable 16-hex-digit hash of a JSON-able value (keys sorted)."""
    text = json.dumps(data, sort_keys=True, default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# ---- paths inside a folder, reached through no link -----------------------------------
def safe_rel(rel: Any) -> bool:
    """Whether ``rel`` is a plain relative path inside a folder: posix, no empty, ``.``
    or ``..`` part, not absolute, no NUL or backslash (a trailing ``/``: a folder)."""
    if not isinstance(rel, str) or not rel or "\x00" in rel or "\\" in rel:
        return False
    body = rel[:-1] if rel.endswith("/") else rel
    return not body.startswith("/") and all(p not in ("", ".", "..") for p in body.split("/"))


@contextmanager
def _parent_fd(folder: Path, rel: str) -> Iterator[tuple[int, str]]:
    """A descriptor of ``rel``'s folder, opened from ``folder`` one real folder at a
    time (a symbolic link on the way is an OSError), and ``rel``'s last name."""
    parts = rel.rstrip("/").split("/")
    fd = os.open(folder, _DIR_FLAGS)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
        yield fd, parts[-1]
    finally:
        os.close(fd)


def file_digest(folder: Path, rel: str) -> str | None:
    """SHA-256 of the regular file ``folder/rel`` reached through no link (None if it
    is anything else, or missing)."""
    if not safe_rel(rel) or rel.endswith("/"):
        return None
    try:
        with _parent_fd(folder, rel) as (dir_fd, name):
            return _digest_at(dir_fd, name)
    except OSError:
        return None


def _digest_at(dir_fd: int, name: str) -> str | None:
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)  # a FIFO opens without blocking
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        h = hashlib.sha256()
        while chunk := os.read(fd, _CHUNK):
            h.update(chunk)
        return h.hexdigest()
    finally:
        os.close(fd)


def make_dirs_within(folder: Path, rel: str, option: str = "--out") -> None:
    """Create ``folder/rel`` (a folder) as real folders; a link or file on the way is
    refused."""
    path = folder
    for part in rel.rstrip("/").split("/"):
        path = path / part
        try:
            path.mkdir(mode=DIR_MODE)
        except FileExistsError:
            pass
        except OSError as e:
            raise OutputRefused(path, option, f"cannot write here: {e.strerror}") from None
        if not stat.S_ISDIR(path.lstat().st_mode):
            raise OutputRefused(path, option, "is not a folder (a symbolic link or a file); "
                                "hetsim writes through no link")  # fmt: skip


def check_dirs_within(folder: Path, rel: str, option: str = "--out") -> None:
    """Refuse ``folder/rel`` (a folder hetsim will write into) if a part of it that
    exists is a symbolic link or not a folder."""
    path = folder
    for part in rel.rstrip("/").split("/"):
        path = path / part
        try:
            mode = path.lstat().st_mode
        except FileNotFoundError:
            return
        except OSError as e:
            raise OutputRefused(path, option, f"cannot inspect: {e.strerror}") from None
        if not stat.S_ISDIR(mode):
            raise OutputRefused(path, option, "is not a folder (a symbolic link or a file); "
                                "hetsim writes through no link")  # fmt: skip


def _unlink_verified(folder: Path, rel: str, digests: set[str]) -> bool:
    """Unlink ``folder/rel`` if it is a regular file, reached through no link, whose
    bytes hash to one of ``digests``; whether it was."""
    try:
        with _parent_fd(folder, rel) as (dir_fd, name):
            if _digest_at(dir_fd, name) not in digests:
                return False
            os.unlink(name, dir_fd=dir_fd)
            return True
    except OSError:
        return False


# ---- the marker -----------------------------------------------------------------------
def _load_marker(folder: Path) -> tuple[dict[str, Any] | None, str | None]:
    """(marker, None), (None, None) if there is no hetsim marker, or (None, problem) for
    a hetsim marker that lists a path hetsim never writes."""
    path = folder / MARKER
    try:
        st = path.lstat()
        if not stat.S_ISREG(st.st_mode) or st.st_size > MAX_MARKER_BYTES:
            return None, None
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None, None
    if not isinstance(data, dict) or data.get("generator") != TRACE_GENERATOR:
        return None, None
    files = data.get("files", [])
    if not isinstance(files, list) or not all(isinstance(f, str) for f in files):
        return None, "is malformed (files)"
    for rel in files:
        if not safe_rel(rel) or rel == MARKER:
            return None, f"lists {rel!r}, a path outside the folder"
    digests = data.get("sha256", {})
    if not isinstance(digests, dict) or not all(
        isinstance(v, list) and all(isinstance(h, str) for h in v) for v in digests.values()
    ):
        return None, "is malformed (sha256)"
    return data, None


def read_marker(folder: Path) -> dict[str, Any] | None:
    """The marker of ``folder`` (None if absent, not a hetsim marker, or forged)."""
    return _load_marker(folder)[0]


def _digests(marker: dict[str, Any] | None) -> dict[str, set[str]]:
    return {k: set(v) for k, v in ((marker or {}).get("sha256") or {}).items()}


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


def _is_shard(rel: str) -> bool:
    return rel.startswith("shards/") and rel.endswith(".parquet") and "/" not in rel[7:]


def owned_file(folder: Path, rel: str, marker: dict[str, Any] | None = None) -> bool:
    """Whether ``folder/rel`` is provably hetsim's (see the module's docstring)."""
    marker = read_marker(folder) if marker is None else marker
    if marker is None or not safe_rel(rel):
        return False
    if rel == MARKER:
        return True
    if rel.endswith("/"):
        return rel in marker["files"] or (marker.get("kind") == "sweep" and rel == "shards/")
    if marker.get("kind") == "sweep" and _is_shard(rel):
        return file_digest(folder, rel) is not None
    return rel in marker["files"] and file_digest(folder, rel) in _digests(marker).get(rel, ())


def _owned_entries(folder: Path, marker: dict[str, Any] | None) -> set[str]:
    return {r for r in _tree(folder) if owned_file(folder, r, marker)} if marker else set()


def foreign_files(folder: Path) -> list[str]:
    """Entries of ``folder`` that hetsim did not provably write (sorted)."""
    marker = read_marker(folder)
    owned = _owned_entries(folder, marker)
    return sorted(r for r in _tree(folder) if r not in owned)


def _marker_text(
    kind: OutputKind, files: list[str], digests: dict[str, set[str]], **extra: Any
) -> str:
    from hetsim.simulator.version import __version__

    body = {"generator": TRACE_GENERATOR, "hetsim_version": __version__, "kind": kind, **extra}
    body["files"] = sorted(files)
    body["sha256"] = {f: sorted(digests[f]) for f in sorted(files) if digests.get(f)}
    return json.dumps(body, indent=2) + "\n"


def _extra(marker: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in marker.items()
            if k not in ("generator", "hetsim_version", "kind", "files", "sha256")}  # fmt: skip


# ---- checks -----------------------------------------------------------------------------
def check_path_text(path: str | Path, what: str) -> Path:
    """``path`` as a Path, refusing text no file system accepts (a NUL byte, empty)."""
    text = str(path)
    if not text or "\x00" in text:
        raise OutputRefused(repr(text), what, "not a usable path")
    return Path(text)


def _writable(path: Path) -> bool:
    return os.access(path, os.W_OK | os.X_OK)


def check_can_create(dest: Path, what: str) -> None:
    """Refuse an absent ``dest`` whose nearest existing folder cannot be written."""
    parent = dest.parent
    while not os.path.lexists(parent) and parent != parent.parent:
        parent = parent.parent
    try:
        is_dir = stat.S_ISDIR(parent.stat().st_mode)
    except OSError as e:
        raise OutputRefused(dest, what, f"cannot write here: {e.strerror}") from None
    if not is_dir:
        raise OutputRefused(dest, what, f"cannot write here: {parent} is not a folder")
    if not _writable(parent):
        raise OutputRefused(dest, what, "cannot write here: Permission denied")


def check_output_dir(
    path: str | Path, kind: OutputKind, *, force: bool = False, what: str = "--out"
) -> dict[str, Any] | None:
    """Refuse ``path`` unless hetsim may write ``kind`` results there; its marker if any.

    Allowed: absent (in a folder that can be written), an empty folder, a folder with a
    marker of the same kind, or (with ``force``) any folder. Never a symbolic link,
    anything that is not a folder, a folder that cannot be written, or a folder whose
    marker lists a path outside it.
    """
    dest = check_path_text(path, what)
    try:
        st = dest.lstat()
    except FileNotFoundError:
        check_can_create(dest, what)
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
    marker, problem = _load_marker(dest)
    if problem is not None:
        raise OutputRefused(
            dest, what, f"its {MARKER} {problem}; hetsim did not write that marker: remove "
            "it, or choose another folder",
        )  # fmt: skip
    if marker is not None and marker.get("kind") != kind:
        raise OutputRefused(
            dest, what, f"holds hetsim {marker.get('kind')} results, not a {kind}'s; "
            "choose another folder",
        )  # fmt: skip
    if not _writable(dest):
        raise OutputRefused(dest, what, "cannot write here: Permission denied")
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


# ---- temporaries ------------------------------------------------------------------------
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


def _temp_marker(path: Path) -> bool:
    """Whether the folder ``path`` holds the marker hetsim writes into a temporary."""
    try:
        if not stat.S_ISREG((path / MARKER).lstat().st_mode):
            return False
        data = json.loads((path / MARKER).read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    return (isinstance(data, dict) and data.get("generator") == TRACE_GENERATOR
            and data.get("temporary") == path.name)  # fmt: skip


def _remove_verified_tree(folder: Path, marker: dict[str, Any]) -> bool:
    """Remove what ``folder`` provably holds of hetsim's (its verified files, then its
    marker and the folders left empty); whether the folder itself is gone."""
    digests = _digests(marker)
    for rel in marker.get("files", []):
        if not rel.endswith("/"):
            _unlink_verified(folder, rel, digests.get(rel, set()))
    marker_path = folder / MARKER
    try:
        if stat.S_ISREG(marker_path.lstat().st_mode):
            marker_path.unlink()
    except OSError:
        pass
    for root, dirs, _files in os.walk(folder, topdown=False):
        for name in dirs:
            p = Path(root) / name
            if not p.is_symlink():
                with contextlib.suppress(OSError):  # not empty: something not hetsim's
                    p.rmdir()
    try:
        folder.rmdir()
    except OSError:
        return False
    return True


def clean_stale(parent: Path, name: str | None = None) -> int:
    """Remove temporaries of dead hetsim writers in ``parent`` (for target ``name``, or
    all); a folder moved aside whose target is missing is renamed back. Only entries
    whose name carries hetsim's mark count, and a folder only with hetsim's marker in
    it. Returns how many entries were removed or restored."""
    try:
        entries = list(os.scandir(parent))
    except OSError:
        return 0
    count = 0
    for entry in entries:
        parsed = parse_temp_name(entry.name)
        if parsed is None or (name is not None and parsed[0] != name) or _alive(parsed[2]):
            continue
        target, what, _pid = parsed
        path = Path(entry.path)
        try:
            is_dir = entry.is_dir(follow_symlinks=False)
            if what == "old":
                marker = read_marker(path) if is_dir else None
                if marker is None:
                    continue  # not provably ours: leave it
                if not os.path.lexists(parent / target):
                    os.replace(path, parent / target)
                elif not _remove_verified_tree(path, marker):
                    continue
            elif is_dir:
                marker = read_marker(path)
                if _temp_marker(path):
                    shutil.rmtree(path)  # a temporary hetsim was writing: never follows links
                elif marker is None or not _remove_verified_tree(path, marker):
                    continue
            elif entry.is_file(follow_symlinks=False):
                path.unlink()
            else:
                continue
        except OSError:
            continue
        count += 1
    return count


def _make_parents(folder: Path) -> list[Path]:
    """Create ``folder`` and its missing parents; the ones created, outermost first."""
    missing: list[Path] = []
    p = folder
    while not os.path.lexists(p) and p != p.parent:
        missing.append(p)
        p = p.parent
    created: list[Path] = []
    try:
        for q in reversed(missing):
            q.mkdir()
            created.append(q)
    except OSError:
        _remove_empty(created)
        raise
    return created


def _remove_empty(created: list[Path]) -> None:
    for q in reversed(created):
        try:
            q.rmdir()
        except OSError:
            break


def _make_temp_dir(parent: Path, name: str) -> Path:
    while True:
        tmp = parent / temp_name(name, "tmp")
        try:
            tmp.mkdir(mode=DIR_MODE)
        except FileExistsError:
            continue
        tmp.chmod(DIR_MODE)
        body = {"generator": TRACE_GENERATOR, "temporary": tmp.name, "pid": os.getpid()}
        (tmp / MARKER).write_text(json.dumps(body) + "\n")
        return tmp


# ---- writing a folder -------------------------------------------------------------------
@contextmanager
def output_dir(
    target: str | Path, kind: OutputKind, *, force: bool = False, **marker: Any
) -> Iterator[Path]:
    """Yield a temporary folder; on success its files become ``target``'s hetsim outputs.

    ``target`` is checked (:func:`check_output_dir`) before and again at install. On an
    exception (a full disk included) the temporary folder and any parent folder made
    for it are removed and ``target`` is untouched. ``marker`` entries (e.g.
    ``run_key``) go into the marker file.
    """
    dest = check_path_text(target, "--out")
    check_output_dir(dest, kind, force=force)
    created: list[Path] = []
    try:
        created = _make_parents(dest.parent)
        clean_stale(dest.parent, dest.name)
        tmp = _make_temp_dir(dest.parent, dest.name)
    except OSError as e:
        _remove_empty(created)
        raise OutputRefused(dest, "--out", f"cannot write here: {e.strerror}") from None
    try:
        yield tmp
        (tmp / MARKER).unlink()  # the temporary's own marker
        files = sorted(_tree(tmp))
        digests = {f: {d} for f in files if (d := file_digest(tmp, f)) is not None}
        (tmp / MARKER).write_text(_marker_text(kind, files, digests, **marker))
        _install(tmp, dest, kind, force, files, digests)
    except OSError as e:
        _discard(tmp, created)
        raise OutputRefused(dest, "--out", f"cannot write: {e.strerror}") from None
    except BaseException:
        _discard(tmp, created)
        raise
    _discard(tmp, [])


def _discard(tmp: Path, created: list[Path]) -> None:
    """Remove the temporary folder (if still there) and the parents made for it."""
    if os.path.lexists(tmp):
        shutil.rmtree(tmp, ignore_errors=True)
    _remove_empty(created)


def _overlap(a: str, b: str) -> bool:
    """Whether relative paths ``a`` and ``b`` are equal or one lies inside the other."""
    a, b = a.rstrip("/"), b.rstrip("/")
    return a == b or a.startswith(b + "/") or b.startswith(a + "/")


def _install(
    tmp: Path,
    dest: Path,
    kind: OutputKind,
    force: bool,
    files: list[str],
    digests: dict[str, set[str]],
) -> None:
    old = check_output_dir(dest, kind, force=force)
    if not os.path.lexists(dest):
        os.replace(tmp, dest)
        return
    tmp.chmod(stat.S_IMODE(dest.stat().st_mode))  # the folder keeps its mode
    present = _tree(dest)
    if not present:
        os.replace(tmp, dest)  # rename(2) replaces an empty folder
        return
    owned = _owned_entries(dest, old)
    foreign = present - owned
    if not foreign and old is not None:  # only hetsim's files: swap the whole folder
        aside = dest.parent / temp_name(dest.name, "old")
        os.replace(dest, aside)
        os.replace(tmp, dest)
        _remove_verified_tree(aside, old)
        return
    new = set(files) | {MARKER}
    clash = sorted(r for r in foreign if any(_overlap(r, n) for n in new))
    if clash:
        raise OutputRefused(
            dest, "--out", f"{clash[0]!r} is not hetsim's and would be overwritten; move it "
            "or choose another folder",
        )  # fmt: skip
    old_files = [f for f in (old or {}).get("files", []) if f not in new and f in owned]
    old_digests = _digests(old)
    union = {f: digests.get(f, set()) | old_digests.get(f, set()) for f in {*files, *old_files}}
    atomic_write_text(dest / MARKER, _marker_text(kind, sorted(union), union, complete=False))
    for rel in files:
        parent = rel.rstrip("/").rpartition("/")[0]
        if rel.endswith("/"):
            make_dirs_within(dest, rel)
            continue
        if parent:
            make_dirs_within(dest, parent)
        check_writable_target(dest / rel)
        os.replace(tmp / rel, dest / rel)
    for rel in old_files:  # earlier outputs of hetsim this run did not write again
        _unlink_verified(dest, rel, old_digests.get(rel, set()))
    os.replace(tmp / MARKER, dest / MARKER)


def write_owned(
    folder: Path, rel: str, write: Callable[[Path], object], kind: OutputKind | None = None
) -> Path:
    """Write ``folder/rel`` atomically (through real folders only) and record it in the
    folder's marker; an existing file there must be hetsim's (:func:`owned_file`)."""
    parent = rel.rpartition("/")[0]
    if parent:
        make_dirs_within(folder, parent)
    path = folder / rel
    if os.path.lexists(path) and not owned_file(folder, rel):
        raise OutputRefused(path, "", "exists and hetsim did not write it; move it or choose "
                            "another --out")  # fmt: skip
    atomic_write(path, write)
    record_files(folder, [rel], kind=kind)
    return path


def record_files(folder: str | Path, files: list[str], kind: OutputKind | None = None) -> None:
    """Add ``files`` (paths relative to ``folder``, written there by hetsim after the
    results, e.g. figures) to the folder's marker with their SHA-256, so later runs
    treat them as hetsim's own (replace or remove them) instead of as the user's. A
    folder without a marker gets one of ``kind`` (None: refused, not a folder hetsim
    made). Each file must be a regular file inside the folder, reached through no link."""
    dest = Path(folder)
    marker = read_marker(dest)
    if marker is None and kind is not None:
        marker = {"kind": kind, "files": []}
    if marker is None:
        raise OutputRefused(dest, "", f"no {MARKER}: not a folder hetsim made")
    digests = _digests(marker)
    rels = [Path(f).as_posix() for f in files]
    for rel in rels:
        digest = file_digest(dest, rel)
        if digest is None:
            raise OutputRefused(dest / rel, "", "is not a regular file inside the folder "
                                "(reached through no link)")  # fmt: skip
        digests[rel] = {digest}
    text = _marker_text(marker["kind"], sorted(set(marker["files"]) | set(rels)), digests,
                        **_extra(marker))  # fmt: skip
    atomic_write_text(dest / MARKER, text)


# ---- sweeps ---------------------------------------------------------------------------
def open_sweep_dir(
    target: str | Path, scenario_hash: str, *, resume: bool, force: bool = False
) -> Path:
    """Check (and create, with its marker) the folder of a sweep's shards.

    A folder with shards needs ``resume``; ``resume`` needs a hetsim sweep folder of
    the same scenario (``force`` accepts another scenario's shards: run keys keep
    points apart, so none is reused wrongly). ``shards`` must be a real folder.
    """
    what = "--resume" if resume else "--out"
    dest = check_path_text(target, what)
    marker = check_output_dir(dest, "sweep", force=force, what=what)
    if resume and marker is None and not force:
        raise OutputRefused(dest, what, f"not a sweep folder made by hetsim (no {MARKER})")
    shards = dest / "shards"
    if os.path.lexists(shards) and not stat.S_ISDIR(shards.lstat().st_mode):
        raise OutputRefused(shards, what, "is not a folder (a symbolic link or a file); "
                            "hetsim writes its shards through no link")  # fmt: skip
    if marker is not None:
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
        text = _marker_text("sweep", files, _digests(marker), scenario_hash=scenario_hash,
                            complete=False)  # fmt: skip
        atomic_write_text(dest / MARKER, text, what)
        make_dirs_within(dest, "shards", what)
        clean_stale(shards)
    except OSError as e:
        raise OutputRefused(dest, what, f"cannot write here: {e.strerror}") from None
    return dest


def finish_sweep_dir(folder: Path, scenario_hash: str, files: list[str]) -> None:
    """Record the sweep's table files (with their SHA-256) in its marker: complete."""
    digests = {f: {d} for f in files if (d := file_digest(folder, f)) is not None}
    atomic_write_text(
        folder / MARKER,
        _marker_text("sweep", files, digests, scenario_hash=scenario_hash, complete=True),
    )


def check_sweep_file(folder: Path, name: str) -> None:
    """Refuse to overwrite ``folder/name`` unless hetsim provably wrote it."""
    path = folder / name
    if not os.path.lexists(path):
        return
    if not owned_file(folder, name):
        raise OutputRefused(path, "", "is not hetsim's; hetsim will not overwrite it")
    check_writable_target(path)


# ---- trace files ----------------------------------------------------------------------
def check_trace_target(path: str | Path, *, force: bool = False) -> Path:
    """Refuse a ``--trace`` path that exists and is not a trace hetsim wrote, or that
    cannot be written (checked before the run, so a long run is not lost).

    ``force`` does not change this: a file hetsim did not write is never overwritten.
    """
    dest = check_path_text(path, "--trace")
    try:
        st = dest.lstat()
    except FileNotFoundError:
        check_can_create(dest, "--trace")
        return dest
    except OSError as e:
        raise OutputRefused(dest, "--trace", f"cannot inspect: {e.strerror}") from None
    if not stat.S_ISREG(st.st_mode):
        raise OutputRefused(dest, "--trace", "exists and is not a regular file; hetsim will "
                                  "not replace it")  # fmt: skip
    try:
        fd = os.open(dest, _FILE_FLAGS)
        try:
            head = os.read(fd, TRACE_SNIFF_BYTES)
        finally:
            os.close(fd)
    except OSError as e:
        raise OutputRefused(dest, "--trace", f"cannot read: {e.strerror}") from None
    if f'"generator": "{TRACE_GENERATOR}"'.encode() not in head:
        raise OutputRefused(dest, "--trace", "exists and is not a trace hetsim wrote; hetsim "
                                  "will not overwrite it")  # fmt: skip
    if not _writable(dest.parent):
        raise OutputRefused(dest, "--trace", "cannot write here: Permission denied")
    return dest
