"""Where a path named in a scenario points.

- ``pkg:serving/azure_conv_2023_sample.csv`` names a data file shipped with hetsim
  (``workloads/data/``, installed with the package);
- an absolute path is used as it is (``~`` is expanded; a NUL byte or an unknown
  ``~user`` is a ValueError);
- any other path is relative to the folder of the scenario file that names it, so a
  scenario and its traces can be copied together anywhere.
"""

from __future__ import annotations

from pathlib import Path

#: the shipped data files (a folder of the workloads layer; only its path is read here)
DATA_DIR = Path(__file__).resolve().parent.parent / "workloads" / "data"
PKG_PREFIX = "pkg:"


def shipped(name: str) -> str:
    """The ``pkg:`` reference of a shipped data file (what defaults are written as)."""
    return f"{PKG_PREFIX}{name}"


def resolve_path(path: str | Path, base_dir: Path) -> Path:
    """The file ``path`` names, for a scenario whose file lies in ``base_dir``."""
    text = str(path)
    if text.startswith(PKG_PREFIX):
        rel = Path(text[len(PKG_PREFIX) :])
        if rel.is_absolute() or ".." in rel.parts:
            raise ValueError(f"{text!r}: a pkg: path must stay inside the shipped data")
        return DATA_DIR / rel
    p = expand_user(text)
    return p if p.is_absolute() else base_dir / p


def expand_user(text: str) -> Path:
    """``text`` as a Path with a leading ``~`` or ``~user`` expanded; ValueError for a
    NUL byte or a home folder that cannot be found (``~nosuchuser/x``)."""
    if "\x00" in text:
        raise ValueError(f"{text!r}: a NUL byte is not allowed in a path")
    try:
        return Path(text).expanduser()
    except RuntimeError:  # pathlib: "Could not determine home directory"
        user = text[1:].split("/", 1)[0]
        raise ValueError(f"{text!r}: no home folder for {'~' + user!r}") from None


def shipped_files() -> list[str]:
    """Every shipped data file as its ``pkg:`` reference, sorted."""
    return sorted(shipped(p.relative_to(DATA_DIR).as_posix())
                  for p in DATA_DIR.rglob("*") if p.is_file() and p.suffix != ".md")  # fmt: skip
