"""LLM serving on heterogeneous GPUs: colocated or prefill/decode-disaggregated
instances with continuous batching, a paged KV cache and KV transfer.

At build time the mechanism prices every (GPU type, TP degree) of the cluster with the
iteration roofline (:mod:`workloads.serving_deploy`), hands the configs and the target
rate to the ``serving.deployment`` policy, and places the instances it returns on free
GPUs (a TP group on one node). Each instance loads its weights from its node's CPU over
the topology, then runs iterations (:mod:`workloads.serving_instance`). A request
arrives, ``serving.routing`` picks an entry instance (colocated or prefill); after a
disaggregated prefill, ``serving.routing`` picks a decode instance and the KV cache
(prompt tokens x KV bytes per token) is copied between the TP ranks of the two
instances over the cluster's links; the prefill instance frees it on arrival.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar, Literal

import numpy as np

from hetsim.devices.carbon import carbon_columns
from hetsim.devices.cluster import Cluster
from hetsim.devices.energy import energy_columns, energy_report, per_unit, record_tables
from hetsim.simulator.budget import WorkEstimate
from hetsim.simulator.engine import InvariantViolation, Simulation
from hetsim.simulator.registry import workloads
from hetsim.workloads.base import Workload, conserve
from hetsim.workloads.models.dense import model_spec
from hetsim.workloads.models.trust import model_trust
from hetsim.workloads.serving.autoscale import Autoscaler
from hetsim.workloads.serving.deploy import (
    Config,
    Slo,
    bucket_key,
    candidate_configs,
    config_key,
    config_problem,
    gpu_price,
    missing_fabrics,
    place,
)
from hetsim.workloads.serving.estimate import Lengths, Targets
from hetsim.workloads.serving.instance import Instance, Lud, RequestState, kv_flow_ids
from hetsim.workloads.serving.lud import lud_acceptance
from hetsim.workloads.serving.metrics import METRICS, RequestTimes, latency_summary
from hetsim.workloads.serving.output_estimate import predict_outputs
from hetsim.workloads.serving.params import ServingParams
from hetsim.workloads.serving.prefix import PrefixCache
from hetsim.workloads.serving.report import instance_rows, run_summary
from hetsim.workloads.serving.requests import Requests, assign_classes, generate
from hetsim.workloads.serving.subsim import SubSimGoodput
from hetsim.workloads.serving.view import (
    DeploymentView,
    InstanceSpec,
    LazyTuple,
    RouteView,
    SearchBudget,
)

SERVING_KINDS = ("gpu", "npu")
"""The device kinds a serving instance runs on."""


@workloads.register("serving")
class ServingWorkload(Workload):
    """LLM requests served by colocated or disaggregated instances on mixed GPUs."""

    Params = ServingParams
    domain = "serving"
    decision_points: ClassVar[dict[str, str]] = {
        "deployment": "colocated",
        "routing": "least-outstanding",
        "batching": "vllm",
        "scaling": "none",
    }
    metrics: ClassVar[dict[str, str]] = METRICS

    def __init__(
        self, sim: Simulation, cluster: Cluster, params: ServingParams,
        policies: dict[str, Any], base_dir: Path,
    ) -> None:  # fmt: skip
        super().__init__(sim, cluster, params, policies, base_dir)
        self.model = model_spec(params.model)
        req = generate(params.requests, sim.rng("serving.requests"), base_dir, sim.rng)
        prompt = req.prompt
        if params.truncate_to_context:
            prompt = np.minimum(prompt, np.maximum(self.model.max_context - req.output, 1))
        self.times = RequestTimes(
            req.arrival_s, np.full(len(req), np.nan), np.full(len(req), np.nan), prompt, req.output
        )
        if params.warmup_s > 0 and not bool((req.arrival_s >= params.warmup_s).any()):
            raise ValueError(
                f"workload.warmup_s: {params.warmup_s:g} s is past the last arrival "
                f"({float(req.arrival_s.max()):g} s): the warm-up cut would leave no request "
                "to measure"
            )
        self.reqs = RequestState(prompt.tolist(), req.output.tolist())
        #: LUD: each request's acceptance probability (None: standard decoding)
        self.accept_p = lud_acceptance(params.lud, len(req), sim.rng("serving.lud.accept"))
        self.hashes = req.hashes
        if params.prefix_cache and self.hashes is None:
            raise ValueError(
                "workload.prefix_cache: needs requests with prefix-block hashes "
                "(a mooncake trace with hash_ids and lengths: trace)"
            )
        self._prompt = prompt.tolist()
        self.slo = Slo(params.slo.ttft_s, params.slo.tpot_s)
        self._slo_classes(len(req), req.slo_class)
        self.sizing, self.sizing_rate = self._sizing_sample()
        est, rng = params.output_estimate, sim.rng
        history = (self.sizing.prompts, self.sizing.outputs)
        self.sizing_predicted = predict_outputs(
            est, self.sizing.prompts, self.sizing.outputs, history,
            rng("serving.output_estimate.sizing"),
        )  # fmt: skip
        self.predicted_output = predict_outputs(
            est, prompt, req.output, history, rng("serving.output_estimate")
        )
        self.configs = self._configs()
        self._searchers: dict[SearchBudget, SubSimGoodput] = {}
        self.instances: list[Instance] = []
        self._deploy()
        self.entry = [s for s in self.instances if s.role != "decode"]
        self.decode = [s for s in self.instances if s.role == "decode"]
        self._check_deployment()
        self.kv_transfer_s: list[float] = []
        self.kv_transfer_bytes = 0
        # trace lanes of KV transfers per (prefill, decode) instance pair: last end time
        self._kv_lanes: dict[tuple[int, int], list[float]] = {}
        self.setup_s = 0.0
        self._finished = 0
        self._arrival = req.arrival_s.tolist()
        self.entry_of = np.full(len(req), -1, dtype=np.int64)
        self.decode_of = np.full(len(req), -1, dtype=np.int64)
        #: requests waiting for any entry instance (every one lost to a device failure:
        #: workloads.serving.failover); always empty without faults
        self.parked: list[int] = []
        self.autoscaler = Autoscaler(self, policies["scaling"])

    # ---- build -----------------------------------------------------------------------
    def _slo_classes(self, n: int, names: np.ndarray | None) -> None:
        """Each request's class and targets (:func:`assign_classes`)."""
        self.class_names, self.slo_class, self.ttft_target, self.tpot_target = assign_classes(
            self.params.slo_classes, self.slo, names, n, self.sim.rng("serving.slo_classes")
        )

    def meets(self) -> np.ndarray:
        """Per request: finished within its class's TTFT and TPOT targets."""
        return self.times.meets(self.ttft_target, self.tpot_target)

    def _gpus(self) -> dict[str, tuple[Any, int, int]]:
        names = self.cluster.usable(SERVING_KINDS, "the serving workload", self.params.gpus or None)
        out: dict[str, tuple[Any, int, int]] = {}
        self._free: dict[str, dict[str, list[str]]] = {}
        for n in names:
            dev = self.cluster.device(n)
            spec, count, mem = out.get(dev.spec.name, (dev.spec, 0, 0))
            cap = self.cluster.memory(n).capacity_bytes
            out[dev.spec.name] = (spec, count + 1, cap if count == 0 else min(mem, cap))
            self._free.setdefault(dev.spec.name, {}).setdefault(dev.node, []).append(n)
        return out

    def _sizing_sample(self) -> tuple[Lengths, float | None]:
        """The requests sizing is estimated from (``sizing_source``), never the measured
        ones, and the arrival rate they show (None: the declared rate is used).

        ``holdout``: ``estimate_sample`` requests generated apart, on the streams
        ``serving.sizing*`` (trace lengths at random rows, even with trace arrivals, so
        not the run's first rows; with trace arrivals and no declared rate, the rate is
        the trace's native rate over its first rows); ``window``: the run's requests arriving before
        ``sizing_window_s`` (left out of the metrics: ``warmup_s`` covers them)."""
        p = self.params
        if p.sizing_source == "window":
            keep = self.times.arrival_s < p.sizing_window_s
            if not keep.any():
                raise ValueError(
                    f"workload.sizing_window_s: no request arrives in the first "
                    f"{p.sizing_window_s:g} s"
                )
            rate = float(keep.sum()) / p.sizing_window_s
            return Lengths(self.times.prompt[keep], self.times.output[keep]), rate
        sim = self.sim
        n = p.estimate_sample
        if p.requests.arrivals == "trace":  # its timestamps: the trace's first rows
            n = min(n, p.requests.num_requests)
        cfg = p.requests.model_copy(update={"num_requests": n})

        def draw(c: Any, tag: str) -> Requests:
            return generate(
                c, sim.rng(f"serving.sizing{tag}"), self.base_dir,
                lambda name: sim.rng(f"serving.sizing.{name}"),
            )  # fmt: skip

        held = draw(cfg, "")
        rate = None
        if len(held) > 1 and held.arrival_s[-1] > held.arrival_s[0]:
            rate = (len(held) - 1) / float(held.arrival_s[-1] - held.arrival_s[0])
        csv = cfg.trace is not None and cfg.trace.format != "servegen"
        if cfg.lengths == "trace" and cfg.arrivals == "trace" and csv:
            # lengths from rows at random, not the run's first rows
            again = cfg.model_copy(update={"arrivals": "poisson", "rate_per_s": 1.0, "surge": None,
                                           "num_requests": p.estimate_sample})  # fmt: skip
            held = draw(again, ".rows")
        prompt = held.prompt
        if p.truncate_to_context:
            prompt = np.minimum(prompt, np.maximum(self.model.max_context - held.output, 1))
        return Lengths(prompt, held.output), rate

    def _configs(self) -> dict[tuple[Any, ...], Config]:
        p = self.params
        self.gpu_types = self._gpus()
        targets = Targets(self.slo.ttft_s, self.slo.tpot_s, p.sizing_attainment, p.sizing_headroom)
        found = candidate_configs(
            self.model, p.precision(), self.gpu_types, p.tp_options, p.tp_fabrics,
            p.mem_fraction, self.sizing, targets, p.price_preset, p.max_batch, p.overheads(),
            self.sizing_predicted, tuple(p.power_cap_options_w),
        )  # fmt: skip
        return {config_key(c): c for c in found}

    def _simulate(
        self, unit: tuple[InstanceSpec, ...], estimate_rps: float, budget: SearchBudget
    ) -> float:
        """Goodput (req/s) of ``unit`` bisected on short seeded sub-simulations within
        ``budget`` (DistServe's simulate-and-bisect), over ``1 + sizing_headroom`` like
        every predicted goodput (the same margin for every policy: a short run's
        measurement errs too); cached per budget and unit."""
        if budget not in self._searchers:
            memory = {t: mem for t, (_, _, mem) in self.gpu_types.items()}
            self._searchers[budget] = SubSimGoodput(
                self.params.model_dump(mode="json"), memory, self.base_dir,
                num_requests=budget.num_requests, duration_s=budget.duration_s,
                attainment=budget.attainment, steps=budget.steps, routing=budget.routing,
                run=self.sim.run_nested,
            )  # fmt: skip
        head = 1.0 + self.params.sizing_headroom
        return self._searchers[budget](unit, estimate_rps * head) / head

    def _deploy(self) -> list[Instance]:
        p = self.params
        rate = p.sized_rate_per_s() or p.requests.rate_per_s
        if p.sizing_source == "window" and p.deployment_rate_per_s is None:
            rate = self.sizing_rate
        if rate is None:
            rate = self.sizing_rate or 1.0
        view = DeploymentView(
            rate, float(self.sizing.prompts.mean()), float(self.sizing.outputs.mean()),
            self.slo.ttft_s, self.slo.tpot_s,
            tuple((t, c) for t, (_, c, _) in self.gpu_types.items()),
            LazyTuple(lambda: tuple(c.view for c in self.configs.values())),
            simulate=self._simulate if p.sizing_estimator == "simulate" else None,
            estimator=p.sizing_estimator,
        )  # fmt: skip
        specs = tuple(self.policies["deployment"].deploy(view))
        for s in specs:
            if config_key(s) not in self.configs:
                kind = self.cluster.kind_of_type(s.gpu_type)
                if s.gpu_type not in self.gpu_types and kind and kind not in SERVING_KINDS:
                    raise ValueError(f"deployment: {s.gpu_type} is a {kind} device; the "
                                     "serving workload runs on devices of kind "
                                     f"{' or '.join(SERVING_KINDS)}")  # fmt: skip
                if s.power_cap_w is not None and (s.gpu_type, s.tp) in self.configs:
                    raise ValueError(f"deployment: power_cap_w={s.power_cap_w:g} for "
                                     f"{s.gpu_type} is not in workload.power_cap_options_w "
                                     f"{list(p.power_cap_options_w)}")  # fmt: skip
                why = config_problem(
                    self.model, p.precision(), self.gpu_types, p.tp_options, p.tp_fabrics,
                    p.mem_fraction, s.gpu_type, s.tp, p.overheads(),
                )  # fmt: skip
                raise ValueError(f"deployment: {s.gpu_type} with tp={s.tp} is not a valid "
                                 f"config: {why}")  # fmt: skip
        self.placement = place(specs, self._free)
        self.instances = []
        self.plans: list[dict[int, float]] = []  # per instance: bucket key -> planned req/s
        self.bucket_of = bucket_key(self.times.prompt, self.predicted_output).tolist()
        for s in specs:
            self.make_instance(s)
        self.planned = any(self.plans)
        return self.instances

    def make_instance(self, s: InstanceSpec) -> Instance:
        """A new instance of spec ``s``, numbered next (placement is the caller's)."""
        p = self.params
        k = len(self.instances)
        cfg = self.configs[config_key(s)]
        lud = Lud(p.lud.lookahead, self.accept_p) if self.accept_p is not None else None
        cache = None
        if p.prefix_cache and s.role != "decode" and self.hashes is not None:
            cache = PrefixCache(self.hashes, self._prompt, p.block_tokens)
        inst = Instance(
            self.sim, k, s.role, s.group, cfg.cost, cfg.kv_tokens, p.block_tokens,
            self.policies["batching"], self.reqs, self._prefilled, self._finished_cb,
            lud, self.sim.rng(f"serving.lud.{k}"), cache,
        )  # fmt: skip
        v = cfg.view
        inst.goodput_rps = {"prefill": v.prefill_rps, "decode": v.decode_rps}.get(
            s.role, v.colocated_rps
        )
        inst.kv_layerwise = s.kv_layerwise and s.role == "prefill"
        self.instances.append(inst)
        self.plans.append(dict(s.plan))
        return inst

    def _check_deployment(self) -> None:
        if not self.entry:
            raise ValueError("deployment: no colocated or prefill instance")
        if any(s.role == "prefill" for s in self.entry) and not self.decode:
            raise ValueError("deployment: prefill instances but no decode instance")
        for s in self.instances:
            short = self._kv_shortfall(s.capacity_blocks * s.block_tokens)
            if short:
                raise ValueError(
                    f"instance {s.number} ({s.cost.spec.name}, tp={s.cost.tp}) {short}"
                )

    def kv_shortfall(self, s: InstanceSpec) -> str:
        """Why an instance of spec ``s`` cannot hold this run's longest request (prompt
        + output) in its KV blocks; "" when it can. Checked for the starting deployment
        and for every unit the autoscaler adds: an instance short of it would wait
        forever on that request (an engine refuses to start with a KV cache smaller than
        its longest sequence)."""
        bt = self.params.block_tokens
        return self._kv_shortfall(self.configs[config_key(s)].kv_tokens // bt * bt)

    def _kv_shortfall(self, cap_tokens: int) -> str:
        need = int((self.times.prompt + self.times.output).max())
        if need <= cap_tokens:
            return ""
        return f"holds {cap_tokens} KV tokens; the longest request needs {need}"

    # ---- run -------------------------------------------------------------------------
    def start(self) -> None:
        """Load every instance's weights, then schedule the first arrival."""
        for inst, devs in zip(self.instances, self.placement, strict=True):
            self.load(inst, devs)
        if self._arrival:
            self._schedule(0)
        self.autoscaler.start()

    def load(
        self, inst: Instance, devs: list[str], on_ready: Callable[[], None] | None = None
    ) -> None:
        """Allocate weights and KV on ``devs``, copy each GPU's weight share from its
        node's CPU (in parallel), then mark ``inst`` ready and call ``on_ready``.

        A scale-out (``on_ready`` given) is a cold start (``workload.cold_start``): the
        image pull and the download of the whole model from remote storage come before
        the copies, the engine warm-up after them."""
        inst.place(tuple(self.cluster.device(d).track for d in devs))
        share = inst.cost.weight_bytes // inst.cost.tp
        kv = inst.capacity_blocks * inst.block_tokens * inst.cost.kv_bytes_per_token // inst.cost.tp
        for d in devs:
            mem = self.cluster.memory(d)
            mem.allocate("weights", share)
            mem.allocate("kv-cache", kv)
        if on_ready is None:  # the initial deployment, loaded before traffic

            def first() -> None:
                self.setup_s = max(self.setup_s, self.sim.now)
                inst.set_ready()

            self._copy_weights(devs, share, first)
            return
        cold = self.params.cold_start
        env = self.sim.env

        def serve() -> None:
            inst.set_ready()
            on_ready()

        def warm() -> None:
            env.timeout(cold.engine_warmup_s).callbacks.append(lambda _e: serve())

        fetch = env.timeout(cold.image_pull_s + cold.download_s(inst.cost.weight_bytes))
        fetch.callbacks.append(lambda _e: self._copy_weights(devs, share, warm))

    def _copy_weights(self, devs: list[str], share: int, then: Callable[[], None]) -> None:
        """Copy each GPU's ``share`` of the weights from its node's CPU (in parallel; none
        without ``load_weights`` or a CPU), then call ``then``."""
        events = []
        for d in devs:
            host = self.cluster.host_of(d)
            if self.params.load_weights and host is not None:
                events.append(self.cluster.copy(host, d, share, name="weights"))
        if not events:
            then()
            return
        self.sim.env.all_of(events).callbacks.append(lambda _e: then())

    def _schedule(self, i: int) -> None:
        ev = self.sim.env.timeout(max(0.0, self._arrival[i] - self.sim.now))
        ev.callbacks.append(lambda _e: self._arrive(i))

    def _route(
        self, i: int, stage: Literal["entry", "decode"], pool: list[Instance], group: int
    ) -> Instance:
        view = RouteView(
            self.sim.now, i, self.reqs.prefill_len[i], stage, group, tuple(s.view() for s in pool)
        )
        if stage == "entry" and self.decode:  # each group's decode capacity
            dec: dict[int, float] = {}
            for s in self.decode:
                dec[s.group] = dec.get(s.group, 0.0) + s.goodput_rps
            view = view._replace(group_decode_rps=tuple(sorted(dec.items())))
        if stage == "entry" and self.planned:  # the deployment's per-bucket plan
            b = self.bucket_of[i]
            view = view._replace(
                bucket=b, planned_rps=tuple(self.plans[s.number].get(b, 0.0) for s in pool)
            )
        if stage == "entry" and self.params.prefix_cache:  # what each cache holds
            n = self.reqs.prefill_len[i]
            view = view._replace(
                cached_tokens=tuple(s.cache.peek(i, n) if s.cache else 0 for s in pool)
            )
        k = self.policies["routing"].route(view)
        if not 0 <= k < len(self.instances) or self.instances[k] not in pool:
            raise InvariantViolation(f"routing chose instance {k}, not a {stage} candidate")
        return self.instances[k]

    def _arrive(self, i: int) -> None:
        if i + 1 < len(self._arrival):
            self._schedule(i + 1)
        inst = self._route(i, "entry", self.entry, -1)
        self.entry_of[i] = inst.number
        inst.submit(i)

    def _prefilled(self, i: int, inst: Instance) -> None:
        if np.isnan(self.times.first_token_s[i]):
            self.times.first_token_s[i] = self.sim.now
        if inst.role != "prefill":
            return
        if self.reqs.left[i] <= 0:
            inst.release(i)
            self._finished_cb(np.array([i]), inst)
            return
        dec = self._route(i, "decode", self.decode, inst.group)
        self.decode_of[i] = dec.number
        self._transfer(i, inst, dec)

    def _transfer(self, i: int, src: Instance, dst: Instance) -> None:
        nbytes = self.reqs.prefill_len[i] * self.model.kv_bytes_per_token(
            self.params.precision().kv_cache
        )
        a, b = self.placement[src.number], self.placement[dst.number]
        pairs = min(len(a), len(b))
        per = nbytes // pairs
        if src.kv_layerwise:
            per = self.exposed_kv_bytes(a[0], b[0], per, self.sim.now - src.iteration_start_s)
        events = [self.cluster.copy(a[j], b[j], per, name="kv") for j in range(pairs)]
        self.kv_transfer_bytes += nbytes
        start = self.sim.now
        rec = self.sim.recorder
        if rec.record_spans:  # the arrow from the prefill iteration to this transfer
            rec.flow(kv_flow_ids(i)[0], "s", src.device_tracks[0], start, "kv")

        def arrived(_: object) -> None:
            self.kv_transfer_s.append(self.sim.now - start)
            if rec.record_spans:
                self._record_transfer(i, src, dst, start, nbytes)
            src.release(i)
            dst.handoff(i)

        self.sim.env.all_of(events).callbacks.append(arrived)

    def _record_transfer(
        self, i: int, src: Instance, dst: Instance, start: float, nbytes: int
    ) -> None:
        """Request ``i``'s KV transfer, from its start to now, as a span on a lane of
        the ``src -> dst`` transfer track (concurrent transfers take separate lanes,
        ``#1``, ``#2``..., so spans on one lane never overlap), with the flow arrows
        into and out of it."""
        now = self.sim.now
        lanes = self._kv_lanes.setdefault((src.number, dst.number), [])
        lane = next((k for k, end in enumerate(lanes) if end <= start), len(lanes))
        if lane == len(lanes):
            lanes.append(now)
        lanes[lane] = now
        name = f"kv instance{src.number}->instance{dst.number}" + (f" #{lane}" if lane else "")
        rec = self.sim.recorder
        track = rec.track(name, group="kv transfers", kind="transfer")
        rec.span(track, f"kv r{i}", start, now, {"request": i, "bytes": nbytes})
        into, out = kv_flow_ids(i)
        rec.flow(into, "f", track, start, "kv")
        rec.flow(out, "s", track, now, "kv")

    def exposed_kv_bytes(self, src: str, dst: str, nbytes: int, prefill_s: float) -> int:
        """Bytes of a layer-wise KV transfer still to send when the prefill ends
        (Splitwise, ISCA'24: layer ``i``'s KV is sent as soon as layer ``i`` is computed).

        With ``L`` layers, a prefill iteration of ``T`` s (layer ``i``'s KV ready at ``i
        T / L``) and the path's uncontended bandwidth ``bw``, the first ``L - 1`` layers'
        ``B (L-1) / L`` bytes can flow during the last ``(L - 1) T / L`` s; what did not
        fit, and always the last layer's share, is sent after the prefill: ``B - min(B
        (L-1) / L, bw (L-1) T / L)`` bytes, an exposed time of ``max(B / L, B - bw (L-1)
        T / L) / bw`` plus the path latency. Simplifications: the overlapped bytes are
        taken to flow uncontended (they do not load the links in the run), and with
        chunked prefill only the last chunk's iteration overlaps."""
        layers = self.model.layers
        if layers <= 1 or nbytes <= 0:
            return nbytes
        latency = self.cluster.copy_time_s(src, dst, 0)
        unit = self.cluster.copy_time_s(src, dst, nbytes) - latency
        bw = nbytes / unit if unit > 0 else float("inf")
        overlap_s = (layers - 1) * prefill_s / layers
        sent = min(nbytes * (layers - 1) / layers, bw * overlap_s)
        return int(np.ceil(nbytes - sent))

    def _finished_cb(self, ids: np.ndarray, inst: Instance) -> None:
        self.times.finish_s[ids] = self.sim.now
        self._finished += len(ids)
        if self._finished == len(self._arrival):
            self.done.succeed()

    # ---- results -----------------------------------------------------------------------
    def horizon_s(self) -> float | None:
        """Last arrival time."""
        return self._arrival[-1] if self._arrival else None

    def check(self) -> None:
        """Every request finished once, after its first token, with no KV left held."""
        t = self.times
        if self._finished != len(t.arrival_s) or not np.isfinite(t.finish_s).all():
            raise InvariantViolation(f"{self._finished} of {len(t.arrival_s)} requests finished")
        if (t.finish_s < t.first_token_s).any() or (t.first_token_s < t.arrival_s).any():
            raise InvariantViolation("a request finished before its first token or arrival")
        held = [
            s.number for s in self.instances
            if s.used_blocks or len(s.ids) or (s.cache and s.cache.pinned_blocks)
        ]  # fmt: skip
        if held:
            raise InvariantViolation(f"instances {held} still hold KV blocks at the end")

    @classmethod
    def estimate_work(cls, params: ServingParams) -> WorkEstimate:
        """Requests x mean output tokens (decode token-steps: at most one iteration
        each); memory: :data:`BYTES_PER_REQUEST` per request."""
        r = params.requests
        n, out, how = r.num_requests, float(r.output_tokens), "mean output tokens"
        if r.lengths == "synthetic" and r.synthetic is not None:
            syn = r.synthetic
            law = syn.output if syn.output is not None else syn.total
            out = _law_mean(law)
            if syn.total is not None and syn.prefill_decode_ratio is not None:
                out /= 1.0 + syn.prefill_decode_ratio
        elif r.lengths == "trace":
            how = "output tokens (requests.output_tokens; the trace's are read at build)"
        return WorkEstimate(n * out, n * BYTES_PER_REQUEST, f"{n} requests x {out:.4g} {how}")

    def check_partial(self) -> None:
        """At any moment: every request finished, held by an instance (queued, pending,
        running), in KV transfer, parked (no instance: failover), or not yet arrived;
        none finished before its first token or arrival, nor after now."""
        for inst in self.instances:  # decode runs in flight: their iterations until now
            inst.settle(self.sim.now)
        t, n = self.times, len(self.times.arrival_s)
        done = np.isfinite(t.finish_s)
        if int(done.sum()) != self._finished:
            raise InvariantViolation(
                f"serving: {self._finished} requests counted finished, {int(done.sum())} "
                "have a finish time"
            )
        arrived = int((self.entry_of != -1).sum())  # -2: parked on arrival (failover)
        in_transfer = int((self.decode_of >= 0).sum()) - len(self.kv_transfer_s)
        held = sum(s.outstanding for s in self.instances) + len(self.parked)
        conserve("serving requests", n, self._finished, held + in_transfer, n - arrived)
        late = np.flatnonzero(done & ((t.finish_s < t.first_token_s) | (t.finish_s > self.sim.now)
                                      | (t.first_token_s < t.arrival_s)))  # fmt: skip
        if len(late):
            raise InvariantViolation(
                f"serving request {int(late[0])} finished before its first token or arrival, "
                "or after now"
            )

    def request_times(self) -> tuple[np.ndarray, np.ndarray]:
        """Arrival and finish times of every request (NaN: not finished)."""
        return self.times.arrival_s, self.times.finish_s

    def warmup_problem(self, end_s: float) -> tuple[str, str] | None:
        """Nothing measured: no request arriving after ``warmup_s`` finished by ``end_s``."""
        w = self.params.warmup_s
        t = self.times
        if w <= 0 or bool(((t.arrival_s >= w) & np.isfinite(t.finish_s)).any()):
            return None
        return "until_s", (
            f"the run ended at {end_s:g} s before any request arriving after the warm-up "
            f"(workload.warmup_s {w:g} s) finished, so nothing was measured: raise until_s "
            "or lower workload.warmup_s"
        )

    def run_warnings(self, end_s: float) -> list[str]:
        """A warning per GPU type whose TP all-reduces fell back to a PCIe ring for want
        of a catalogue ``scaleup_fabric``, and one when the ``catalogue`` preset prices
        the GPUs this run used at different providers' rates (the catalogue's default
        price of each type comes from whichever provider listed it): cost ratios then
        compare providers too."""
        p = self.params
        fabric = missing_fabrics(self.gpu_types, p.tp_options, p.tp_fabrics)
        if self.params.price_preset != "catalogue":
            return fabric
        specs = {i.cost.spec.name: i.cost.spec for i in self.instances}
        used = sorted(specs)
        providers = {t: specs[t].price("default").provider for t in used}
        firms = {text.split()[0] if text.split() else text for text in providers.values()}
        if len(firms) < 2:
            return fabric
        listed = ", ".join(f"{t}: {providers[t].split()[0]}" for t in used)
        return [*fabric, f"price_preset catalogue mixes providers ({listed}); cost figures compare "
                "providers as well as GPUs: set workload.price_preset to one provider's "
                "preset (devices/prices.yaml: aws-ondemand, lambda, runpod) to compare "
                "GPUs alone"]  # fmt: skip

    def price_per_gpu_hour(self, gpu_type: str) -> float:
        """$/GPU-hour of ``gpu_type`` under the run's preset."""
        return gpu_price(self.gpu_types[gpu_type][0], self.params.price_preset)

    def summary(self, end_s: float) -> dict[str, float | int | str]:
        """See :data:`workloads.serving_metrics.METRICS`."""
        for inst in self.instances:  # decode runs in flight (until_s): iterations until end_s
            inst.settle(end_s)
        rows = instance_rows(self, end_s)
        table = self.sim.recorder.table("instances", tuple(rows[0]))
        for row in rows:
            table.append(*row.values())
        times, ttft, tpot = self.times, self.ttft_target, self.tpot_target
        if self.params.warmup_s > 0:  # steady-state cut (the requests table keeps them all)
            keep = times.arrival_s >= self.params.warmup_s
            times = times.subset(keep)
            ttft = ttft[keep] if isinstance(ttft, np.ndarray) else ttft
            tpot = tpot[keep] if isinstance(tpot, np.ndarray) else tpot
        out: dict[str, float | int | str] = dict(latency_summary(times, ttft, tpot))
        out.update(run_summary(self, end_s, rows))
        out.update(model_trust((i.cost.transformer for i in self.instances),
                               float(self.times.prompt.mean()),
                               float(self.times.output.mean())))  # fmt: skip
        out.update(self._energy(end_s))
        return out

    def _energy(self, end_s: float) -> dict[str, float | int | str]:
        """The energy columns (:data:`ENERGY_METRICS`, :data:`SERVING_ENERGY_METRICS`):
        each instance's iterations go to its GPUs' meters, once."""
        if not getattr(self, "_energy_booked", False):
            self._energy_booked = True
            for inst in self.instances:
                n = len(inst.device_tracks)  # 0: never placed (it ran nothing)
                for name in inst.device_tracks:
                    self.cluster.device(name).energy.add(inst.energy_J / n, inst.busy_s,
                                                         inst.peak_W)  # fmt: skip
        rep = energy_report(self.cluster, end_s)
        record_tables(self.sim.recorder, rep)
        out: dict[str, float | int | str] = dict(energy_columns(self.cluster, end_s, rep))
        done = np.isfinite(self.times.finish_s)
        tokens = float(self.times.output[done].sum())
        accel = float(out["energy_accelerator_J"])
        out.update(per_unit(accel, {"energy_per_request_J": float(done.sum()),
                                    "energy_per_output_token_J": tokens}))  # fmt: skip
        out["tokens_per_J"] = tokens / accel if accel > 0 else float("nan")
        placed = {n for inst in self.instances for n in inst.device_tracks}
        deployed = sum(r.energy_J for r in rep.rows if r.device in placed)
        out["energy_deployed_J"] = deployed
        out["tokens_per_J_deployed"] = tokens / deployed if deployed > 0 else float("nan")
        accel_s: dict[str, float] = {}
        for r in rep.rows:
            if r.kind != "cpu":
                accel_s[r.type] = accel_s.get(r.type, 0.0) + end_s
        carbon = carbon_columns(rep.total_J, end_s, accel_s, self.cluster.config.carbon,
                                self.cluster.load_grid())  # fmt: skip
        out.update(carbon)
        out.update(per_unit(float(carbon["carbon_g"]),
                            {"carbon_per_request_g": float(done.sum()),
                             "carbon_per_output_token_g": tokens}))  # fmt: skip
        return out


BYTES_PER_REQUEST = 1024
"""Memory a serving run holds per request, rounded up from 780 bytes measured: peak RSS
of ``hetsim run`` with 5,000 and 40,000 fixed-length requests (spans off) differs by
26.6 MB."""


def _law_mean(law: Any) -> float:
    """Mean token count of a length law (lognormal: clipped at ``high``)."""
    if law is None:
        return 1.0
    if law.dist == "fixed":
        return float(law.tokens)
    if law.dist == "lognormal":
        return float(min(law.high, law.median * np.exp(law.sigma**2 / 2)))
    if law.dist == "zipf":
        p = law.probabilities()
        return float(law.low + (p * np.arange(len(p))).sum())
    return (law.low + law.high) / 2.0
