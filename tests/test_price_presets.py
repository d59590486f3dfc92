"""Per-provider $/GPU-hour presets (devices/prices.yaml): every row sourced and dated, a
GPU a provider does not price is an error naming preset and GPU, and the default preset
is one provider (issue 20)."""

from __future__ import annotations

from pathlib import Path

import pytest

import hetsim
from hetsim.devices.catalogue import CatalogueError, shipped_devices
from hetsim.devices.prices import load_price_presets, preset_price, price_presets
from hetsim.workloads.serving.deploy import DEFAULT_PRICE_PRESET
from hetsim.workloads.serving.params import ServingParams


def test_every_row_names_a_catalogue_gpu_with_source_and_date() -> None:
    devices = shipped_devices()
    presets = price_presets()
    assert {"aws-ondemand", "lambda", "runpod", "aws-capacity-blocks-2024"} <= set(presets)
    for preset in presets.values():
        assert preset.provider
        for row in preset.rows.values():
            assert row.device in devices, (preset.name, row.device)
            assert row.usd_per_hour > 0 and row.source and row.date and row.offering


def test_a_gpu_the_provider_does_not_price_is_an_error_naming_both() -> None:
    assert preset_price("lambda", "h100-sxm") == 2.49
    with pytest.raises(KeyError) as err:
        preset_price("lambda", "l40s")
    assert err.value.args[0] == (
        "price_preset lambda (Lambda) has no price for l40s; presets that price it: "
        "aws-ondemand, runpod; 'catalogue' prices every catalogue GPU at its default (mixed "
        "providers), 'none' prices nothing"
    )
    with pytest.raises(KeyError, match="no preset prices it"):
        preset_price("aws-ondemand", "k80")


def test_the_default_preset_is_one_provider_and_prices_the_run() -> None:
    """Default-preset cost by hand: one A100-80GB instance (the fixed deployment) at the
    aws-ondemand row ($4.60/h) over its provisioned seconds."""
    assert ServingParams.model_fields["price_preset"].default == DEFAULT_PRICE_PRESET
    assert DEFAULT_PRICE_PRESET == "aws-ondemand"
    res = hetsim.run("lud", overrides={"workload.requests.num_requests": 8})  # names no preset
    assert res["price_preset"] == "aws-ondemand"
    assert not [w for w in res.warnings if "price_preset" in w]  # one provider: no warning
    inst = res.tables["instances"]
    assert list(inst["gpu_type"]) == ["a100-80gb"] and list(inst["provisioned_s"]) == [0.0]
    end_s = float(res.tables["requests"]["finish_s"].max())  # held until the last finish
    assert res["cost_usd"] == pytest.approx(4.60 * end_s / 3600, rel=1e-9)


def test_a_bad_price_file_names_file_and_field(tmp_path: Path) -> None:
    bad = tmp_path / "prices.yaml"
    bad.write_text(
        "presets:\n  p:\n    provider: X\n    description: d\n    rows:\n"
        "      - {device: l4, usd_per_hour: 1.0, offering: o, date: d, source: s}\n"
    )
    with pytest.raises(CatalogueError) as err:
        load_price_presets(bad)
    assert str(err.value) == "prices.yaml: presets.p.rows[0].confidence: missing required field"
