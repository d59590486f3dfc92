"""Output folders: hetsim never deletes, renames or overwrites a file it did not write.

Each data-loss case is a folder or file of the user's own at the ``--out`` or
``--trace`` path; the code before the marker file deleted or replaced every one.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
import yaml

from hetsim.simulator.atomic import temp_name
from hetsim.simulator.cli import main
from hetsim.simulator.outdir import MARKER, clean_stale, record_files
from tests.cli_helpers import TINY


@pytest.fixture
def scenario(tmp_path: Path) -> Path:
    path = tmp_path / "s.yaml"
    path.write_text(TINY)
    return path


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["run", *argv, "-q"])
    err = capsys.readouterr().err.strip()
    return code, err


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code, err = run(capsys, *argv)
    assert code == 2, err
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    return err


def user_folder(path: Path) -> dict[str, bytes]:
    path.mkdir(parents=True, exist_ok=True)
    (path / "notes.txt").write_bytes(b"my notes")
    (path / "data").mkdir(exist_ok=True)
    (path / "data" / "raw.bin").write_bytes(b"\x00\x01")
    return snapshot(path)


def snapshot(path: Path) -> dict[str, bytes]:
    return {
        str(p.relative_to(path)): p.read_bytes()
        for p in sorted(path.rglob("*"))
        if p.is_file() and p.name != MARKER and not p.name.startswith(".")
    }


# ---- --out: refused targets -------------------------------------------------------------
def test_folder_of_user_files_is_refused_and_kept(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "mine"
    before = user_folder(out)
    err = refused(capsys, str(scenario), "--out", str(out))
    assert err.startswith(f"{out}: --out: holds files hetsim did not write ('data', 'notes.txt')")
    assert "--force" in err
    assert snapshot(out) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine", "s.yaml"]  # no temporaries


def test_regular_file_is_refused_and_kept(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "results"
    out.write_text("a file, not a folder")
    for extra in ([], ["--force"]):
        err = refused(capsys, str(scenario), "--out", str(out), *extra)
        assert err == f"{out}: --out: exists and is not a folder; hetsim will not replace it"
    assert out.read_text() == "a file, not a folder"


def test_device_like_node_is_refused_and_kept(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A named pipe stands in for /dev/null (which the old code replaced with a folder)."""
    out = tmp_path / "fifo"
    os.mkfifo(out)
    refused(capsys, str(scenario), "--out", str(out), "--force")
    assert stat.S_ISFIFO(out.lstat().st_mode)


def test_current_folder_is_refused(
    tmp_path: Path,
    scenario: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    project = tmp_path / "project"
    before = user_folder(project)
    monkeypatch.chdir(project)
    err = refused(capsys, str(scenario), "--out", ".")
    assert err.startswith(".: --out: holds files hetsim did not write")
    assert snapshot(project) == before


def test_symlink_is_refused_and_both_ends_kept(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "real"
    before = user_folder(target)
    link = tmp_path / "link"
    link.symlink_to(target, target_is_directory=True)
    for extra in ([], ["--force"]):
        err = refused(capsys, str(scenario), "--out", str(link), *extra)
        assert "is a symbolic link" in err
    assert link.is_symlink() and snapshot(target) == before


def test_parent_that_cannot_be_written(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    err = refused(capsys, str(scenario), "--out", str(blocker / "sub"))
    assert "Not a directory" in err or "not a folder" in err
    assert blocker.read_text() == "x"


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into read-only folders")
def test_read_only_parent(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    parent = tmp_path / "ro"
    parent.mkdir()
    parent.chmod(0o555)
    try:
        err = refused(capsys, str(scenario), "--out", str(parent / "out"))
        assert err == f"{parent / 'out'}: --out: cannot write here: Permission denied"
    finally:
        parent.chmod(0o755)


def test_read_only_parent_even_as_root(
    tmp_path: Path,
    scenario: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same error when the temporary folder cannot be made (root ignores modes, so
    the refusal of the file system is simulated)."""
    from hetsim.simulator import outdir

    def denied(*_: object, **__: object) -> str:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(outdir, "_make_temp_dir", denied)
    out = tmp_path / "ro" / "out"
    err = refused(capsys, str(scenario), "--out", str(out))
    assert err == f"{out}: --out: cannot write here: Permission denied"


def test_nul_byte_in_path_is_one_line(scenario: Path, capsys: pytest.CaptureFixture[str]) -> None:
    err = refused(capsys, str(scenario), "--out", "a\x00b")
    assert "--out: not a usable path" in err


# ---- --out: what hetsim may write -------------------------------------------------------
def test_rerun_replaces_own_outputs_and_keeps_added_files(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "r"
    assert run(capsys, str(scenario), "--out", str(out)) == (0, "")
    marker = json.loads((out / MARKER).read_text())
    assert marker["kind"] == "run" and marker["generator"] == "hetsim"
    assert "summary.csv" in marker["files"] and "tables/requests.csv" in marker["files"]
    (out / "notes.txt").write_text("mine")  # the user adds a file to a result folder
    assert run(capsys, str(scenario), "--out", str(out), "--seed", "2") == (0, "")
    assert (out / "notes.txt").read_text() == "mine"
    assert yaml.safe_load((out / "scenario.yaml").read_text())["seed"] == 2
    # parquet this time: the csv outputs of the earlier run are hetsim's, so they go
    assert run(capsys, str(scenario), "--out", str(out), "--format", "parquet") == (0, "")
    assert (out / "summary.parquet").exists() and not (out / "summary.csv").exists()
    assert (out / "notes.txt").read_text() == "mine"
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_files_recorded_after_the_run_are_hetsims_own(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Figures written into a result folder after the run, once recorded in the
    marker, are replaced or removed by the next run like its other outputs."""
    out = tmp_path / "r"
    assert run(capsys, str(scenario), "--out", str(out)) == (0, "")
    (out / "figures").mkdir()
    (out / "figures" / "a.png").write_bytes(b"png")
    record_files(out, ["figures/a.png"])
    (out / "notes.txt").write_text("mine")
    assert run(capsys, str(scenario), "--out", str(out)) == (0, "")
    assert not (out / "figures" / "a.png").exists()  # hetsim's, not written again
    assert (out / "notes.txt").read_text() == "mine"


def test_force_writes_beside_user_files_and_never_over_them(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "mine"
    before = user_folder(out)
    assert run(capsys, str(scenario), "--out", str(out), "--force") == (0, "")
    assert (out / "summary.csv").exists() and (out / MARKER).exists()
    assert {k: v for k, v in snapshot(out).items() if k in before} == before
    assert run(capsys, str(scenario), "--out", str(out), "--force", "--seed", "3") == (0, "")
    assert {k: v for k, v in snapshot(out).items() if k in before} == before
    # a user file with an output's name: refused even with --force
    clash = tmp_path / "clash"
    user_folder(clash)
    (clash / "summary.csv").write_text("my summary")
    err = refused(capsys, str(scenario), "--out", str(clash), "--force")
    assert "'summary.csv' is not hetsim's" in err
    assert (clash / "summary.csv").read_text() == "my summary"


def _dead_temporary(parent: Path, name: str, pid: int) -> Path:
    """A folder temporary as a hetsim writer killed at ``pid`` leaves it: its marked
    name and the marker naming it."""
    tmp = parent / temp_name(name, "tmp", pid)
    tmp.mkdir()
    body = {"generator": "hetsim", "temporary": tmp.name, "pid": pid}
    (tmp / MARKER).write_text(json.dumps(body))
    (tmp / "summary.csv").write_text("half")
    return tmp


def test_stale_temporaries_of_dead_writers_are_cleaned(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dead = 2**22 + 12345  # above the default pid_max: no such process
    _dead_temporary(tmp_path, "r", dead)
    (tmp_path / temp_name("r", "tmp", dead)).write_bytes(b"half a file")  # atomic_write's
    alive = _dead_temporary(tmp_path, "r", os.getppid())  # a live writer's: kept
    assert run(capsys, str(scenario), "--out", str(tmp_path / "r")) == (0, "")
    hidden = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("."))
    assert hidden == [alive.name]


def test_folder_left_aside_by_a_killed_writer_is_restored(tmp_path: Path) -> None:
    dead = 2**22 + 12345
    aside = tmp_path / temp_name("r", "old", dead)
    aside.mkdir()
    (aside / MARKER).write_text(json.dumps({"generator": "hetsim", "kind": "run", "files": []}))
    assert clean_stale(tmp_path, "r") == 1
    assert (tmp_path / "r" / MARKER).exists() and not aside.exists()
    foreign = tmp_path / temp_name("q", "old", dead)  # no marker: not provably hetsim's
    foreign.mkdir()
    assert clean_stale(tmp_path, "q") == 0 and foreign.exists()


# ---- --trace --------------------------------------------------------------------------
def test_trace_never_overwrites_a_file_hetsim_did_not_write(
    tmp_path: Path, scenario: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "trace.json"
    trace.write_text('{"my": "data"}')
    err = refused(capsys, str(scenario), "--trace", str(trace))
    assert (
        err
        == f"{trace}: --trace: exists and is not a trace hetsim wrote; hetsim will not overwrite it"
    )
    assert trace.read_text() == '{"my": "data"}'
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert "not a regular file" in refused(capsys, str(scenario), "--trace", str(fifo))
    own = tmp_path / "own.json"
    assert run(capsys, str(scenario), "--trace", str(own)) == (0, "")
    doc = json.loads(own.read_text())
    assert doc["otherData"]["generator"] == "hetsim" and doc["traceEvents"]
    assert run(capsys, str(scenario), "--trace", str(own), "--seed", "5") == (0, "")


# ---- sweeps -----------------------------------------------------------------------------
SWEEP = TINY + "sweep:\n  seed: [1, 2, 3]\n"


def sweep(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    code = main(["sweep", *argv, "-q"])
    return code, capsys.readouterr().err.strip()


def test_sweep_out_and_resume_refuse_folders_hetsim_did_not_make(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sw.yaml"
    path.write_text(SWEEP)
    mine = tmp_path / "mine"
    before = user_folder(mine)
    (mine / "scenario.yaml").write_text("my own scenario")
    code, err = sweep(capsys, str(path), "--out", str(mine))
    assert code == 2 and "holds files hetsim did not write" in err
    code, err = sweep(capsys, str(path), "--resume", str(mine))
    assert code == 2 and "holds files hetsim did not write" in err
    code, err = sweep(capsys, str(path), "--resume", str(mine), "--force")
    assert (
        code == 2
        and err == f"{mine / 'scenario.yaml'}: is not hetsim's; hetsim will not overwrite it"
    )
    assert (mine / "scenario.yaml").read_text() == "my own scenario"
    assert {k: v for k, v in snapshot(mine).items() if k in before} == before


def test_resume_checks_the_scenario_hash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sw.yaml"
    path.write_text(SWEEP)
    out = tmp_path / "out"
    assert sweep(capsys, str(path), "--out", str(out)) == (0, "")
    assert json.loads((out / MARKER).read_text())["complete"] is True
    code, err = sweep(capsys, str(path), "--out", str(out))
    assert code == 2 and err.endswith("already holds a sweep; resume it with --resume")
    code, err = sweep(capsys, str(path), "--resume", str(out), "--set", "workload.num_requests=31")
    assert code == 2 and "holds a sweep of another scenario" in err
    assert sweep(capsys, str(path), "--resume", str(out)) == (0, "")
    run_dir = tmp_path / "run"
    assert main(["run", str(path), "--out", str(run_dir), "-q"]) == 0
    code, err = sweep(capsys, str(path), "--resume", str(run_dir))
    assert code == 2 and "holds hetsim run results, not a sweep's" in err


def test_corrupt_shard_is_rerun_on_resume(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pandas as pd

    path = tmp_path / "sw.yaml"
    path.write_text(SWEEP)
    out = tmp_path / "out"
    assert sweep(capsys, str(path), "--out", str(out)) == (0, "")
    first = pd.read_csv(out / "sweep.csv")
    shards = sorted((out / "shards").glob("*.parquet"))
    assert len(shards) == 3
    shards[0].write_bytes(shards[0].read_bytes()[:40])  # cut short
    shards[1].write_bytes(b"garbage")
    dead = 2**22 + 12345
    (out / "shards" / temp_name(shards[2].name, "tmp", dead)).write_bytes(b"half")
    assert sweep(capsys, str(path), "--resume", str(out)) == (0, "")
    again = pd.read_csv(out / "sweep.csv")
    volatile = ["wall_s"]
    pd.testing.assert_frame_equal(first.drop(columns=volatile), again.drop(columns=volatile))
    assert sorted(p.name for p in (out / "shards").iterdir()) == sorted(p.name for p in shards)


def test_huge_sweep_needs_max_points(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "sw.yaml"
    path.write_text(TINY + "sweep:\n  design: random\n  samples: 1000000000\n"
                    "  parameters: {workload.num_requests: {low: 10, high: 20, integer: true}}\n")  # fmt: skip
    for command in ("validate", "sweep"):
        code = main([command, str(path)])
        err = capsys.readouterr().err.strip()
        assert code == 2
        assert (
            err
            == f"{path}: sweep: 1e+09 points exceed the limit of 10000; raise it with --max-points N if you mean it"
        )
    assert main(["validate", str(path), "--max-points", "0"]) == 2
