"""The import structure: no import circles, and imports point one way between layers.

The rule (docs in README "Layout" and DESIGN.md):

- engine core (``hetsim.simulator`` except the app modules) imports no other layer;
- cost (``hetsim.devices``) imports only the engine core;
- mechanisms (``hetsim.workloads``) import the engine core and the cost layer;
- policies (``hetsim.schedulers``) import the engine core and, of the mechanisms, only
  their contracts: ``hetsim.workloads.<domain>.view`` (and ``hetsim.workloads.base``);
- the app layer (scenario loading, runs, sweeps, CLI, user catalogues, the public
  ``hetsim`` API and plotting) may import anything.

Every ``import`` statement counts, inside functions and under ``TYPE_CHECKING`` too: a
circle through a type annotation is still a circle between two modules' meanings.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

from tests.conftest import ROOT

LAYER_DIRS = ("simulator", "devices", "workloads", "schedulers")
APP_ENGINE_MODULES = ("apidoc", "cli", "colocate", "crossval", "docs", "energy_diagnosis", "fidelity", "figures", "plugins", "reference", "runner",
                      "scenario", "sweeps", "sweep_design", "user_catalogue")  # fmt: skip
APP_MODULES = {
    "hetsim",
    "hetsim.__main__",
    "hetsim.plotting",
    *(f"hetsim.simulator.{m}" for m in APP_ENGINE_MODULES),
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] != "hetsim":
        parts.insert(0, "hetsim")
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    files = [ROOT / "hetsim" / "__init__.py", ROOT / "hetsim" / "__main__.py",
             ROOT / "hetsim" / "plotting.py"]  # fmt: skip
    for folder in LAYER_DIRS:
        files += sorted((ROOT / folder).rglob("*.py"))
    return {_module_name(p): p for p in files}


def _target(name: str, modules: dict[str, Path]) -> str | None:
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def import_graph() -> nx.DiGraph:
    """Module -> every hetsim module it imports (a ``from a import b`` of a submodule
    ``b`` points at ``a.b``, else at ``a``)."""
    modules = _modules()
    graph = nx.DiGraph()
    for name, path in modules.items():
        graph.add_node(name)
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                    base = f"{anchor}.{base}" if base else anchor
                targets = [f"{base}.{a.name}" for a in node.names]
            for raw in targets:
                target = _target(raw, modules) if raw.startswith("hetsim") else None
                if target and target != name:
                    graph.add_edge(name, target)
    return graph


def layer(module: str) -> str:
    """engine, cost, mechanism, contract, policy or app."""
    if module in APP_MODULES:
        return "app"
    parts = module.split(".")
    if parts[1] == "simulator":
        return "engine"
    if parts[1] == "devices":
        return "cost"
    if parts[1] == "workloads":
        return (
            "contract"
            if parts[-1] == "view" or module == "hetsim.workloads.base"
            else ("mechanism")
        )
    return "policy"


ALLOWED = {
    "engine": {"engine"},
    "cost": {"engine", "cost"},
    "mechanism": {"engine", "cost", "mechanism", "contract"},
    "contract": {"engine", "cost", "mechanism", "contract"},
    "policy": {"engine", "contract", "policy"},
    "app": {"engine", "cost", "mechanism", "contract", "policy", "app"},
}


@pytest.fixture(scope="module")
def graph() -> nx.DiGraph:
    return import_graph()


def test_graph_sees_the_whole_package(graph: nx.DiGraph) -> None:
    # a walker that found nothing would pass every rule below
    assert graph.number_of_nodes() > 150 and graph.number_of_edges() > 400
    assert graph.has_edge("hetsim.simulator.runner", "hetsim.simulator.scenario")


def test_no_import_circles(graph: nx.DiGraph) -> None:
    circles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert not circles, f"import circles: {circles}"


def test_imports_point_one_way(graph: nx.DiGraph) -> None:
    bad = [
        f"{a} ({layer(a)}) -> {b} ({layer(b)})"
        for a, b in graph.edges
        if layer(b) not in ALLOWED[layer(a)]
    ]
    assert not bad, "imports against the layer rule:\n" + "\n".join(sorted(bad))


def test_rule_catches_a_policy_importing_a_mechanism() -> None:
    g = nx.DiGraph([("hetsim.schedulers.serving.route_jsq", "hetsim.workloads.serving.instance")])
    a, b = next(iter(g.edges))
    assert layer(b) not in ALLOWED[layer(a)]
    assert layer("hetsim.workloads.serving.view") in ALLOWED["policy"]
