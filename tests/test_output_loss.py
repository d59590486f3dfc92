"""Every path by which an output once deleted or overwrote a user's file, each checked
byte for byte: a forged marker, a symlinked figures folder, a user folder named like a
temporary, a user's report under ``fidelity --out``, an edited or replaced output; and
the refusals of the file system (a read-only folder, a full disk), which must leave the
folder exactly as it was.

Each case lost data before the marker's paths were checked and its files hashed.
"""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path

import pytest

from hetsim.simulator.cli import main
from hetsim.simulator.outdir import MARKER, read_marker, record_files
from tests.cli_helpers import TINY
from tests.test_fidelity import _setup as fidelity_setup


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(TINY)
    return path


def snapshot(root: Path) -> dict[str, tuple[str, bytes | str]]:
    """Every entry below ``root`` (hidden ones and markers too): a file's bytes, a
    link's target, a folder's mode."""
    out: dict[str, tuple[str, bytes | str]] = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = Path(dirpath) / name
            rel = str(p.relative_to(root))
            if p.is_symlink():
                out[rel] = ("link", os.readlink(p))
            elif p.is_dir():
                out[rel] = ("dir", oct(p.stat().st_mode))
            else:
                out[rel] = ("file", p.read_bytes())
    return out


def user_files(root: Path, names: dict[str, bytes]) -> dict[str, tuple[str, bytes | str]]:
    for rel, data in names.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)
    return snapshot(root)


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main([*argv, "-q"])
    return code, capsys.readouterr().err.strip()


def one_line_refusal(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, err = cli(capsys, *argv)
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


# ---- 1. a forged marker ---------------------------------------------------------------
@pytest.mark.parametrize("listed", ["../victim/important.txt", "ABSOLUTE", "a/../../victim/x"])
def test_forged_marker_listing_paths_outside_is_refused(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str], listed: str
) -> None:
    victim = tmp_path / "victim"
    before_victim = user_files(victim, {"important.txt": b"my thesis", "x": b"x"})
    out = tmp_path / "R"
    assert cli(capsys, "run", str(scenario), "--out", str(out)) == (0, "")
    (out / "notes.txt").write_bytes(b"mine")  # a user file: the per-file path runs
    marker = json.loads((out / MARKER).read_text())
    path = str(victim / "important.txt") if listed == "ABSOLUTE" else listed
    marker["files"].append(path)
    marker.setdefault("sha256", {})[path] = ["0" * 64]
    (out / MARKER).write_text(json.dumps(marker))
    before_out = snapshot(out)
    for extra in ([], ["--force"]):
        err = one_line_refusal(capsys, "run", str(scenario), "--out", str(out), *extra)
        assert f"{MARKER} lists {path!r}, a path outside the folder" in err
        assert snapshot(victim) == before_victim and snapshot(out) == before_out
    assert read_marker(out) is None  # never taken for hetsim's


# ---- 2. a symlinked figures folder ----------------------------------------------------
def _result_with_figures(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str]
) -> Path:
    """A result folder whose figures hetsim recorded (as ``--plots`` does), moved by the
    user into their paper folder and left as a symbolic link."""
    out = tmp_path / "R"
    assert cli(capsys, "run", str(scenario), "--out", str(out)) == (0, "")
    (out / "figures").mkdir()
    for name in ("latency-cdf.png", "latency-cdf.svg"):
        (out / "figures" / name).write_bytes(f"figure {name}".encode())
    record_files(out, ["figures/latency-cdf.png", "figures/latency-cdf.svg"])
    paper = tmp_path / "paper"
    paper.mkdir()
    (out / "figures").rename(paper / "figures")
    (out / "figures").symlink_to(paper / "figures", target_is_directory=True)
    return out


def test_symlinked_figures_folder_is_never_followed(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = _result_with_figures(tmp_path, scenario, capsys)
    paper = tmp_path / "paper"
    before = user_files(paper, {"paper.tex": b"\\section{Results}"})
    assert cli(capsys, "run", str(scenario), "--out", str(out), "--seed", "2") == (0, "")
    assert snapshot(paper) == before  # the figures behind the link are still there
    assert (out / "figures").is_symlink()  # the user's link, kept
    err = one_line_refusal(capsys, "run", str(scenario), "--out", str(out), "--plots")
    assert "figures" in err and "symbolic link" in err
    err = one_line_refusal(capsys, "plot", str(out))
    assert "symbolic link" in err
    assert snapshot(paper) == before


# ---- 3. a user folder named like a temporary ------------------------------------------
def test_user_entries_named_like_temporaries_are_kept(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parent = tmp_path / "work"
    dead = 99999 if not _alive(99999) else 2**22 + 12345
    aside = {"generator": "hetsim", "kind": "run", "files": ["a.csv"], "sha256": {}}
    before = user_files(parent, {
        f".out.tmp-{dead}-mybackup/thesis.tex": b"chapter 1",
        f".out.tmp-{dead}-mybackup/data/raw.bin": b"\x00\x01",
        f".out.tmp-{dead}-abc": b"a file named like atomic_write's temporary",
        f".out.old-{dead}/{MARKER}": json.dumps(aside).encode(),
        f".out.old-{dead}/a.csv": b"a copy the user keeps",
    })  # fmt: skip
    assert cli(capsys, "run", str(scenario), "--out", str(parent / "out")) == (0, "")
    after = snapshot(parent)
    assert {k: v for k, v in after.items() if not k.startswith("out")} == before


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True


# ---- 4. a user's report under fidelity --out -----------------------------------------
def test_fidelity_out_never_overwrites_a_users_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cal, rows = fidelity_setup(tmp_path)  # two hand-worked rows: a quick report
    base = ["fidelity", "--rows", str(rows), "--calibration-dir", str(cal)]
    out = tmp_path / "paper"
    before = user_files(out, {"report.md": b"# my own report\n", "fig.pdf": b"%PDF"})
    err = one_line_refusal(capsys, *base, "--out", str(out))
    assert "holds files hetsim did not write" in err and "--force" in err
    assert snapshot(out) == before
    err = one_line_refusal(capsys, *base, "--out", str(out), "--force")
    assert "'report.md' is not hetsim's" in err
    assert snapshot(out) == before
    (out / "report.md").unlink()  # without the clash, --force writes beside the rest
    del before["report.md"]
    assert cli(capsys, *base, "--out", str(out), "--force")[0] == 0
    after = snapshot(out)
    assert {k: after[k] for k in before} == before
    assert (out / "report.csv").exists() and read_marker(out)["kind"] == "fidelity"
    own = tmp_path / "own"  # a folder of hetsim's own report is replaced
    assert cli(capsys, *base, "--out", str(own))[0] == 0
    assert cli(capsys, *base, "--out", str(own))[0] == 0
    assert sorted(p.name for p in own.iterdir()) == [MARKER, "report.csv", "report.md"]


# ---- 5. outputs edited or replaced by the user are the user's -------------------------
def test_edited_or_replaced_outputs_are_the_users(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "R"
    elsewhere = tmp_path / "mine.yaml"
    elsewhere.write_bytes(b"my scenario")
    assert cli(capsys, "run", str(scenario), "--out", str(out)) == (0, "")
    (out / "summary.csv").write_bytes(b"my edited summary")  # same name, other bytes
    before = snapshot(out)
    err = one_line_refusal(capsys, "run", str(scenario), "--out", str(out))
    assert "'summary.csv' is not hetsim's" in err
    assert snapshot(out) == before
    # an old output the next run does not write again (csv -> parquet), edited: kept
    assert cli(capsys, "run", str(scenario), "--out", str(tmp_path / "P")) == (0, "")
    (tmp_path / "P" / "tables" / "requests.csv").write_bytes(b"my edit")
    assert cli(capsys, "run", str(scenario), "--out", str(tmp_path / "P"), "--format",
               "parquet") == (0, "")  # fmt: skip
    assert (tmp_path / "P" / "tables" / "requests.csv").read_bytes() == b"my edit"
    assert not (tmp_path / "P" / "summary.csv").exists()  # hetsim's own: removed
    # an output replaced by a link to the user's file: neither end is touched
    (out / "summary.csv").unlink()
    (out / "scenario.yaml").unlink()
    (out / "scenario.yaml").symlink_to(elsewhere)
    err = one_line_refusal(capsys, "run", str(scenario), "--out", str(out))
    assert "'scenario.yaml' is not hetsim's" in err
    assert elsewhere.read_bytes() == b"my scenario" and (out / "scenario.yaml").is_symlink()


# ---- the file system refuses ------------------------------------------------------------
def _read_only(monkeypatch: pytest.MonkeyPatch, folder: Path) -> None:
    """Make ``folder`` read-only; root ignores modes, so there the permission check
    is made to answer as it does for any other user."""
    folder.chmod(0o555)
    if os.geteuid() == 0:
        real = os.access

        def access(path: object, mode: int, **kw: object) -> bool:
            if Path(str(path)) == folder and mode & os.W_OK:
                return False
            return real(path, mode, **kw)  # type: ignore[arg-type]

        monkeypatch.setattr(os, "access", access)


def test_empty_read_only_folder_is_not_damaged(
    tmp_path: Path,
    scenario: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    _read_only(monkeypatch, ro)
    try:
        inode = ro.stat().st_ino
        err = one_line_refusal(capsys, "run", str(scenario), "--out", str(ro))
        assert err == f"{ro}: --out: cannot write here: Permission denied"
        assert ro.stat().st_ino == inode and oct(ro.stat().st_mode)[-3:] == "555"
        assert list(ro.iterdir()) == []
        for option in ("--out", "--trace"):
            target = ro / "x"
            err = one_line_refusal(capsys, "run", str(scenario), option, str(target))
            assert err == f"{target}: {option}: cannot write here: Permission denied"
            assert list(ro.iterdir()) == []
        assert sorted(p.name for p in tmp_path.iterdir()) == ["ro", "s.yaml"]
    finally:
        ro.chmod(0o755)


def test_full_disk_leaves_the_folder_as_it_was(
    tmp_path: Path,
    scenario: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from hetsim.simulator.result import Result

    out = tmp_path / "R"
    assert cli(capsys, "run", str(scenario), "--out", str(out)) == (0, "")
    (out / "notes.txt").write_bytes(b"mine")
    before = snapshot(tmp_path)
    real = Result._write

    def full(path: Path, *args: object) -> None:
        if path.name.startswith("requests"):
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(Result, "_write", staticmethod(full))
    err = one_line_refusal(capsys, "run", str(scenario), "--out", str(out), "--seed", "4")
    assert err == f"{out}: --out: cannot write: No space left on device"
    assert snapshot(tmp_path) == before  # no temporary left, nothing replaced
    deep = tmp_path / "a" / "b" / "c"
    one_line_refusal(capsys, "run", str(scenario), "--out", str(deep))
    assert not (tmp_path / "a").exists()  # the parents made for it are gone again


def test_full_disk_while_writing_a_trace(
    tmp_path: Path,
    scenario: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trace = tmp_path / "t.json"
    assert cli(capsys, "run", str(scenario), "--trace", str(trace)) == (0, "")
    before = snapshot(tmp_path)
    real = Path.write_text

    def full(self: Path, *args: object, **kw: object) -> int:
        if self.name.startswith(".t.json.tmp-"):
            self.write_bytes(b"half a trace")  # the disk fills part way through
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(self, *args, **kw)  # type: ignore[arg-type]

    monkeypatch.setattr(Path, "write_text", full)
    err = one_line_refusal(capsys, "run", str(scenario), "--trace", str(trace), "--seed", "3")
    assert err == f"{trace}: --trace: cannot write: No space left on device"
    assert snapshot(tmp_path) == before
