"""$/GPU-hour price presets, one provider each, from ``prices.yaml``.

A preset is one provider's price list: a row per GPU type it rents, with the offering,
date, source and confidence. :func:`preset_price` answers a GPU type's price under a
preset; a type the preset has no row for is a :class:`KeyError` naming the preset, the
type and the presets that do price it (a provider that does not rent a GPU has no price
for it, and borrowing another provider's would compare providers, not GPUs). A bad
file entry raises :class:`CatalogueError` naming the file and field.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from pathlib import Path

from hetsim.devices.catalogue import CatalogueError, _Node, _yaml_load

PRICE_FILE = Path(__file__).resolve().parent / "prices.yaml"
_ROW_KEYS = ("device", "usd_per_hour", "offering", "date", "source", "confidence")
CONFIDENCE = ("low", "medium", "high")


@dataclass(frozen=True)
class PriceRow:
    """One GPU type's $/hour under one preset, with where it comes from."""

    device: str
    usd_per_hour: float
    offering: str
    date: str
    source: str
    confidence: str


@dataclass(frozen=True)
class ProviderPreset:
    """One provider's price list."""

    name: str
    provider: str
    description: str
    rows: dict[str, PriceRow]


def _preset(node: _Node, name: str) -> ProviderPreset:
    node.check_keys(("provider", "description", "rows"), ("provider", "description", "rows"))
    raw = node.data["rows"]
    if not isinstance(raw, list) or not raw:
        node.fail("must be a non-empty list of rows", "rows")
    rows: dict[str, PriceRow] = {}
    for k, item in enumerate(raw):
        r = _Node(node.file, f"{node.path}.rows[{k}]", item)
        r.check_keys(_ROW_KEYS, _ROW_KEYS)
        row = PriceRow(
            device=r.text("device"), usd_per_hour=r.number("usd_per_hour", low=0.0),
            offering=r.text("offering"), date=r.text("date"), source=r.text("source"),
            confidence=r.text("confidence", choices=CONFIDENCE),
        )  # fmt: skip
        if row.device in rows:
            r.fail(f"{row.device} has two rows in preset {name}", "device")
        rows[row.device] = row
    return ProviderPreset(name, node.text("provider"), node.text("description"), rows)


def load_price_presets(path: str | Path = PRICE_FILE) -> dict[str, ProviderPreset]:
    """Every preset of ``path``, by name (file order)."""
    p = Path(path)
    try:
        data = _yaml_load(p.read_text(encoding="utf-8"))
    except Exception as exc:  # unreadable or not YAML: one line naming the file
        raise CatalogueError(f"{p.name}: {str(exc).splitlines()[0]}") from None
    top = _Node(p.name, "", data)
    top.check_keys(("presets",), ("presets",))
    presets = top.child("presets")
    return {str(n): _preset(presets.child(str(n)), str(n)) for n in presets.data}


@functools.cache
def price_presets() -> dict[str, ProviderPreset]:
    """The shipped presets (loaded once)."""
    return load_price_presets()


def preset_price(preset: str, device: str) -> float:
    """$/hour of one ``device`` GPU under ``preset`` (KeyError naming what is missing)."""
    presets = price_presets()
    if preset not in presets:
        raise KeyError(f"price_preset: unknown {preset!r}; valid: {', '.join(presets)}")
    row = presets[preset].rows.get(device)
    if row is None:
        others = [n for n, p in presets.items() if device in p.rows]
        where = f"presets that price it: {', '.join(others)}" if others else "no preset prices it"
        raise KeyError(
            f"price_preset {preset} ({presets[preset].provider}) has no price for {device}; "
            f"{where}; 'catalogue' "
            "prices every catalogue GPU at its default (mixed providers), 'none' prices nothing"
        )
    return row.usd_per_hour
