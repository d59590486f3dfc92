"""Alpha-beta time of collective operations on n ranks (pure functions, no SimPy).

A collective on a fabric is modelled as ``base + steps * alpha + wire_bytes / (B * eff(S))``:

* ``S`` is the message size in bytes as nccl-tests counts it (the full buffer of one
  rank for all-reduce and broadcast; the full gathered output of all-gather; the full
  input of reduce-scatter; the full send buffer of all-to-all);
* ``B`` is the fabric's bus bandwidth per rank per direction (``bandwidth_Bps``); on a
  full mesh (``mesh_links > 0``) a rank uses ``min(n - 1, mesh_links)`` of its links;
* ``eff(S)`` is the fitted, size-dependent fraction of ``B`` that the algorithm achieves
  (:class:`devices.spec.EfficiencyCurve`), and ``alpha`` its per-step latency. Both are
  fitted per fabric and algorithm by :mod:`devices.calibration` to C01..C07;
* ``base`` a per-call latency that does not grow with the ranks (launch, protocol set-up,
  waiting for the last rank to arrive), fitted with the rest where the calibration data
  hold small-message sweeps at several rank counts (Vidur's torch.distributed NCCL
  sweeps: the per-call time of a few-KiB all-reduce is 27-47 us at 2, 4 and 8 GPUs
  alike, :data:`devices.calibration_points.VIDUR_PLATEAUS`); 0 elsewhere.

Steps and bytes each rank sends, per op and algorithm (n ranks):

=============== ========= ================== ==================
op              algorithm steps              wire bytes per rank
=============== ========= ================== ==================
all_reduce      ring      2(n-1)             2(n-1)/n * S
all_reduce      tree      2 ceil(log2 n)     2 S  (double binary tree: reduce up, broadcast down)
all_reduce      nvls      2                  S    (switch reduces and multicasts; see below)
all_gather      ring      n-1                (n-1)/n * S
reduce_scatter  ring      n-1                (n-1)/n * S
all_to_all      direct    n-1                (n-1)/n * S  (pairwise exchange)
broadcast       ring      n-1                S    (pipelined chain)
broadcast       tree      ceil(log2 n)       S    (double binary tree)
=============== ========= ================== ==================

NVLS (NVLink SHARP) all-reduce: each rank pushes its S bytes into the NVSwitch, which
reduces them, and pulls the S-byte result back by multicast, so its wire traffic no
longer follows the ring formula; NCCL's reported bus bandwidth can then exceed the line
rate (calibration README A.3). It has its own fitted curve, never the ring one.

Bus bandwidth (nccl-tests' definition, independent of the algorithm):
``algbw = S / t`` and ``busbw = algbw * factor`` with factor ``2(n-1)/n`` for
all-reduce, ``(n-1)/n`` for all-gather, reduce-scatter and all-to-all, ``1`` for
broadcast. For a ring all-reduce with ``alpha = 0`` this gives ``busbw = B * eff(S)``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from hetsim.devices.spec import EfficiencyCurve

ALGORITHMS: dict[str, tuple[str, ...]] = {
    "all_reduce": ("ring", "tree", "nvls"),
    "all_gather": ("ring",),
    "reduce_scatter": ("ring",),
    "all_to_all": ("direct",),
    "broadcast": ("ring", "tree"),
}
"""Valid algorithms per op; the first one is the op's default."""


@dataclass(frozen=True)
class AlgorithmFit:
    """Fitted alpha-beta parameters of one algorithm on one fabric."""

    alpha_s: float
    efficiency: EfficiencyCurve
    basis: str = ""
    #: per-call latency independent of the rank count (module doc)
    base_s: float = 0.0

    def __post_init__(self) -> None:
        if not (self.alpha_s >= 0 and math.isfinite(self.alpha_s)):
            raise ValueError(f"alpha_s must be finite and >= 0, got {self.alpha_s}")
        if not (self.base_s >= 0 and math.isfinite(self.base_s)):
            raise ValueError(f"base_s must be finite and >= 0, got {self.base_s}")


@dataclass(frozen=True)
class CollectiveFabric:
    """A scale-up or scale-out fabric as seen by collectives: bandwidth, per-algorithm fits.

    ``bandwidth_Bps`` is the bus bandwidth bound of one rank in one direction (NVLink per
    GPU behind an NVSwitch; the node's NIC aggregate for a multi-node ring; all links of a
    rank on a full mesh). ``mesh_links > 0`` marks a full mesh of that many links per rank.
    A fabric without a ``tree`` fit uses its ``ring`` fit for trees.
    """

    name: str
    display_name: str
    bandwidth_Bps: float
    algorithms: dict[str, AlgorithmFit] = field(default_factory=dict)
    mesh_links: int = 0
    source: str = ""
    notes: str = ""

    def __post_init__(self) -> None:
        if not (self.bandwidth_Bps > 0 and math.isfinite(self.bandwidth_Bps)):
            raise ValueError(f"{self.name}: bandwidth_Bps must be > 0")
        if self.mesh_links < 0:
            raise ValueError(f"{self.name}: mesh_links must be >= 0")
        if "ring" not in self.algorithms:
            raise ValueError(f"{self.name}: a fabric needs at least a 'ring' fit")

    def rank_bandwidth_Bps(self, n: int) -> float:
        """Bus bandwidth per rank per direction with ``n`` ranks (mesh: links in use)."""
        if self.mesh_links == 0:
            return self.bandwidth_Bps
        return self.bandwidth_Bps * min(n - 1, self.mesh_links) / self.mesh_links

    def fit(self, algorithm: str) -> AlgorithmFit:
        """Fitted parameters of ``algorithm`` (tree and direct fall back to ring)."""
        if algorithm in self.algorithms:
            return self.algorithms[algorithm]
        if algorithm in ("tree", "direct"):
            return self.algorithms["ring"]
        raise ValueError(
            f"fabric {self.name} has no {algorithm!r} fit; has {sorted(self.algorithms)}"
        )


def check_op(op: str, algorithm: str | None = None) -> str:
    """Validate ``op`` and ``algorithm``; return the algorithm (the op's default if None)."""
    if op not in ALGORITHMS:
        raise ValueError(f"unknown collective {op!r}; valid: {', '.join(ALGORITHMS)}")
    valid = ALGORITHMS[op]
    if algorithm is None:
        return valid[0]
    if algorithm not in valid:
        raise ValueError(f"unknown algorithm {algorithm!r} for {op}; valid: {', '.join(valid)}")
    return algorithm


def _log2_steps(n: int) -> int:
    """Depth of a binary tree over n ranks: ceil(log2 n)."""
    return math.ceil(math.log2(n))


def steps_and_wire_factor(op: str, n: int, algorithm: str) -> tuple[int, float]:
    """Latency steps and wire bytes per rank as a multiple of S (table in module doc)."""
    if algorithm == "nvls":
        return 2, 1.0
    if algorithm == "tree":
        depth = _log2_steps(n)
        return (2 * depth, 2.0) if op == "all_reduce" else (depth, 1.0)
    if op == "all_reduce":
        return 2 * (n - 1), 2.0 * (n - 1) / n
    if op == "broadcast":
        return n - 1, 1.0
    return n - 1, (n - 1) / n


def collective_time_s(
    op: str, n: int, nbytes: int, fabric: CollectiveFabric, algorithm: str | None = None
) -> float:
    """Time in seconds of one collective ``op`` of ``nbytes`` over ``n`` ranks on ``fabric``.

    ``base + steps * alpha + wire_factor * nbytes / (B(n) * eff(nbytes))``; 0 for one rank.
    ``algorithm`` defaults to the op's first valid one (ring; direct for all-to-all).
    """
    algo = check_op(op, algorithm)
    if n < 1:
        raise ValueError(f"a collective needs n >= 1 ranks, got {n}")
    if nbytes < 0:
        raise ValueError(f"negative message size {nbytes}")
    if n == 1:
        return 0.0
    fit = fabric.fit(algo)
    steps, wire = steps_and_wire_factor(op, n, algo)
    time_s = fit.base_s + steps * fit.alpha_s
    if nbytes > 0:
        achieved_Bps = fabric.rank_bandwidth_Bps(n) * fit.efficiency(nbytes)
        time_s += wire * nbytes / achieved_Bps
    return time_s


def bus_factor(op: str, n: int) -> float:
    """nccl-tests' busbw / algbw ratio for ``op`` on ``n`` ranks."""
    check_op(op)
    if op == "all_reduce":
        return 2.0 * (n - 1) / n
    if op == "broadcast":
        return 1.0
    return (n - 1) / n


def algorithm_bandwidth_Bps(nbytes: int, time_s: float) -> float:
    """nccl-tests' algbw: message bytes over time."""
    if time_s <= 0:
        raise ValueError(f"time must be > 0, got {time_s}")
    return nbytes / time_s


def bus_bandwidth_Bps(op: str, n: int, nbytes: int, time_s: float) -> float:
    """nccl-tests' busbw of one ``op`` of ``nbytes`` on ``n`` ranks that took ``time_s``."""
    return algorithm_bandwidth_Bps(nbytes, time_s) * bus_factor(op, n)
