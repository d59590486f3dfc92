"""Every code block in README.md, docs/*.md, docs/tutorials/*.md and docs/guides/*.md
marked runnable is executed, so a snippet can no longer rot.

A block is marked by an HTML comment on the line right before its fence (invisible on
GitHub):

- ``<!-- runnable -->``: a ``python`` block is executed (one namespace per document, in
  order); a ``sh`` block's commands (``hetsim ...`` or ``.venv/bin/hetsim ...``, ``\\``
  continuations and ``#`` comments allowed) run through the CLI and must exit 0.
- ``<!-- runnable: small ARGS -->``: a ``sh`` block, with ``ARGS`` (``--set PATH=VALUE``
  ...) appended to every ``hetsim run``/``sweep`` command, so the test runs small settings.
- ``<!-- runnable: file NAME -->``: the block is written to ``NAME`` for later blocks.

Each document runs in its own temporary folder holding a link to ``scenarios/``.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import ROOT

MARK = re.compile(r"^<!--\s*runnable(?::\s*(?P<arg>.*?))?\s*-->\s*$", re.M)
FENCE = re.compile(r"^```(?P<lang>\S*)")
DOCS = [
    ROOT / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "docs" / "tutorials").glob("*.md")),
    *sorted((ROOT / "docs" / "guides").glob("*.md")),
]


@dataclass(frozen=True)
class Block:
    """One marked code block: where it is, its language, marker argument and text."""

    line: int
    lang: str
    arg: str
    code: str


def marked_blocks(text: str, name: str = "<doc>") -> list[Block]:
    """The blocks of ``text`` marked runnable (a marker not followed by a fence fails)."""
    lines = text.splitlines()
    out = []
    for i, line in enumerate(lines):
        mark = MARK.match(line.strip())
        if not mark:
            continue
        fence = FENCE.match(lines[i + 1]) if i + 1 < len(lines) else None
        if fence is None:
            raise AssertionError(f"{name}:{i + 1}: runnable marker not followed by a fence")
        end = next(j for j in range(i + 2, len(lines)) if lines[j].startswith("```"))
        code = "\n".join(lines[i + 2 : end]) + "\n"
        out.append(Block(i + 2, fence["lang"], (mark["arg"] or "").strip(), code))
    return out


def commands(code: str) -> list[list[str]]:
    """The shell commands of a block: continuations joined, comments dropped."""
    joined = re.sub(r"\\\n", " ", code)
    return [shlex.split(ln, comments=True) for ln in joined.splitlines() if ln.strip()]


def run_sh(block: Block, where: str) -> None:
    from hetsim.simulator.cli import main

    extra = shlex.split(block.arg.removeprefix("small")) if block.arg.startswith("small") else []
    for argv in commands(block.code):
        if not argv:
            continue
        assert Path(argv[0]).name == "hetsim", f"{where}: only hetsim commands run: {argv}"
        args = argv[1:]
        if extra and any(cmd in args for cmd in ("run", "sweep")):
            args = [*args, *extra]
        assert main(args) == 0, f"{where}: {shlex.join(argv)} failed"


def _documents() -> list[Path]:
    return [p for p in DOCS if MARK.search(p.read_text(encoding="utf-8")) or p.name == "README.md"]


def test_markers_are_parsed() -> None:
    text = "a\n<!-- runnable: small --set x=1 -->\n```sh\nhetsim run q \\\n  --seed 2 # c\n```\n"
    (block,) = marked_blocks(text)
    assert (block.lang, block.arg, block.line) == ("sh", "small --set x=1", 3)
    assert commands(block.code) == [["hetsim", "run", "q", "--seed", "2"]]
    with pytest.raises(AssertionError, match="not followed by a fence"):
        marked_blocks("<!-- runnable -->\ntext\n")


@pytest.mark.parametrize(
    "doc", sorted((ROOT / "docs" / "tutorials").glob("*.md")), ids=lambda p: p.name
)
def test_tutorials_run_sweep_and_plot(doc: Path) -> None:
    """A tutorial runs a scenario, sweeps it and plots the sweep, every step runnable."""
    blocks = marked_blocks(doc.read_text(encoding="utf-8"), doc.name)
    argvs = [argv for b in blocks if b.lang == "sh" for argv in commands(b.code)]
    assert {a[1] for a in argvs if len(a) > 1} >= {"run", "sweep"}, doc.name
    assert any("plot_sweep" in b.code for b in blocks if b.lang == "python"), doc.name


def test_readme_has_runnable_blocks() -> None:
    blocks = marked_blocks((ROOT / "README.md").read_text(encoding="utf-8"))
    assert {b.lang for b in blocks} >= {"python", "sh"}


@pytest.mark.slow
@pytest.mark.parametrize("doc", _documents(), ids=lambda p: p.relative_to(ROOT).as_posix())
def test_runnable_blocks_execute(
    doc: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MPLBACKEND", "Agg")
    monkeypatch.delenv("HETSIM_PLUGINS", raising=False)  # restored afterwards
    monkeypatch.chdir(tmp_path)
    (tmp_path / "scenarios").symlink_to(ROOT / "scenarios", target_is_directory=True)
    namespace: dict[str, object] = {"__name__": "__doc_snippet__"}
    for block in marked_blocks(doc.read_text(encoding="utf-8"), doc.name):
        where = f"{doc.name}:{block.line}"
        if block.arg.startswith("file "):
            (tmp_path / block.arg.removeprefix("file ").strip()).write_text(block.code)
        elif block.lang == "python":
            exec(compile(block.code, where, "exec"), namespace)
        elif block.lang in ("sh", "bash", "console"):
            run_sh(block, where)
        else:
            raise AssertionError(f"{where}: cannot run a {block.lang!r} block")
