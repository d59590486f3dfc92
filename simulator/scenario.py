"""Scenario files: YAML validated by pydantic into a typed :class:`Scenario`.

A scenario names the cluster (devices and links by catalogue name), the workload (by
kind, with that kind's typed parameters), a policy per decision point (by name, with
typed parameters), outputs, and optionally a ``sweep:`` grid. Every problem is raised
as one :class:`ScenarioError` naming the file and the field path.
"""

from __future__ import annotations

import copy
import fnmatch
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, ValidationError

from hetsim.simulator import registry
from hetsim.simulator.boundary import check_tree, data_file_problem, read_text, yaml_value
from hetsim.simulator.colocate import (
    ACCELERATORS,
    ARBITER_POINT,
    Colocation,
    Member,
    SharingConfig,
    _stand_in,
    resolved_colocation,
)
from hetsim.simulator.errors import ScenarioError, from_validation
from hetsim.simulator.limits import PositiveSeconds
from hetsim.simulator.plugins import PluginError, load_plugin, load_plugins
from hetsim.workloads.paths import resolve_path


class OutputsConfig(BaseModel):
    """Where and how results are written."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    format: Literal["csv", "parquet"] = Field(
        default="csv",
        description="File format of the result tables written with "
        "--out (CLI --format overrides it).",
    )
    spans: bool = Field(
        default=True,
        description="Record per-operation spans (the spans table and "
        "trace); false saves memory on long runs.",
    )


class DataNeed(BaseModel):
    """Data a scenario reads that hetsim does not ship (a licence or its size), with
    where to fetch it; a run without it stops with one line saying so."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    path: str = Field(description="where the scenario reads it (relative to this file)")
    what: str = Field(description="what the data are (name, version)")
    fetch: str = Field(description="where to get them (a URL, a repository and folder)")


class ScenarioModel(BaseModel):
    """Top level of a scenario file (the workload and policies are validated by kind)."""

    model_config = ConfigDict(extra="forbid")
    name: str = Field(
        description="Scenario name, written into every summary row (column scenario)."
    )
    description: str = Field(
        default="",
        description="Free text saying what the scenario shows (its first "
        "line is shown by hetsim list scenarios).",
    )
    seed: NonNegativeInt = Field(
        default=0,
        description="Seed of the run's random streams; the same seed gives the same results.",
    )
    until_s: PositiveSeconds | None = Field(
        default=None,
        description="Simulated time in seconds at which the run stops even if the "
        "workload has not finished; null runs to completion.",
    )
    cluster: dict[str, Any] = Field(
        description="The cluster: nodes with their devices and links, and the "
        "scale-out network (see the cluster section)."
    )
    workload: dict[str, Any] | None = Field(
        default=None,
        description="The workload: a kind plus that kind's parameters (see the workload "
        "section); required unless workloads: is given.",
    )
    workloads: dict[str, dict[str, Any]] | None = Field(
        default=None,
        description="Several workloads on the one cluster, by name (each a workload block "
        "of any kind with its own policies: and devices:); instead of workload: "
        "(docs/colocate.md).",
    )
    sharing: dict[str, Any] = Field(
        default_factory=dict,
        description="With workloads: how a GPU two workloads list in devices: is shared "
        "(model exclusive, time-sliced or partition; docs/colocate.md).",
    )
    faults: dict[str, Any] | None = Field(
        default=None,
        description="With workloads: fail-stop faults of nodes or GPUs, sampled per "
        "GPU-day and/or listed at given times, each device lost to its owner for a repair "
        "time (docs/colocate.md).",
    )
    policies: dict[str, Any] = Field(
        default_factory=dict,
        description="Policy per decision point of the workload, by name or as {name, "
        "...parameters}; unset points use the kind's default.",
    )
    outputs: OutputsConfig = Field(
        default=OutputsConfig(),
        description="Where and how results are written (table format, span recording).",
    )
    sweep: dict[str, Any] = Field(
        default_factory=dict,
        description="Sweep design: dotted paths to value lists (a grid), or the "
        "long form with design, parameters and seeds.",
    )
    plugins: list[str] = Field(
        default_factory=list,
        description="modules or .py files (relative to this file) that register workloads, "
        "policies or devices; loaded before the rest is validated",
    )
    catalogue: list[str] = Field(
        default_factory=list,
        description="user catalogue YAML files (relative to this file) adding devices, "
        "links and models",
    )
    data: list[DataNeed] = Field(
        default_factory=list,
        description="data this scenario reads that hetsim does not ship, each with where "
        "to fetch it (checked before the rest; `hetsim list scenarios` marks them)",
    )


@dataclass(frozen=True)
class PolicyChoice:
    """The policy chosen at one decision point, with validated parameters."""

    point: str
    name: str
    cls: Any
    params: Any


@dataclass(frozen=True)
class Scenario:
    """A validated scenario, ready to run."""

    file: str
    base_dir: Path
    raw: dict[str, Any]
    name: str
    seed: int
    until_s: float | None
    cluster: Any
    workload_cls: Any
    workload: Any
    policies: dict[str, PolicyChoice]
    outputs: OutputsConfig
    sweep: dict[str, Any] = field(default_factory=dict)
    plugins: tuple[str, ...] = ()
    catalogue: tuple[str, ...] = ()
    #: with ``workloads:`` (several workloads on one cluster): the validated
    #: :class:`simulator.colocate.Colocation`; None for the single ``workload:`` form
    colocation: Any = None

    def resolved(self) -> dict[str, Any]:
        """The scenario with every default filled in (what was actually run)."""
        extensions = {k: list(v) for k, v in (("plugins", self.plugins),
                                              ("catalogue", self.catalogue)) if v}  # fmt: skip
        if self.colocation is not None:
            return {**extensions, "name": self.name, "seed": self.seed, "until_s": self.until_s,
                    "cluster": self.cluster.model_dump(mode="json"),
                    **resolved_colocation(self.colocation),
                    "outputs": self.outputs.model_dump(mode="json")}  # fmt: skip
        return {
            **extensions,
            "name": self.name,
            "seed": self.seed,
            "until_s": self.until_s,
            "cluster": self.cluster.model_dump(mode="json"),
            "workload": self.workload.model_dump(mode="json"),
            "policies": {
                p: {"name": c.name, **c.params.model_dump(mode="json")}
                for p, c in sorted(self.policies.items())
            },
            "outputs": self.outputs.model_dump(mode="json"),
        }

    def with_overrides(self, overrides: dict[str, Any], keep_sweep: bool = True) -> Scenario:
        """A new scenario with dotted-path values replaced (validated again).

        ``keep_sweep=False`` drops the ``sweep:`` block: a point of a sweep is a plain
        scenario (and copying a long sweep block per point would cost time and memory).
        """
        raw = {k: copy.deepcopy(v) for k, v in self.raw.items() if keep_sweep or k != "sweep"}
        for path, value in overrides.items():
            set_dotted(raw, path, value, self.file)
        return from_dict(raw, file=self.file, base_dir=self.base_dir)


def set_dotted(raw: dict[str, Any], path: str, value: Any, file: str) -> None:
    """Set ``raw[a][b][c] = value`` for ``path = "a.b.c"`` (creating dicts as needed).

    A string policy (``policies.dispatch: fifo``) is widened to ``{name: fifo}`` when a
    parameter below it is set.
    """
    parts = path.split(".")
    node: Any = raw
    for i, key in enumerate(parts[:-1]):
        nxt = node.get(key) if isinstance(node, dict) else None
        if nxt is None:
            nxt = node[key] = {}
        elif isinstance(nxt, str) and parts[0] == "policies" and i == 1:
            nxt = node[key] = {"name": nxt}
        elif not isinstance(nxt, dict):
            raise ScenarioError(file, ".".join(parts[: i + 1]), "cannot set a field below a value")
        node = nxt
    if not isinstance(node, dict):
        raise ScenarioError(file, path, "cannot set a field below a value")
    node[parts[-1]] = value


def read_yaml(path: Path) -> dict[str, Any]:
    """Parse a scenario's YAML mapping through the input boundary
    (:mod:`simulator.boundary`): every problem is one line with the position."""
    data = yaml_value(read_text(path), str(path))
    if not isinstance(data, dict):
        raise ScenarioError(str(path), "", "a scenario must be a YAML mapping")
    check_tree(data, str(path))
    return data


def shipped_scenarios() -> dict[str, Path]:
    """Scenarios installed with hetsim, by name (the file name without ``.yaml``)."""
    folder = Path(__file__).resolve().parent.parent / "scenarios"
    return {p.stem: p for p in sorted(folder.glob("*.yaml"))}


def find_scenario(ref: str | Path) -> Path:
    """The scenario file ``ref`` names: an existing file, else (for a bare name such as
    ``quickstart`` or ``cauchy.yaml``) the shipped scenario of that name."""
    p = Path(ref)
    if p.is_file() or len(p.parts) != 1:
        return p  # a path: read_yaml reports a missing file
    name = p.name[: -len(".yaml")] if p.name.endswith(".yaml") else p.name
    shipped = shipped_scenarios()
    if name in shipped:
        return shipped[name]
    from hetsim.simulator.registry import did_you_mean

    hint = did_you_mean(name, list(shipped))
    raise ScenarioError(
        str(ref),
        "",
        f"no such file, and no shipped scenario {name!r};{hint} shipped: " + ", ".join(shipped),
    )


def load_scenario(path: str | Path, overrides: dict[str, Any] | None = None) -> Scenario:
    """Read, override and validate a scenario file (or a shipped scenario by name)."""
    p = find_scenario(path)
    raw = read_yaml(p)
    for dotted_path, value in (overrides or {}).items():
        set_dotted(raw, dotted_path, value, str(p))
    return from_dict(raw, file=str(p), base_dir=p.resolve().parent)


def from_dict(
    raw: dict[str, Any], file: str = "<scenario>", base_dir: Path | None = None
) -> Scenario:
    """Validate a scenario given as a dict (``file`` names it in errors)."""
    load_plugins()
    base = base_dir or Path.cwd()
    check_tree(raw, file)
    try:
        top = ScenarioModel.model_validate(raw)
    except ValidationError as e:
        raise from_validation(file, "", e, raw, ScenarioModel) from None
    _check_data(file, top.data, base)
    _load_extensions(file, top, base)
    cluster = _validate_cluster(file, top.cluster)
    if top.workloads is not None or top.workload is None:
        return colocated_scenario(file, base, raw, top, cluster)
    if top.sharing:
        raise ScenarioError(file, "sharing", "only with workloads: (several workloads)")
    if top.faults is not None:
        raise ScenarioError(file, "faults", "only with workloads: (several workloads)")
    wl_cls, workload = _validate_workload(file, top.workload, base)
    policies = _validate_policies(file, wl_cls, top.policies)
    _validate_sweep(file, top.sweep)
    return Scenario(
        file=file,
        base_dir=base,
        raw=copy.deepcopy(raw),
        name=top.name,
        seed=top.seed,
        until_s=top.until_s,
        cluster=cluster,
        workload_cls=wl_cls,
        workload=workload,
        policies=policies,
        outputs=top.outputs,
        sweep=top.sweep,
        plugins=tuple(top.plugins),
        catalogue=tuple(top.catalogue),
    )


def missing_data(needs: list[DataNeed], base: Path) -> list[tuple[int, DataNeed, Path]]:
    """The entries of a scenario's ``data:`` that are absent (index, entry, path)."""
    out = []
    for i, need in enumerate(needs):
        path = resolve_path(need.path, base)
        if not path.exists():
            out.append((i, need, path))
    return out


def _check_data(file: str, needs: list[DataNeed], base: Path) -> None:
    """One line for the first unshipped data set that is not where the scenario reads it."""
    for i, need, path in missing_data(needs, base)[:1]:
        where = os.path.abspath(path)
        raise ScenarioError(file, f"data[{i}]", f"needs {need.what}, which hetsim does not "
                            f"ship: fetch it from {need.fetch} and put it at {where}")  # fmt: skip


def _load_extensions(file: str, top: ScenarioModel, base: Path) -> None:
    """Load the scenario's plugins and user catalogues (each once per process)."""
    from hetsim.simulator.user_catalogue import UserCatalogueError, load_user_catalogue

    for i, ref in enumerate(top.plugins):
        try:
            load_plugin(ref, base, origin=f"{file}: plugins[{i}]")
        except PluginError as e:
            raise ScenarioError(file, f"plugins[{i}]", str(e).split(": ", 2)[-1]) from None
    for i, ref in enumerate(top.catalogue):
        try:
            load_user_catalogue(resolve_path(ref, base))
        except (UserCatalogueError, ValueError) as e:
            raise ScenarioError(file, f"catalogue[{i}]", str(e)) from None


def _validate_cluster(file: str, raw: dict[str, Any]) -> Any:
    from hetsim.devices.cluster import ClusterConfig

    try:
        cluster = ClusterConfig.model_validate(raw)
    except ValidationError as e:
        raise from_validation(file, "cluster", e, raw, ClusterConfig) from None
    except KeyError as e:
        raise ScenarioError(file, "cluster", str(e).strip("'\"")) from None
    _check_routes(file, cluster)
    return cluster


def _check_routes(file: str, cluster: Any) -> None:
    """A cluster with links must route between every pair of its devices: refuse one
    whose links leave separate groups (a run would fail at its first copy across)."""
    if cluster.network is None and not any(n.links for n in cluster.nodes):
        return  # no links at all: nothing routes, nothing to check
    try:
        graph = cluster.topology().graph
    except (KeyError, ValueError) as e:
        raise ScenarioError(file, "cluster", str(e).strip("'\"")) from None
    if graph.number_of_edges() == 0:
        return
    components = graph.components()
    if len(components) == 1:
        return
    groups = sorted((sorted(c) for c in components), key=len, reverse=True)
    a, b = groups[0][0], groups[1][0]
    raise ScenarioError(
        file, "cluster", f"no route between {a!r} and {b!r}: the links leave {len(groups)} "
        "separate groups of devices; add the missing link",
    )  # fmt: skip


def _validate_workload(
    file: str, raw: dict[str, Any], base: Path, where: str = "workload"
) -> tuple[Any, Any]:
    kind = raw.get("kind")
    if kind is None:
        raise ScenarioError(file, f"{where}.kind", "required field is missing")
    try:
        cls = registry.workloads.get(str(kind))
    except registry.UnknownName as e:
        raise ScenarioError(file, f"{where}.kind", str(e)) from None
    try:
        params = cls.Params.model_validate(raw)
    except ValidationError as e:
        raise from_validation(file, where, e, raw, cls.Params) from None
    except KeyError as e:  # a validator's registry lookup (UnknownName names the valid ones)
        raise ScenarioError(file, where, str(e).strip("'\"")) from None
    _check_paths(file, where, params.model_dump(), base)
    return cls, params


def _check_paths(file: str, prefix: str, data: Any, base: Path) -> None:
    """Every field called ``path`` or ``*_path`` (and ``trace_dir`` with its ``file``)
    must name a regular file hetsim may read (:func:`boundary.data_file_problem`)."""
    if isinstance(data, dict):
        for key, value in data.items():
            where = f"{prefix}.{key}"
            named_path = isinstance(key, str) and (key == "path" or key.endswith("_path"))
            if named_path and isinstance(value, str):
                _check_file(file, where, value, base)
            elif key == "trace_dir" and isinstance(value, str):
                name = data.get("file")
                if isinstance(name, str):
                    _check_file(file, f"{prefix}.file", value, base, name)
            else:
                _check_paths(file, where, value, base)
    elif isinstance(data, list):
        for i, value in enumerate(data):
            _check_paths(file, f"{prefix}[{i}]", value, base)


def _check_file(file: str, where: str, value: str, base: Path, name: str | None = None) -> None:
    try:
        target = resolve_path(value, base)
    except ValueError as e:
        raise ScenarioError(file, where, str(e)) from None
    shown = value if name is None else f"{value}/{name}"
    problem = data_file_problem(target / name if name is not None else target)
    if problem is not None:
        problem = problem.removeprefix("cannot read: ")
        raise ScenarioError(file, where, f"cannot read {shown!r}: {problem}")


def _validate_policies(
    file: str, wl_cls: Any, raw: dict[str, Any], prefix: str = "policies"
) -> dict[str, PolicyChoice]:
    points: dict[str, str] = wl_cls.decision_points
    for point in raw:
        if point not in points:
            valid = ", ".join(sorted(points)) or "(none)"
            raise ScenarioError(
                file, f"{prefix}.{point}", f"not a decision point of this workload; valid: {valid}"
            )
    out = {}
    for point, default in points.items():
        spec = raw.get(point, default)
        where = f"{prefix}.{point}"
        if isinstance(spec, str):
            name, params = spec, {}
        elif isinstance(spec, dict) and isinstance(spec.get("name"), str):
            params = {k: v for k, v in spec.items() if k not in ("name", "label")}
            name = spec["name"]  # 'label' only names the choice in tables and plots
        else:
            raise ScenarioError(file, where, "must be a policy name or {name: ..., <params>}")
        try:
            cls = registry.policies.get(f"{wl_cls.domain}.{point}", name)
        except registry.UnknownName as e:
            raise ScenarioError(file, where, str(e)) from None
        try:
            validated = cls.Params.model_validate(params)
        except ValidationError as e:
            raise from_validation(file, where, e, params, cls.Params) from None
        except KeyError as e:
            raise ScenarioError(file, where, str(e).strip("'\"")) from None
        out[point] = PolicyChoice(point, name, cls, validated)
    return out


def _validate_sweep(file: str, sweep: dict[str, Any]) -> None:
    from hetsim.simulator.sweep_design import parse_sweep

    try:
        spec = parse_sweep(sweep)
    except ValidationError as e:
        raise from_validation(file, "sweep", e, sweep) from None
    for path in spec.parameters:
        if path.split(".")[0] not in ScenarioModel.model_fields or path.startswith("sweep"):
            where = "sweep." + ("parameters." if "parameters" in sweep else "") + path
            raise ScenarioError(file, where, "must be a dotted path into the scenario")


# ---- the workloads: form (several workloads on one cluster; simulator/colocate.py) ----
def colocated_scenario(file: str, base: Path, raw: dict[str, Any], top: Any, cluster: Any) -> Any:
    """The :class:`~simulator.scenario.Scenario` of a ``workloads:`` scenario."""
    if top.workload is not None:
        raise ScenarioError(file, "workloads", "give workload: or workloads:, not both")
    if not top.workloads:
        raise ScenarioError(file, "workload", "required field is missing")
    try:
        sharing = SharingConfig.model_validate(top.sharing)
    except ValidationError as e:
        raise from_validation(file, "sharing", e, top.sharing) from None
    accels = _accelerators(cluster)
    members: list[list[Any]] = []
    claimed: dict[str, list[str]] = {}
    for name, block in top.workloads.items():
        where = f"workloads.{name}"
        if not isinstance(block, dict):
            raise ScenarioError(file, where, "must be a workload block (a mapping with kind:)")
        body = {k: v for k, v in block.items() if k not in ("policies", "devices")}
        cls, params = _validate_workload(file, body, base, where)
        pols = block.get("policies") or {}
        if not isinstance(pols, dict):
            raise ScenarioError(file, f"{where}.policies", "must be a mapping")
        choices = _validate_policies(file, cls, pols, f"{where}.policies")
        patterns = block.get("devices")
        if patterns is not None:
            if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
                raise ScenarioError(file, f"{where}.devices", "must be a list of device names "
                                    "or patterns")  # fmt: skip
            devs = [d for d in accels if any(fnmatch.fnmatchcase(d, p) for p in patterns)]
            if not devs:
                raise ScenarioError(file, f"{where}.devices", f"matches no accelerator; the "
                                    f"cluster has {', '.join(accels)}")  # fmt: skip
            for d in devs:
                if d in claimed and sharing.model == "exclusive":
                    raise ScenarioError(file, f"{where}.devices", f"{d} is also assigned to "
                                        f"{claimed[d][0]} (sharing: exclusive)")  # fmt: skip
                claimed.setdefault(d, []).append(name)
            patterns = tuple(patterns)
        members.append([name, cls, params, choices, tuple(devs) if patterns else (), patterns])
    rest = tuple(d for d in accels if d not in claimed)
    unnamed = [m for m in members if m[5] is None]
    if len(unnamed) > 1:
        raise ScenarioError(file, f"workloads.{unnamed[1][0]}.devices",
                            "required when another workload also omits it")  # fmt: skip
    for m in unnamed:
        m[4] = rest
    extra = sorted(set(top.policies) - {"arbiter"})
    if extra:
        raise ScenarioError(file, f"policies.{extra[0]}", "with workloads:, the top-level "
                            "policies: holds only arbiter (each workload has its own)")  # fmt: skip
    shared = {d: tuple(o) for d, o in claimed.items() if len(o) > 1}
    _check_sharing(file, sharing, shared, {m[0]: m[2].kind for m in members})
    arbiter = _arbiter_choice(file, top.policies.get("arbiter", "static"))
    faults = _faults(file, top, cluster, {m[0]: m[2].kind for m in members}, shared)
    _validate_sweep(file, top.sweep)
    col = Colocation(tuple(Member(*m) for m in members), arbiter, sharing, shared, faults)
    return Scenario(
        file=file, base_dir=base, raw=copy.deepcopy(raw), name=top.name, seed=top.seed,
        until_s=top.until_s, cluster=cluster,
        workload_cls=_stand_in(list(col.members), faults is not None),
        workload=col, policies={},
        outputs=top.outputs, sweep=top.sweep, plugins=tuple(top.plugins),
        catalogue=tuple(top.catalogue), colocation=col,
    )  # fmt: skip


def _faults(
    file: str, top: Any, cluster: Any, kinds: dict[str, str], shared: dict[str, Any]
) -> Any:
    """The validated ``faults:`` block (workloads.colocate.faults), None without one."""
    if top.faults is None:
        return None
    from hetsim.workloads.colocate.faults import FaultsConfig, check_faults

    try:
        cfg = FaultsConfig.model_validate(top.faults)
    except ValidationError as e:
        raise from_validation(file, "faults", e, top.faults, FaultsConfig) from None
    problem = check_faults(cfg, cluster, kinds, shared, top.until_s)
    if problem is not None:
        raise ScenarioError(file, *problem)
    return cfg


def _check_sharing(
    file: str, sharing: SharingConfig, shared: dict[str, tuple[str, ...]], kinds: dict[str, str]
) -> None:
    from hetsim.workloads.colocate.sharing import SHARE_AWARE

    for name in sharing.fractions:
        if name not in kinds:
            raise ScenarioError(file, f"sharing.fractions.{name}", "not a workload; valid: "
                                + ", ".join(kinds))  # fmt: skip
    for d, owners in shared.items():
        for o in owners:
            if kinds[o] not in SHARE_AWARE:
                raise ScenarioError(file, f"workloads.{o}.devices", f"{d} is shared, and a "
                                    f"{kinds[o]} workload cannot price a shared GPU "
                                    f"(only {', '.join(SHARE_AWARE)})")  # fmt: skip
        if sharing.model != "exclusive":
            given = sum(sharing.fractions.get(o, 0.0) for o in owners)
            rest = [o for o in owners if o not in sharing.fractions]
            if given > 1.0 + 1e-9 or (rest and given >= 1.0):
                raise ScenarioError(file, "sharing.fractions", f"the fractions of {d}'s "
                                    f"owners ({', '.join(owners)}) exceed 1")  # fmt: skip


def _accelerators(cluster: Any) -> list[str]:
    out = []
    for entry in cluster.topology().devices():
        known = entry.type_name in registry.device_types
        if known and registry.device_types.get(entry.type_name).kind in ACCELERATORS:
            out.append(entry.name)
    return out


def _arbiter_choice(file: str, spec: Any) -> Any:
    where = "policies.arbiter"
    if isinstance(spec, str):
        name, params = spec, {}
    elif isinstance(spec, dict) and isinstance(spec.get("name"), str):
        params = {k: v for k, v in spec.items() if k not in ("name", "label")}
        name = spec["name"]
    else:
        raise ScenarioError(file, where, "must be a policy name or {name: ..., <params>}")
    try:
        cls = registry.policies.get(ARBITER_POINT, name)
    except registry.UnknownName as e:
        raise ScenarioError(file, where, str(e)) from None
    try:
        validated = cls.Params.model_validate(params)
    except ValidationError as e:
        raise from_validation(file, where, e, params) from None
    return PolicyChoice("arbiter", name, cls, validated)
