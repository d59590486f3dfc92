"""The task graph of one TEE + NNA training step, with its true dependencies (DAC'23).

Ops run in order forward, then in reverse order backward. Each op's work splits into
its forward GEMM (1/3 of every cost) and its two backward GEMMs (2/3; reconstruction:
the three GEMMs have the same FLOPs). For an op on NNA ``k`` (masked offload), per pass:

1. ``mask`` on the TEE (masking, type conversion, the switch toll when the previous op
   ran elsewhere): needs the previous op's output, so it waits for the previous op;
2. ``nna`` on ``nna{k}`` (link both ways + compute): waits for the mask;
3. ``unmask`` on the TEE (unmasking with the meta-key, conversion, nonlinear work, weight
   update): waits for the NNA and for the op's meta-key.

Only the ``metakey`` task does not depend on this step's activations (it needs the
weights and the random masks). With prefetch ``depth >= 1`` it is a background task
(lower priority on the TEE) that may start once the op ``depth`` positions earlier has
been masked, so the TEE prepares at most ``depth`` ops ahead while the NNA computes.
With ``depth = 0`` it sits on the critical path, right before the op's forward mask.
An op kept in the TEE is one task per pass on the TEE. A decomposed op
(:data:`workloads.tee.view.DECOMPOSE`, Nappa's vector decomposition, reconstruction)
masks into one additive share per NNA (same TEE cost as masking), runs on every NNA in
parallel, and recombines (same TEE cost as unmasking) with no meta-key: the shares sum
to the input, so the outputs sum to the result.

Micro-batch interleaving (DAC'23's pipeline across the batch, ``micro_batches`` m > 1):
the batch is split into m equal micro-batches, and each op's tasks above run once per
micro-batch, micro-batch b of op i waiting only for micro-batch b of op i-1. The TEE
can then convert and mask micro-batch b+1, or unmask micro-batch b-1, while an NNA
computes micro-batch b. Each micro-batch carries 1/m of the op's masking, unmasking,
nonlinear and meta-key work and of its TEE-only work (the step's bytes and FLOPs are
conserved), its own ECALL/OCALL pairs (``crossings_s``, paid in full per micro-batch)
and enclave-switch toll, and its own link and NNA time (``view.micro``: one copy per
direction per micro-batch, with the link's latency, and the NNA's roofline at the
micro-batch's size, weights re-read each time). Meta-key prefetch gates per micro-batch:
the key of op i, micro-batch b may start once op i-depth, micro-batch b is masked.

``overhead=False`` zeroes the protection overhead (masking, type conversion, unmasking,
meta-keys, crossings and tolls; the nonlinear work and the weight update stay), so the
exposed share of that overhead can be measured.
"""

from __future__ import annotations

from hetsim.workloads.tee.dag import Task
from hetsim.workloads.tee.view import DECOMPOSE, TEE, ExecutionView, OpView, post_s

FWD_SHARE = 1.0 / 3.0  # forward GEMM share of an op's three GEMMs


def _remote(view: ExecutionView, i: int, op: OpView, m: int) -> tuple[list[float], list[float]]:
    """(NNA, link) seconds per micro-batch of op ``i`` on each NNA at ``m`` micro-batches."""
    if m == 1:
        return list(op.nna_s), list(op.xfer_s)
    if view.micro is None or m not in view.micro:
        raise ValueError(f"the view offers no per micro-batch times for {m} micro-batches")
    t = view.micro[m][i]
    return list(t.nna_s), list(t.xfer_s)


def step_tasks(
    view: ExecutionView,
    placement: tuple[int, ...],
    depth: int,
    micro_batches: int = 1,
    metakeys: bool = True,
    overhead: bool = True,
) -> list[Task]:
    """The tasks of one step (module doc). ``metakeys=False`` zeroes meta-key work (to
    measure how much of it is exposed); ``overhead=False`` zeroes every protection
    overhead (module doc)."""
    m = micro_batches
    if m < 1:
        raise ValueError(f"micro_batches must be >= 1, got {m}")
    tasks: list[Task] = []
    mask_fwd: dict[tuple[int, int], int] = {}
    prev: list[int | None] = [None] * m
    prev_dev = TEE
    n = len(view.ops)

    def add(name: str, res: str, dur: float, deps: list[int | None], prio: int = 0) -> int:
        tasks.append(Task(name, res, dur, tuple(d for d in deps if d is not None), prio))
        return len(tasks) - 1

    last_key: list[int | None] = [None] * m

    def tag(b: int) -> str:
        return "" if m == 1 else f" mb{b}"

    passes = (("fwd", range(n), FWD_SHARE), ("bwd", range(n - 1, -1, -1), 1 - FWD_SHARE))
    for phase, order, share in passes:
        for i in order:
            op, k = view.ops[i], placement[i]
            toll = view.switch_s if (k != prev_dev and overhead) else 0.0
            prev_dev = k
            if k == TEE:
                for b in range(m):
                    dur = share * op.tee_s / m + toll
                    prev[b] = add(f"{op.name}{tag(b)} {phase}", "tee", dur, [prev[b]])
                continue
            nna, xfer = _remote(view, i, op, m)
            mk_s = op.metakey_s / m if (metakeys and overhead) else 0.0
            mask_s = share * op.mask_s / m + toll if overhead else 0.0
            per_mb = max(0.0, post_s(op) - op.crossings_s) / m
            post = share * (per_mb + op.crossings_s) if overhead else share * op.nonlinear_s / m
            devs = range(len(view.nnas)) if k == DECOMPOSE else (k,)
            for b in range(m):
                key: int | None = None
                if phase == "fwd" and k != DECOMPOSE:
                    name = f"{op.name}{tag(b)} metakey"
                    if depth == 0:
                        prev[b] = key = add(name, "tee", mk_s, [prev[b]])
                    else:
                        gate = mask_fwd.get((i - depth, b)) if i - depth >= 0 else None
                        key = add(name, "tee", mk_s, [gate, last_key[b]], prio=1)
                    last_key[b] = key
                mask = add(f"{op.name}{tag(b)} {phase} mask", "tee", mask_s, [prev[b]])
                if phase == "fwd":
                    mask_fwd[(i, b)] = mask
                remote = [
                    add(f"{op.name}{tag(b)} {phase}", f"nna{d}", share * (xfer[d] + nna[d]), [mask])
                    for d in devs
                ]
                # a decomposed op has no meta-key: its recombination is priced like unmasking
                name = f"{op.name}{tag(b)} {phase} unmask"
                prev[b] = add(name, "tee", post, [*remote, key])
    return tasks
