"""Gavel's measured co-location pairs (space sharing): each member's own rate in a pair.

Gavel (Narayanan et al., OSDI'20) measured, for pairs of 1-GPU jobs sharing one GPU,
both jobs' steps/s (``scheduler/simulation_throughputs.json``; shipped trimmed to seven
job types as ``workloads/data/cluster/gavel_pairs_sf1.csv``). In a measured pair each job
advances at its own rate, which Muri's per-size factors (one iteration time for the
whole group) cannot express. With ``speeds.pairs_path`` set, the mechanism runs a group
of two 1-GPU jobs whose Gavel job types have a measured pair on the group's GPU type
with member iteration times

    iter_j = solo_iter_j(t) x isolated_steps_s(type_j, t) / pair_steps_s(type_j, type_k, t)

(the measured slowdown applied to the job's own solo time, so a job whose profile is
Gavel's exactly, 1 / isolated steps/s, runs at 1 / pair steps/s); every other group
(unmeasured pair, multi-GPU jobs: Gavel measured pairs only at scale factor 1, three or
more members) follows ``execution.interference_model``. Pairs with a zero in the table
are absent from the file (Gavel never runs them).
"""

from __future__ import annotations

from pathlib import Path

from hetsim.workloads.cluster.data import RowError, csv_rows, number

#: (job type, other job type, GPU type) -> (this job's, the other's) steps/s together
PairRates = dict[tuple[str, str, str], tuple[float, float]]


def read_pair_table(path: Path) -> PairRates:
    """Rows ``gavel_job_type, other_job_type, gpu_type, steps_s, other_steps_s``; both
    orders of a pair are stored (the reverse entry is added where only one is given; a
    reverse entry that disagrees is an error naming the line)."""
    out: PairRates = {}
    for line, row in csv_rows(path):
        a, b, t = (row.get(c) or "" for c in ("gavel_job_type", "other_job_type", "gpu_type"))
        for col, v in (("gavel_job_type", a), ("other_job_type", b), ("gpu_type", t)):
            if not v:
                raise RowError(path, line, col, "missing")
        x = number(path, line, row, "steps_s")
        y = number(path, line, row, "other_steps_s")
        if x <= 0 or y <= 0:
            raise RowError(path, line, "steps_s", "a pair's rates must be > 0 (omit the row)")
        back = out.get((b, a, t))
        if back is not None and back != (y, x):
            raise RowError(path, line, "steps_s", f"disagrees with the reverse pair {back}")
        out[(a, b, t)] = (x, y)
        out[(b, a, t)] = (y, x)
    return out


def pair_slowdowns(
    names: list[str | None], types: list[str], pairs: PairRates,
    isolated: dict[str, dict[str, float]],
) -> dict[tuple[int, int, int], tuple[float, float]]:  # fmt: skip
    """(profile a, profile b, type index) -> (a's, b's) slowdown >= its isolated time in
    the pair, for every pair of profiles whose Gavel job types (``names``; None: no
    pair data, e.g. a multi-GPU job) have a measured pair on that type."""
    out: dict[tuple[int, int, int], tuple[float, float]] = {}
    for pa, na in enumerate(names):
        for pb, nb in enumerate(names):
            if na is None or nb is None:
                continue
            for ti, t in enumerate(types):
                rates = pairs.get((na, nb, t))
                if rates is None or t not in isolated.get(na, {}) or t not in isolated.get(nb, {}):
                    continue
                out[(pa, pb, ti)] = (isolated[na][t] / rates[0], isolated[nb][t] / rates[1])
    return out
