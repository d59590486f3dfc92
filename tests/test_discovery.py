"""Lazy discovery: the source index agrees with full discovery, a scenario imports only
the workload and policies it names, and a lookup never misses a registered name."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

import hetsim.schedulers
import hetsim.workloads
from hetsim.simulator import discovery, registry


def _all_registered() -> tuple[dict[str, str], dict[tuple[str, str], str]]:
    """What the shipped packages register (plugins other tests loaded into this process
    register too; they are not in the package index)."""
    discovery.load_everything()
    kinds = {
        e.name: e.obj.__module__
        for e in registry.workloads
        if e.obj.__module__.startswith("hetsim.")
    }
    pols = {
        (point, e.name): e.obj.__module__
        for point in registry.policies.decision_points()
        for e in registry.policies.point(point)
        if e.obj.__module__.startswith("hetsim.")
    }
    return kinds, pols


def test_index_matches_full_discovery() -> None:
    """Every workload kind and policy full discovery registers is indexed under the
    module that registers it, and every index entry names a registered thing."""
    index = discovery.build_index([hetsim.workloads, hetsim.schedulers])
    kinds, pols = _all_registered()
    assert len(kinds) >= 10 and len(pols) >= 50  # the shipped catalogue, not a stub
    for kind, module in kinds.items():
        assert module in index.get(f"workload:{kind}", []), kind
    for (point, name), module in pols.items():
        assert module in index.get(f"policy:{point}:{name}", []), (point, name)
    indexed = {k for k in index if k != "models"}
    expected = {f"workload:{k}" for k in kinds} | {f"policy:{p}:{n}" for p, n in pols}
    assert indexed == expected
    # the modules that add models are indexed too (serving's MoE specs among them)
    assert "hetsim.workloads.serving.models" in index["models"]


def test_unindexed_name_falls_back_to_full_discovery() -> None:
    """A name the index does not know still resolves when some module registers it,
    and an unknown name lists every valid one (full discovery ran)."""
    reg = registry.policies.point("queueing.dispatch")
    with pytest.raises(registry.UnknownName) as err:
        reg.get("no-such-policy")
    assert "round-robin" in str(err.value) and "fifo" in str(err.value)


def test_registered_does_not_discover() -> None:
    """``registered`` answers from what is loaded (registration code relies on it)."""
    table: registry.Registry[int] = registry.Registry("thing")
    calls: list[str] = []

    class Loader:
        def load(self, name: str) -> None:
            calls.append(name)

        def load_all(self) -> None:
            calls.append("*")

    table.loader = Loader()
    assert not table.registered("a") and calls == []
    assert "a" not in table and calls == ["a"]
    table.add("a", 1, doc="one")
    assert table.get("a") == 1 and calls == ["a"]
    assert table.names() == ["a"] and calls == ["a", "*"]


PROBE = """
import json, sys, hetsim
hetsim.load_scenario(sys.argv[1])
mods = sorted(m for m in sys.modules if m.startswith(("hetsim.workloads.", "hetsim.schedulers.")))
print(json.dumps(mods))
"""


@pytest.mark.slow  # two fresh interpreters
@pytest.mark.parametrize(
    ("scenario", "expect", "absent"),
    [
        ("mmc", "hetsim.schedulers.queueing.fifo", "hetsim.workloads.moe"),
        ("vidur-workload", "hetsim.schedulers.serving.batch_sarathi", "hetsim.workloads.training"),
    ],
)
def test_scenario_imports_only_what_it_names(scenario: str, expect: str, absent: str) -> None:
    """Loading a scenario imports its workload's package and its policies, not the
    other domains' (checked in a fresh interpreter)."""
    out = subprocess.run(
        [sys.executable, "-c", PROBE, scenario], check=True, capture_output=True, text=True
    ).stdout
    mods = json.loads(out)
    assert expect in mods
    assert not any(m == absent or m.startswith(absent + ".") for m in mods)
    other = [m for m in mods if m.startswith("hetsim.schedulers.") and ".batch_" in m]
    if scenario == "vidur-workload":  # one batching policy, the one named
        assert other == ["hetsim.schedulers.serving.batch_sarathi"]
