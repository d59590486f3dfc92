"""A board power cap on the cluster domain's GPUs (``cluster.accelerator_power_cap_w``).

The domain's job times come from traces and a per-type throughput table (Gavel's measured
steps/s), not from kernels, so a cap reaches them through the one mechanism of
:mod:`hetsim.devices.power`: under a cap ``C`` below a type's TDP a compute-bound kernel
runs at ``r = ((C - idle_W) / (tdp_W - idle_W)) ** (1 / dvfs_exponent)`` of its clock,
and a memory-bound one keeps its clock. Of a job's GPU stage (Muri's ``gpu`` stage, the
per-iteration time its kernels run on the type) the share ``f``
(``execution.compute_bound_fraction``) is compute-bound, so the cap stretches that stage
by ``(1 - f) + f / r``; the data and network stages keep their time. The stretch divides
the job's speed on the type (``JobTable.speed``), so the truth and every estimate the
policies see move together. Energy (:mod:`hetsim.workloads.cluster.metrics`) prices the
same split: a running kernel draws the power limit (``C``) for the compute-bound share,
the memory-bound draw for the rest.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from hetsim.devices.power import PowerModel, type_power_model
from hetsim.simulator.errors import FieldError

if TYPE_CHECKING:
    from hetsim.devices.cluster import ClusterConfig

CAP_FIELD = "cluster.accelerator_power_cap_w"


def check_no_node_caps(config: ClusterConfig) -> None:
    """A cluster workload's GPUs are its ``workload.inventory``, not ``cluster.nodes``
    (a placeholder there): a node device's ``power_cap_w`` would be ignored, so it is an
    error naming the field that does apply."""
    for node in config.nodes:
        for name, dev in node.devices.items():
            if dev.power_cap_w is not None:
                raise FieldError(
                    f"cluster.nodes.{node.name}.devices.{name}.power_cap_w",
                    "a cluster workload's GPUs are workload.inventory, not cluster.nodes: "
                    f"cap them with {CAP_FIELD}",
                )


def inventory_power_models(
    types: list[str], config: ClusterConfig, strict: bool = False
) -> list[PowerModel] | None:
    """The power model of each inventory type under the run's coefficients and cap
    (``cluster.power_coefficients``, ``cluster.accelerator_power_cap_w``); None when a
    type has no power data, or with ``strict`` (a cap is set) a FieldError naming it."""
    cap = config.accelerator_power_cap_w
    over = tuple((k, float(v)) for k, v in config.power_coefficients.items())
    try:
        return [type_power_model(name, cap_W=cap, overrides=over) for name in types]
    except KeyError as e:
        if strict:
            raise FieldError(CAP_FIELD, f"{e.args[0]}: the cap cannot be priced") from None
        return None
    except ValueError as e:
        raise FieldError(CAP_FIELD, str(e)) from None


def gpu_stage_stretch(models: list[PowerModel], compute_bound_fraction: float) -> np.ndarray:
    """(T,) factor on each type's GPU-stage time under its cap: ``(1 - f) + f / r``
    (module doc), 1.0 for an uncapped type."""
    f = compute_bound_fraction
    return np.array([1.0 if m.clock_ratio >= 1.0 else (1.0 - f) + f / m.clock_ratio
                     for m in models])  # fmt: skip
