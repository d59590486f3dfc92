"""The sources of the validation set (endtoend.csv) as (repo, thread) and (repo, file) keys,
so a calibration test can check that none of its points comes from a validation row's
thread or file."""

from __future__ import annotations

import csv
import re

from hetsim.simulator.fidelity import default_calibration_dir

ENDTOEND = default_calibration_dir() / "endtoend.csv"
_THREAD = re.compile(r"([\w.-]+/[\w.-]+)[^#']*?#(\d+)")
_FILE = re.compile(r"([\w.-]+/[\w.-]+) ([\w./-]+\.\w+)")


def validation_keys() -> tuple[set[tuple[str, str]], set[tuple[str, str]]]:
    """(threads, files) named by endtoend.csv's ``source`` column, repos lower-cased."""
    with ENDTOEND.open(newline="") as fh:
        sources = [r["source"] for r in csv.DictReader(fh)]
    threads = {(r.lower(), n) for s in sources for r, n in _THREAD.findall(s)}
    files = {(r.lower(), f) for s in sources for r, f in _FILE.findall(s)}
    return threads, files


def is_validation_source(repo: str, ref: str) -> bool:
    """Whether ``repo`` + ``ref`` (``PR #N``, ``issue #N`` or a file path) is a thread or
    file that a validation row cites."""
    threads, files = validation_keys()
    num = re.fullmatch(r"(?:issue|PR) #(\d+)", ref)
    if num:
        return (repo.lower(), num.group(1)) in threads
    return (repo.lower(), ref) in files
