"""A generic queueing workload: requests with FLOP/byte demands served by a device pool.

Requests arrive (Poisson or a trace), the ``queueing.dispatch`` policy picks a server,
and each server (a ComputeDevice) serves FCFS or by processor sharing; a request's
service time is its demand priced by the device's roofline. With the abstract
``ideal-server`` device and exponential demand this is exactly M/M/c (FCFS) or
M/M/1-PS, which the test suite checks against Erlang C and 1/(mu - lambda).

Energy: every device of the cluster idles over the run; a server's busy intervals draw
at the compute utilisation of its requests' FLOPs at the device's compute roof
(:mod:`hetsim.devices.power`; :mod:`.servers`). A device without a TDP in the catalogue
(``ideal-server``) draws nothing.
"""

from __future__ import annotations

import heapq
from collections import deque
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np
from pydantic import Field, NonNegativeInt, model_validator

from hetsim.devices.carbon import CARBON_METRICS
from hetsim.devices.cluster import Cluster
from hetsim.devices.energy import ENERGY_METRICS, per_unit, run_energy
from hetsim.devices.power import cap_ratio, compute_roof_flops
from hetsim.devices.spec import DeviceSpec
from hetsim.simulator.engine import InvariantViolation, Simulation, Timer
from hetsim.simulator.limits import MAX_REQUESTS
from hetsim.simulator.registry import workloads
from hetsim.workloads.base import Workload, WorkloadParams
from hetsim.workloads.models.dense import model_spec
from hetsim.workloads.models.trust import model_trust
from hetsim.workloads.queueing.demand import (
    Arrivals,
    Demand,
    LLMPrefillDemand,
    RequestBatch,
    build_requests,
    prefill_cost,
    prefill_times_s,
)
from hetsim.workloads.queueing.servers import FcfsServer, PsServer
from hetsim.workloads.queueing.view import DispatchView, ServerView

REQUEST_COLUMNS = ("request", "server", "arrival_s", "start_s", "end_s", "service_s", "flops")


class IdleIndex:
    """Idle servers indexed by device type: one min-heap of server indices per type.

    A central-queue dispatcher sees, for each type with an idle server, only its
    lowest-index idle server, so an arrival costs O(types), not O(servers).
    """

    def __init__(self, type_of: list[str]) -> None:
        self._type_of = type_of
        self._heaps: dict[str, list[int]] = {t: [] for t in dict.fromkeys(type_of)}
        self._idle: set[int] = set()
        self.idle = self._idle  # read-only use: truthy when some server is idle

    def __bool__(self) -> bool:
        return bool(self._idle)

    def push(self, index: int) -> None:
        """Mark server ``index`` idle."""
        if index not in self._idle:
            self._idle.add(index)
            heapq.heappush(self._heaps[self._type_of[index]], index)

    def discard(self, index: int) -> None:
        """Mark server ``index`` not idle (set-up started)."""
        if index in self._idle:
            self._idle.remove(index)
            heap = self._heaps[self._type_of[index]]
            heap.remove(index)
            heapq.heapify(heap)

    def tops(self) -> list[int]:
        """The lowest-index idle server of each type that has one (type order)."""
        return [h[0] for h in self._heaps.values() if h]

    def take(self, index: int) -> bool:
        """Remove ``index`` if it is the top of its type's heap; False otherwise."""
        heap = self._heaps[self._type_of[index]]
        if not heap or heap[0] != index:
            return False
        heapq.heappop(heap)
        self._idle.remove(index)
        return True


class QueueingParams(WorkloadParams):
    """The ``workload:`` block of a queueing scenario."""

    kind: Literal["queueing"] = Field(default="queueing", description="Workload kind (queueing).")
    arrivals: Arrivals = Field(
        description="Arrival process of the requests: poisson or a trace (by kind)."
    )
    demand: Demand = Field(
        description="Work of each request by kind (exponential, deterministic or "
        "llm-prefill), priced on the device serving it."
    )
    num_requests: int = Field(
        default=1000, gt=0, le=MAX_REQUESTS, description="Requests generated."
    )
    warmup_requests: NonNegativeInt = Field(
        default=0,
        description="First requests left out of the metrics "
        "(steady-state cut; must be below num_requests).",
    )
    servers: list[str] | None = Field(
        default=None, description="device names; default: every gpu/npu/server device"
    )
    discipline: Literal["fcfs", "ps"] = Field(
        default="fcfs",
        description="Service discipline of each server: first-come first-served, "
        "or processor sharing (needs a push dispatch).",
    )

    @model_validator(mode="after")
    def _warmup_leaves_requests(self) -> QueueingParams:
        if self.warmup_requests >= self.num_requests:
            raise ValueError(
                f"warmup_requests: {self.warmup_requests} is not below num_requests "
                f"({self.num_requests}): the warm-up cut would leave no request to measure"
            )
        return self


@workloads.register("queueing")
class QueueingWorkload(Workload):
    """Requests with FLOP/byte demands served FCFS or PS by a pool of devices."""

    Params = QueueingParams
    domain = "queueing"
    decision_points: ClassVar[dict[str, str]] = {"dispatch": "fifo"}
    metrics: ClassVar[dict[str, str]] = {
        "requests": "number of requests completed after the warm-up cut",
        "mean_wait_s": "mean of start_s - arrival_s over post-warm-up requests",
        "p_wait": "fraction of post-warm-up requests with start_s > arrival_s",
        "mean_sojourn_s": "mean of end_s - arrival_s over post-warm-up requests",
        "p50_sojourn_s": "median of end_s - arrival_s",
        "p99_sojourn_s": "99th percentile of end_s - arrival_s",
        "throughput_per_s": "post-warm-up requests / (last end_s - first post-warm-up arrival_s)",
        "mean_utilisation": "busy seconds / (end time x servers), averaged over servers",
        "setup_s": "time until the last server finished loading its weights (0 if none)",
        "makespan_s": "end time of the last request",
        "model_error_p50": "LLM demand only: the cost model's expected relative error of "
        "service times (kernel fits' median residual weighted by kernel classes' time "
        "shares, widest over the servers' GPU types)",
        "model_error_p90": "LLM demand only: as model_error_p50, 90th percentiles",
        "model_fits": "LLM demand only: least trusted kernel fit (calibrated, borrowed, "
        "uncalibrated)",
        "kernel_classes": "LLM demand only: kernel classes the prompts were priced with",
        "borrowed_fits": "LLM demand only: GPU.class<-device for borrowed kernel fits, "
        "GPU.sustained<-device and GPU.gemm.<format>_scale<-device for borrowed corrections",
        **ENERGY_METRICS,
        "energy_per_request_J": "energy_accelerator_J / requests completed (the whole run, "
        "warm-up included: the energy is the whole run's); a server's busy intervals draw at "
        "the compute utilisation of its requests' FLOPs at the device's compute roof",
        **CARBON_METRICS,
        "carbon_per_request_g": "carbon_g / requests completed (the whole run), gCO2e",
    }

    def __init__(
        self,
        sim: Simulation,
        cluster: Cluster,
        params: QueueingParams,
        policies: dict[str, Any],
        base_dir: Path,
    ) -> None:
        super().__init__(sim, cluster, params, policies, base_dir)
        self.dispatch = policies["dispatch"]
        if params.discipline == "ps" and self.dispatch.central_queue:
            raise ValueError("discipline ps needs a push dispatch policy, not a central queue")
        names = cluster.usable(
            ("gpu", "npu", "server"), "the queueing workload", params.servers or None
        )
        if not names:
            raise ValueError("no servers: the cluster has no gpu/npu/server device")
        server_cls = PsServer if params.discipline == "ps" else FcfsServer
        self.servers: list[FcfsServer | PsServer] = [
            server_cls(i, cluster.device(n), self._done) for i, n in enumerate(names)
        ]
        rngs = {k: sim.rng(f"queueing.{k}") for k in ("arrivals", "demand")}
        self.batch: RequestBatch = build_requests(
            params.arrivals, params.demand, params.num_requests, rngs, base_dir
        )
        # service time of every request on every server, priced once: LLM prompts kernel
        # by kernel (transformer cost model), other demands by the device roofline
        by_type: dict[str, list[float]] = {}
        for srv in self.servers:
            spec = srv.device.spec
            if spec.name not in by_type:
                b = self.batch
                if b.tokens is not None and isinstance(params.demand, LLMPrefillDemand):
                    by_type[spec.name] = prefill_times_s(params.demand, spec, b.tokens)
                else:
                    by_type[spec.name] = srv.device.op_times_s(b.flops, b.nbytes, b.dtype).tolist()
        self._service = [by_type[srv.device.spec.name] for srv in self.servers]
        compute: dict[str, list[float]] = {}
        for srv in self.servers:
            spec = srv.device.spec
            if spec.name not in compute:
                roof = self._roof_flops(spec)
                compute[spec.name] = (self.batch.flops / roof).tolist() if roof > 0 else []
            srv.compute_s = compute[spec.name]
        self._arrival = self.batch.arrival_s.tolist()
        self._flops = self.batch.flops.tolist()
        self._nbytes = self.batch.nbytes.tolist()
        self._central: deque[int] = deque()  # waiting request ids (central queue)
        self._idle = IdleIndex([s.device.spec.name for s in self.servers])
        if self.dispatch.central_queue:
            for srv in self.servers:
                self._idle.push(srv.index)
        self._completed = 0
        self._arrived = 0
        self._next = 0  # the request whose arrival is scheduled
        self._central_queue = bool(self.dispatch.central_queue)  # a policy class constant
        self._rows = sim.recorder.table("requests", REQUEST_COLUMNS)
        self._row = self._rows.row_sink()  # a row: a tuple of the REQUEST_COLUMNS
        self._names = [s.device.name for s in self.servers]
        self._arrival_timer = Timer(sim, self._on_arrival)
        self.setup_s = 0.0

    def _roof_flops(self, spec: DeviceSpec) -> float:
        """FLOP/s at which ``spec`` runs a request's FLOPs compute-bound (u = 1): the
        prefill cost model's math format and clock regime, else the roofline's."""
        demand = self.params.demand
        if isinstance(demand, LLMPrefillDemand):
            cost = prefill_cost(demand, spec)
            return compute_roof_flops(spec, cost.precision.math_dtype(), cost.fits.clock_ratio)
        return compute_roof_flops(spec, self.batch.dtype, cap_ratio(spec))

    # ---- set-up ---------------------------------------------------------------
    def start(self) -> None:
        """Load weights (LLM demand) and schedule the first arrival."""
        demand = self.params.demand
        if isinstance(demand, LLMPrefillDemand) and demand.load_weights:
            nbytes = model_spec(demand.model).weight_bytes(demand.dtype)
            for server in self.servers:
                self._load_weights(server, nbytes)
        if len(self.batch):
            self._schedule_arrival(0)
        else:
            self.done.succeed()

    def _load_weights(self, server: FcfsServer | PsServer, nbytes: int) -> None:
        name = server.device.name
        self.cluster.memory(name).allocate("weights", nbytes)
        host = self.cluster.host_of(name)
        if host is None:
            return
        server.loaded = False
        self._idle.discard(server.index)
        server.available_at_s = self.sim.now + self.cluster.copy_time_s(host, name, nbytes)
        ev = self.cluster.copy(host, name, nbytes, name="weights")

        def ready(_: object) -> None:
            self.setup_s = max(self.setup_s, self.sim.now)
            server.on_loaded()
            self._kick(server)

        ev.callbacks.append(ready)

    # ---- arrivals and dispatch ---------------------------------------------------
    def _schedule_arrival(self, i: int) -> None:
        # arrivals are scheduled one at a time, in order: the pending one is _next
        self._next = i
        self._arrival_timer.start_at(self._arrival[i])

    def _on_arrival(self, _ev: object) -> None:
        i = self._next
        self._arrived += 1
        if i + 1 < len(self._arrival):  # _schedule_arrival(i + 1), inlined
            self._next = i + 1
            self._arrival_timer.start_at(self._arrival[i + 1])
        if self._central_queue and not self._idle.idle:  # the busy case first
            self._central.append(i)
        else:
            self._dispatch(i)

    def _dispatch(self, i: int) -> None:
        if not self._central_queue:
            self._send(i, self.dispatch.choose(self._view(i, self.servers)))
        elif self._idle:
            candidates = [self.servers[k] for k in self._idle.tops()]
            index = self.dispatch.choose(self._view(i, candidates))
            if not self._idle.take(index):
                raise InvariantViolation(f"dispatch sent request {i} to non-idle server {index}")
            self._send(i, index)
        else:
            self._central.append(i)

    def _ready(self, server: FcfsServer | PsServer) -> bool:
        return server.loaded and not server.busy

    def _service_s(self, i: int, server: FcfsServer | PsServer) -> float:
        return self._service[server.index][i]

    def _view(self, i: int, servers: list[FcfsServer | PsServer]) -> DispatchView:
        now = self.sim.now
        views = tuple(
            ServerView(
                s.index,
                s.device.name,
                s.device.spec.name,
                s.loaded and not s.busy,
                s.jobs,
                s.backlog_s(now),
                self._service[s.index][i],
            )
            for s in servers
        )
        return DispatchView(now, i, self._flops[i], self._nbytes[i], views)

    def _send(self, i: int, index: int) -> None:
        if not 0 <= index < len(self.servers):
            raise InvariantViolation(f"dispatch chose server {index} of {len(self.servers)}")
        server = self.servers[index]
        server.submit(i, self._service_s(i, server))

    def _kick(self, server: FcfsServer | PsServer) -> None:
        """A server became free or finished set-up: give it the oldest central request,
        or list it as idle."""
        if not self.dispatch.central_queue or not self._ready(server):
            return
        if self._central:
            i = self._central.popleft()
            server.submit(i, self._service_s(i, server))
        else:
            self._idle.push(server.index)

    # ---- completions -------------------------------------------------------------
    def _done(self, i: int, index: int, start_s: float, end_s: float) -> None:
        server = self.servers[index]
        self._row((
            i, self._names[index], self._arrival[i], start_s, end_s,
            self._service[index][i], self._flops[i],
        ))  # fmt: skip
        self._completed += 1
        if self._central and server.loaded and not server.busy:  # _kick's busiest case
            j = self._central.popleft()
            server.submit(j, self._service[index][j])
        else:
            self._kick(server)
        if self._completed == len(self._arrival):
            self.done.succeed()

    # ---- results -----------------------------------------------------------------
    def horizon_s(self) -> float | None:
        """Last arrival time (the run ends shortly after)."""
        return float(self.batch.arrival_s[-1]) if len(self.batch) else None

    def request_times(self) -> tuple[np.ndarray, np.ndarray]:
        """Arrival and end times of every completed request, warm-up included (a run
        cut by ``until_s`` leaves the rest out: NaN end times)."""
        rows = self._rows
        end = np.full(len(self.batch), np.nan)
        end[np.asarray(rows.column("request"), dtype=np.int64)] = rows.column("end_s")
        return np.asarray(self.batch.arrival_s, dtype=float), end

    def warmup_problem(self, end_s: float) -> tuple[str, str] | None:
        """Nothing measured: no request past ``warmup_requests`` completed by ``end_s``."""
        w = self.params.warmup_requests
        if w == 0 or bool((self._rows.column("request") >= w).any()):
            return None
        return "until_s", (
            f"the run ended at {end_s:g} s before any request past the warm-up "
            f"(workload.warmup_requests {w}) completed, so nothing was measured: raise "
            "until_s or lower workload.warmup_requests"
        )

    def check_partial(self) -> None:
        """At any moment: completed <= arrived <= requests, and no request completed
        before it arrived (``until_s`` cut the run; the rest is in flight)."""
        if not 0 <= self._completed <= self._arrived <= len(self.batch):
            raise InvariantViolation(
                f"{self._arrived} arrived, {self._completed} completed of {len(self.batch)}"
            )
        rows = self._rows
        end, arrival = (np.asarray(rows.column(c), dtype=float) for c in ("end_s", "arrival_s"))
        early = np.flatnonzero(end < arrival)
        if len(early):
            request = int(rows.column("request")[early[0]])
            raise InvariantViolation(f"request {request} completed before it arrived")

    def check(self) -> None:
        """Every request completes exactly once, and only after it arrived."""
        if self._completed != self._arrived or self._completed != len(self.batch):
            raise InvariantViolation(
                f"{self._arrived} arrived, {self._completed} completed of {len(self.batch)}"
            )

    def summary(self, end_s: float) -> dict[str, float | int | str]:
        """Post-warm-up statistics (see :attr:`metrics`)."""
        rows = self._rows
        post = rows.column("request") >= self.params.warmup_requests
        arrival = rows.column("arrival_s")[post]
        end = rows.column("end_s")[post]
        wait = rows.column("start_s")[post] - arrival
        soj = end - arrival
        n = len(soj)
        busy = [s.device.busy_s for s in self.servers]
        span = float(end.max() - arrival.min()) if n else 0.0
        return {
            "requests": n,
            "mean_wait_s": float(wait.mean()) if n else 0.0,
            "p_wait": float((wait > 1e-12).mean()) if n else 0.0,
            "mean_sojourn_s": float(soj.mean()) if n else 0.0,
            "p50_sojourn_s": float(np.percentile(soj, 50)) if n else 0.0,
            "p99_sojourn_s": float(np.percentile(soj, 99)) if n else 0.0,
            "throughput_per_s": n / span if span > 0 else 0.0,
            "mean_utilisation": float(np.mean(busy) / end_s) if end_s > 0 else 0.0,
            "setup_s": self.setup_s,
            "makespan_s": end_s,
            **self._trust(),
            **self._energy(end_s),
        }

    def _energy(self, end_s: float) -> dict[str, float | int | str]:
        """The energy and carbon columns (:data:`ENERGY_METRICS`, per request)."""
        for server in self.servers:
            server.settle_energy()
        _, out = run_energy(self.cluster, self.sim.recorder, end_s)
        done = float(self._completed)
        out.update(per_unit(float(out["energy_accelerator_J"]), {"energy_per_request_J": done}))
        out.update(per_unit(float(out["carbon_g"]), {"carbon_per_request_g": done}))
        return out

    def _trust(self) -> dict[str, float | str]:
        """The cost model's error band (LLM demand only; see :mod:`..models.trust`)."""
        demand = self.params.demand
        if not isinstance(demand, LLMPrefillDemand) or self.batch.tokens is None:
            return {}
        costs = [prefill_cost(demand, s.device.spec) for s in self.servers
                 if s.device.spec.kind in ("gpu", "npu")]  # fmt: skip
        return model_trust(costs, float(self.batch.tokens.mean()), 0.0)
