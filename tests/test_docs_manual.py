"""The manual in docs/ stays a manual: no change history in it, every relative link
resolves (to a file, and to a heading when it names one), and every module path it
names exists in the tree.

History ("issue N", "round N") belongs in CHANGELOG.md. Generated pages
(scenario-reference.md, metrics.md, fidelity/) are written from the code and checked
by their own tests, so they are left out of the history check here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import ROOT

DOCS = ROOT / "docs"
GENERATED = {"scenario-reference.md", "metrics.md"}
PAGES = sorted(p for p in DOCS.rglob("*.md") if "fidelity" not in p.parts)
WRITTEN = [p for p in PAGES if p.name not in GENERATED]
LINKED = [ROOT / "README.md", *PAGES]

HISTORY = re.compile(r"\b(?:issues?|rounds?)\s+\d+", re.I)  # "vLLM issue #N" is a source
LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)|!\[[^\]]*\]\(([^)\s]+)\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$", re.M)
FENCED = re.compile(r"^```.*?^```", re.M | re.S)
# A module path of this repository: a layer folder (optionally under hetsim/) and a file
# or folder below it. Another project's path is written after its name (`llama.cpp:tests/x`).
MODULE = re.compile(
    r"(?<![\w./:-])(?:hetsim/)?((?:simulator|devices|workloads|schedulers|validation|"
    r"scenarios|notebooks|benchmarks|tests)/[\w./-]*[\w/])"
)


def rel(path: Path) -> str:
    return path.relative_to(ROOT).as_posix()


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, markup and punctuation dropped,
    spaces to hyphens."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of a markdown page (repeats numbered as GitHub does)."""
    seen: dict[str, int] = {}
    out = set()
    text = FENCED.sub("", path.read_text(encoding="utf-8"))
    for m in HEADING.finditer(text):
        base = slug(m.group(2))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def test_slug_matches_github() -> None:
    assert slug("Standard figures") == "standard-figures"
    assert slug("Cost, `hetsim run` and M/M/c (2)") == "cost-hetsim-run-and-mmc-2"


@pytest.mark.parametrize("page", WRITTEN, ids=rel)
def test_no_history_in_manual(page: Path) -> None:
    hits = [
        f"{rel(page)}:{text[: m.start()].count(chr(10)) + 1}: {m.group(0)!r}"
        for text in [page.read_text(encoding="utf-8")]
        for m in HISTORY.finditer(text)
    ]
    assert not hits, "history belongs in CHANGELOG.md:\n" + "\n".join(hits)


@pytest.mark.parametrize("page", LINKED, ids=rel)
def test_relative_links_resolve(page: Path) -> None:
    text = FENCED.sub("", page.read_text(encoding="utf-8"))
    bad = []
    for m in LINK.finditer(text):
        target = m.group(1) or m.group(2)
        if re.match(r"^[a-z][a-z0-9+.-]*:", target, re.I):  # http:, mailto: ...
            continue
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.exists():
            bad.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {rel(dest)}")
    assert not bad, f"{rel(page)}:\n" + "\n".join(bad)


@pytest.mark.parametrize("page", WRITTEN, ids=rel)
def test_module_paths_exist(page: Path) -> None:
    text = page.read_text(encoding="utf-8")
    missing = sorted(
        {
            m.group(1)
            for m in MODULE.finditer(text)
            if "*" not in m.group(1)
            and text[m.end() : m.end() + 1] not in ("*", "<", "{")
            and not (ROOT / m.group(1).rstrip("/.")).exists()
        }
    )
    assert not missing, f"{rel(page)} names paths that do not exist: {missing}"


def test_module_pattern() -> None:
    found = [
        m.group(1) for m in MODULE.finditer("see `hetsim/workloads/serving/a.py`, x/devices/y")
    ]
    assert found == ["workloads/serving/a.py"]


LAYERS = ("simulator", "devices", "workloads", "schedulers", "validation", "notebooks",
          "benchmarks", "tests", "hetsim")  # fmt: skip
BARE = re.compile(r"`([\w-]+\.py)`")


def _basenames() -> set[str]:
    return {p.name for layer in LAYERS for p in (ROOT / layer).rglob("*.py")}


@pytest.mark.parametrize("page", WRITTEN, ids=rel)
def test_bare_module_names_exist(page: Path) -> None:
    """A module named by its file name alone (`requests.py`) is one of the tree's; another
    project's file is written with its project's name (`sglang:tp_worker.py`)."""
    names = _basenames()
    missing = sorted({n for n in BARE.findall(page.read_text(encoding="utf-8")) if n not in names})
    assert not missing, f"{rel(page)} names modules that do not exist: {missing}"


VALIDATION_ROW = re.compile(r"\bV\d{2}\b|validation/v\d")


@pytest.mark.parametrize("page", WRITTEN, ids=rel)
def test_headings_not_named_after_validation_rows(page: Path) -> None:
    """A section is named for what it describes; the rows it is checked against go in
    its text."""
    text = FENCED.sub("", page.read_text(encoding="utf-8"))
    bad = [m.group(0) for m in HEADING.finditer(text) if VALIDATION_ROW.search(m.group(2))]
    assert not bad, f"{rel(page)}: {bad}"
