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
"""

from __future__ import annotations

from hetsim.workloads.tee.dag import Task
from hetsim.workloads.tee.view import DECOMPOSE, TEE, ExecutionView, post_s

FWD_SHARE = 1.0 / 3.0  # forward GEMM share of an op's three GEMMs


def step_tasks(
    view: ExecutionView, placement: tuple[int, ...], depth: int, metakeys: bool = True
) -> list[Task]:
    """The tasks of one step (module doc). ``metakeys=False`` zeroes meta-key work (to
    measure how much of it is exposed)."""
    tasks: list[Task] = []
    mask_fwd: dict[int, int] = {}
    prev: int | None = None
    prev_dev = TEE
    n = len(view.ops)

    def add(name: str, res: str, dur: float, deps: list[int | None], prio: int = 0) -> int:
        tasks.append(Task(name, res, dur, tuple(d for d in deps if d is not None), prio))
        return len(tasks) - 1

    last_key: int | None = None
    passes = (("fwd", range(n), FWD_SHARE), ("bwd", range(n - 1, -1, -1), 1 - FWD_SHARE))
    for phase, order, share in passes:
        for i in order:
            op, k = view.ops[i], placement[i]
            toll = view.switch_s if k != prev_dev else 0.0
            prev_dev = k
            if k == TEE:
                prev = add(f"{op.name} {phase}", "tee", share * op.tee_s + toll, [prev])
                continue
            key: int | None = None
            mk_s = op.metakey_s if metakeys else 0.0
            if phase == "fwd" and k != DECOMPOSE:
                if depth == 0:
                    prev = key = add(f"{op.name} metakey", "tee", mk_s, [prev])
                else:
                    gate = mask_fwd.get(i - depth) if i - depth >= 0 else None
                    key = add(f"{op.name} metakey", "tee", mk_s, [gate, last_key], prio=1)
                last_key = key
            mask = add(f"{op.name} {phase} mask", "tee", share * op.mask_s + toll, [prev])
            if phase == "fwd":
                mask_fwd[i] = mask
            devs = range(len(view.nnas)) if k == DECOMPOSE else (k,)
            remote = [
                add(f"{op.name} {phase}", f"nna{d}", share * (op.xfer_s[d] + op.nna_s[d]), [mask])
                for d in devs
            ]
            # a decomposed op has no meta-key: its recombination is priced like unmasking
            prev = add(f"{op.name} {phase} unmask", "tee", share * post_s(op), [*remote, key])
    return tasks
