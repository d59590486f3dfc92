"""Deferring training on the GPUs it shares with serving (the arbiter's per-GPU sharing
decision over time).

A ``sharing:`` model other than exclusive fixes *who* holds a GPU for the run; this
mechanism lets the arbiter decide over time *whether training computes* on each shared
GPU (``ArbiterDecision.shared_train_gpus``): on the first ``n`` shared GPUs (by name)
training runs as the sharing model prices it; on the rest it is paused
(:meth:`TrainingJobsWorkload.set_paused`: a gang holding one stops stepping, its step in
flight is lost, its memory stays resident, so a pause needs no checkpoint and a resume
no restore), and serving's iterations there are priced as alone:

* ``time-sliced``: factor 1 (one context left: no turns, no switches);
* ``partition``: unchanged, ``1 / fraction`` (a MIG-style hard split is not resized at
  run time, so pausing the other owner frees nothing).

Costs of the mechanism: the lost partial step at each pause (``lost_gpu_s``) and the
arbiter's period (a pause takes effect at the decision, not between decisions). Every
change is a row of table ``shared_deferral``. Initially training runs on every shared
GPU (the sharing model as configured), so a run whose arbiter never decides this is
unchanged.
"""

from __future__ import annotations

from typing import Any

DEFERRAL_COLUMNS = ("time_s", "shared_train_gpus", "paused_gpus")


class SharedDeferral:
    """Which shared GPUs training may compute on, and serving's price on each."""

    def __init__(
        self, sim: Any, model: str, shared: dict[str, tuple[str, ...]],
        factors: dict[str, dict[str, float]], serving: str, harvesters: dict[str, Any],
    ) -> None:  # fmt: skip
        self.sim, self.serving = sim, serving
        self.harvesters = harvesters
        #: GPUs serving shares with a training-jobs workload, by name
        both = [d for d, owners in shared.items()
                if serving in owners and any(h in owners for h in harvesters)]  # fmt: skip
        self.devices = sorted(both)
        self.factors = factors.get(serving, {})
        #: serving's factor on each shared GPU while training runs there, and while paused
        self.running = {d: self.factors.get(d, 1.0) for d in self.devices}
        self.alone = {d: (1.0 if model == "time-sliced" else self.running[d]) for d in self.devices}
        self.allowed = len(self.devices)
        self.rows: Any = None  # table shared_deferral, made at the first change

    def slowdowns(self) -> tuple[float, float]:
        """Serving's factor on a shared GPU with training running there, and paused."""
        if not self.devices:
            return 1.0, 1.0
        return max(self.running.values()), max(self.alone.values())

    def set(self, n: int) -> None:
        """Training computes on the first ``n`` shared GPUs; paused on the rest."""
        n = max(0, min(int(n), len(self.devices)))
        if n == self.allowed:
            return
        self.allowed = n
        paused = set(self.devices[n:])
        for d in self.devices:
            self.factors[d] = self.alone[d] if d in paused else self.running[d]
        for w in self.harvesters.values():
            w.set_paused(paused)
        if self.rows is None:
            self.rows = self.sim.recorder.table("shared_deferral", DEFERRAL_COLUMNS)
        self.rows.append(self.sim.now, n, len(paused))
