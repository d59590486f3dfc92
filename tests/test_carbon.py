"""Carbon (devices/carbon.py) against closed forms, bad intensity files, and the
energy-aware serving deployment (schedulers/serving/deploy_energy.py): direction of
effect against Cauchy and the plain homogeneous fleet on the same configs."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import hetsim
from hetsim.devices.carbon import (
    CarbonConfig,
    GridIntensity,
    carbon_columns,
    carbon_table,
    embodied_g_per_hour,
    grid_intensity,
    read_grid_intensity,
    series_carbon_g,
)
from hetsim.simulator.errors import ScenarioError, TraceError
from tests.conftest import ROOT

SAMPLE = ROOT / "workloads" / "data" / "carbon" / "caiso_2023-01-01.csv"
E01 = ROOT / "scenarios" / "energy-robustness.yaml"


def _write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "grid.csv"
    p.write_text(text, encoding="utf-8")
    return p


def test_step_series_integral_closed_form(tmp_path: Path) -> None:
    # 100 g/kWh for 2 h, then 400 for 1 h, repeating every 3 h
    g = read_grid_intensity(_write(tmp_path, "start_h,end_h,gco2_per_kwh\n0,2,100\n2,3,400\n"))
    assert g.period_h == 3.0
    assert g.integral(0.0, 3.0) == pytest.approx(2 * 100 + 400)
    assert g.integral(1.5, 2.5) == pytest.approx(0.5 * 100 + 0.5 * 400)
    assert g.integral(2.5, 7.0) == pytest.approx(0.5 * 400 + 600 + 1 * 100)  # wraps
    assert g.mean_g_per_kWh(0.0, 3.0) == pytest.approx(200.0)
    assert g.mean_g_per_kWh(2.2, 2.2) == 400.0  # the intensity at an instant


def test_carbon_is_energy_times_intensity_integrated_over_time(tmp_path: Path) -> None:
    g = read_grid_intensity(_write(tmp_path, "start_h,end_h,gco2_per_kwh\n0,1,100\n1,2,300\n"))
    # 1 kW for 2 h across both hours: 1 kWh at 100 + 1 kWh at 300
    assert series_carbon_g(np.array([0.0]), np.array([1000.0]), 7200.0, g) == pytest.approx(400)
    # 2 kW for the first half hour, idle (0) after: 1 kWh at 100
    t, w = np.array([0.0, 1800.0]), np.array([2000.0, 0.0])
    assert series_carbon_g(t, w, 7200.0, g) == pytest.approx(100.0)
    # flat power: the run's energy x the window's mean intensity is exact
    cfg = CarbonConfig(start_h=0.5)
    cols = carbon_columns(3.6e6, 3600.0, {}, cfg, g)  # 1 kWh over [0.5 h, 1.5 h]
    assert cols["grid_intensity_g_per_kWh"] == pytest.approx(200.0)
    assert cols["carbon_operational_g"] == pytest.approx(200.0)
    flat = series_carbon_g(np.array([0.0]), np.array([1000.0]), 3600.0, g, start_h=0.5)
    assert flat == pytest.approx(cols["carbon_operational_g"])


def test_defaults_and_embodied_closed_form() -> None:
    t = carbon_table()
    assert t.grid_intensity_g_per_kwh == 481.0  # Ember 2023 world average
    g = grid_intensity(CarbonConfig())
    assert g.mean_g_per_kWh(0.0, 5.0) == 481.0
    per_h = 318.0 * 1000.0 / (6.0 * 8760.0)  # Chien et al. kg over 6 years
    assert embodied_g_per_hour("a100-80gb", CarbonConfig()) == pytest.approx(per_h)
    assert embodied_g_per_hour("a100-80gb", CarbonConfig(service_life_years=4)) == (
        pytest.approx(per_h * 6 / 4)
    )
    assert embodied_g_per_hour("h100-sxm", CarbonConfig()) is None
    cfg = CarbonConfig(embodied_g_per_device_hour={"h100-sxm": 10.0})
    cols = carbon_columns(0.0, 7200.0, {"h100-sxm": 2 * 7200.0, "l4": 7200.0}, cfg, g)
    assert cols["carbon_embodied_g"] == pytest.approx(10.0 * 4)  # 2 GPUs x 2 h
    assert cols["carbon_embodied_unpriced"] == "l4"


def test_shipped_sample_reads() -> None:
    g = read_grid_intensity(SAMPLE)
    assert g.period_h == 24.0 and len(g.value) == 24
    assert g.value.min() == pytest.approx(121.33) and g.value.max() == pytest.approx(246.1)
    assert g.mean_g_per_kWh(0.0, 24.0) == pytest.approx(192.947, abs=1e-3)


@pytest.mark.parametrize(
    ("text", "line", "what"),
    [
        ("hour,g\n0,1\n", 1, "header"),
        ("start_h,end_h,gco2_per_kwh\n0,1,100\n1,2,abc\n", 3, "not a number"),
        ("start_h,end_h,gco2_per_kwh\n0,1,100\n2,3,100\n", 3, "previous end_h"),
        ("start_h,end_h,gco2_per_kwh\n0,1,-5\n", 2, ">= 0"),
        ("start_h,end_h,gco2_per_kwh\n0,1\n", 2, "fields"),
        ("# a comment\nstart_h,end_h,gco2_per_kwh\n0,0,5\n", 3, "above start_h"),
    ],
)
def test_bad_file_names_file_and_line(tmp_path: Path, text: str, line: int, what: str) -> None:
    p = _write(tmp_path, text)
    with pytest.raises(TraceError, match=what) as e:
        read_grid_intensity(p)
    assert e.value.line == line
    assert str(e.value).startswith(f"{p}:{line}:")
    assert "\n" not in str(e.value)


def test_bad_file_in_a_run_is_one_line(tmp_path: Path) -> None:
    p = _write(tmp_path, "start_h,end_h,gco2_per_kwh\n0,1,x\n")
    with pytest.raises(TraceError, match=r"grid.csv:2: column gco2_per_kwh"):
        hetsim.run(E01, overrides={"cluster.carbon.grid_intensity_file": str(p)})
    with pytest.raises(ScenarioError, match="cannot read"):
        hetsim.run(E01, overrides={"cluster.carbon.grid_intensity_file": str(tmp_path / "no")})
    with pytest.raises(ScenarioError, match="not both"):
        hetsim.run(E01, overrides={"cluster.carbon.grid_intensity_file": str(p),
                                   "cluster.carbon.grid_intensity_g_per_kwh": 100})  # fmt: skip


def test_run_carbon_columns_by_hand() -> None:
    over = {"workload.requests.num_requests": 8}
    base = hetsim.run(E01, overrides=over).summary_row
    kwh = base["energy_J"] / 3.6e6
    assert base["carbon_operational_g"] == pytest.approx(kwh * 481.0)
    assert base["carbon_embodied_unpriced"] == "h100-sxm"
    # a constant intensity scales operational carbon linearly; the series gives the
    # intensity of the hour the (short) run falls in
    half = hetsim.run(E01, overrides={**over, "cluster.carbon.grid_intensity_g_per_kwh": 240.5})
    assert half.summary_row["carbon_operational_g"] == pytest.approx(kwh * 240.5)
    series = hetsim.run(E01, overrides={**over, "cluster.carbon.start_h": 19.0,
                                        "cluster.carbon.grid_intensity_file":
                                        "pkg:carbon/caiso_2023-01-01.csv"})  # fmt: skip
    row = series.summary_row
    assert row["grid_intensity_g_per_kWh"] == pytest.approx(123.2)
    assert row["carbon_operational_g"] == pytest.approx(kwh * 123.2)
    assert row["energy_J"] == base["energy_J"]  # carbon never moves energy or time
    # embodied: every GPU provisioned over the run at its per-hour figure
    emb = hetsim.run(E01, overrides={**over, "cluster.carbon.embodied_g_per_device_hour":
                                     {"h100-sxm": 36.0}}).summary_row  # fmt: skip
    hours = emb["energy_J"] / emb["avg_power_W"] / 3600.0  # the run's length
    assert emb["carbon_embodied_g"] == pytest.approx(36.0 * hours)
    assert emb["carbon_embodied_unpriced"] == ""
    assert emb["carbon_g"] == pytest.approx(emb["carbon_operational_g"] + emb["carbon_embodied_g"])


def test_training_step_carbon_by_hand() -> None:
    row = hetsim.run(ROOT / "scenarios" / "training-power-limit.yaml").summary_row
    assert row["carbon_operational_g"] == pytest.approx(row["energy_per_step_J"] / 3.6e6 * 481)
    assert row["carbon_per_token_g"] == pytest.approx(
        row["carbon_per_step_g"] / (row["energy_per_step_J"] / row["energy_per_token_J"])
    )


ENERGY_SERVING = ROOT / "scenarios" / "energy-serving.yaml"


@pytest.fixture(scope="module")
def serving_rows() -> dict[str, dict]:
    over = {"workload.requests.rate_per_s": 16, "workload.requests.num_requests": 600}
    deps = {"energy": "energy", "cauchy": "cauchy", "colocated": "colocated",
            "colocated-W": {"name": "colocated", "objective": "energy"}}  # fmt: skip
    return {
        k: hetsim.run(ENERGY_SERVING, overrides={**over, "policies.deployment": d}).summary_row
        for k, d in deps.items()
    }


def test_energy_policy_uses_less_power_per_token(serving_rows: dict[str, dict]) -> None:
    e, c, h = (serving_rows[k] for k in ("energy", "cauchy", "colocated"))
    # direction of effect, on the GPUs each deployment uses: more tokens per joule than
    # the Tokens/USD combos and than the cheapest homogeneous fleet (5% margin vs Cauchy)
    assert e["tokens_per_J_deployed"] > 1.05 * c["tokens_per_J_deployed"]
    assert e["tokens_per_J_deployed"] > h["tokens_per_J_deployed"]
    assert e["slo_attainment"] >= 0.9  # still under the SLOs it sized for
    assert "@" in e["deployment"]  # it chose a power cap


def test_least_power_homogeneous_fleet(serving_rows: dict[str, dict]) -> None:
    w, h = serving_rows["colocated-W"], serving_rows["colocated"]
    # the energy objective spends no fewer $/h and gets no fewer tokens per joule than
    # the cheapest homogeneous fleet, on one GPU type, within the SLOs it sized for
    assert w["usd_per_hour"] >= h["usd_per_hour"]
    assert w["tokens_per_J_deployed"] >= h["tokens_per_J_deployed"]
    assert len({part.split(":")[1] for part in w["deployment"].split("+")}) == 1
    assert w["slo_attainment"] >= 0.9
    again = hetsim.run(
        ENERGY_SERVING,
        overrides={
            "workload.requests.rate_per_s": 16,
            "workload.requests.num_requests": 600,
            "policies.deployment": {"name": "colocated", "objective": "energy"},
        },
    ).summary_row
    for k in ("deployment", "energy_J", "tokens_per_J_deployed", "slo_attainment"):
        assert again[k] == w[k]  # deterministic for the seed


def test_power_cap_options_default_changes_nothing() -> None:
    over = {"workload.requests.num_requests": 8}
    a = hetsim.run(E01, overrides=over).summary_row
    b = hetsim.run(E01, overrides={**over, "workload.power_cap_options_w": [None, 800]}).summary_row
    assert a["energy_J"] == b["energy_J"] and a["deployment"] == b["deployment"]


def test_grid_constant_helper() -> None:
    g = GridIntensity.constant(300.0)
    assert g.integral(0.25, 10.25) == pytest.approx(3000.0)


def test_power_cap_option_below_idle_is_one_line() -> None:
    with pytest.raises(ScenarioError, match=r"power_cap_options_w: h100-sxm: .*idle"):
        hetsim.run(ENERGY_SERVING, overrides={"workload.power_cap_options_w": [30]})


def test_a_capped_config_is_slower_and_draws_less() -> None:
    """Direction of effect of workload.power_cap_options_w: the same instance under a
    350 W cap serves the same requests more slowly at a lower average draw."""
    base = {"workload.requests.rate_per_s": 4, "workload.requests.num_requests": 100}
    rows = {}
    for cap in (None, 350.0):
        e: dict = {"gpu_type": "h100-sxm", **({"power_cap_w": cap} if cap else {})}
        rows[cap] = hetsim.run(
            ENERGY_SERVING,
            overrides={**base, "policies.deployment": {"name": "fixed", "instances": [e]}},
        ).summary_row
    fast, slow = rows[None], rows[350.0]
    assert slow["deployment"] == "1xmixed:h100-sxm/tp1@350W"
    assert slow["tpot_mean_s"] > fast["tpot_mean_s"]

    def placed_W(row: dict) -> float:  # the instance GPU's mean draw over the run
        return row["energy_deployed_J"] / (row["energy_J"] / row["avg_power_W"])

    assert placed_W(slow) < placed_W(fast)


def test_training_cap_lowers_throughput_and_power_at_any_exponent() -> None:
    path = ROOT / "scenarios" / "training-power-limit-robustness.yaml"
    for a in (1.0, 2.0):
        coef = {"cluster.power_coefficients.dvfs_exponent": a}
        free = hetsim.run(path, overrides=coef).summary_row
        capped = hetsim.run(
            path, overrides={**coef, "cluster.accelerator_power_cap_w": 300}
        ).summary_row
        assert capped["tokens_per_s_per_gpu"] < free["tokens_per_s_per_gpu"]
        assert capped["avg_power_W"] < free["avg_power_W"]
        # the clock a cap leaves: ((cap - idle) / (TDP - idle))^(1/a) of the uncapped one
        # (idle 80.3 W, borrowed from the H200; TDP 500 W)
        clock = ((300 - 80.3) / (500 - 80.3)) ** (1 / a)
        assert capped["sustained_matmul_ratio"] == pytest.approx(
            free["sustained_matmul_ratio"] * clock, rel=1e-9
        )
