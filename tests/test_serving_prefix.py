"""Prefix caching: Mooncake hash_ids import, hand-worked TTFT of a cached prefix, LRU
eviction at the exact block count, chain matching, conservation, prefix-affinity
routing and a bad-input CLI case."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from hetsim.schedulers.serving.route_prefix_affinity import (
    PrefixAffinityParams,
    PrefixAffinityRouting,
)
from hetsim.workloads.serving.traces import TraceConfig, read_trace
from hetsim.workloads.serving.view import InstanceView, RouteView
from tests import kernel_hand as hand
from tests.cli_helpers import cli_error
from tests.test_serving_autoscale import run
from tests.test_serving_mechanism import KV_PER_TOKEN, WEIGHTS  # Llama-3-8B, by hand

DATA = Path(__file__).parents[1] / "workloads" / "data" / "serving"
SAMPLE = DATA / "mooncake_conversation_sample.jsonl"


def prefill_time(q: int, c: int) -> float:
    """A prefill of q new tokens over c cached ones, kernel by kernel (tests/kernel_hand)."""
    return hand.prefill_s(hand.A100, hand.LLAMA3_8B, q, c)


def write_trace(path: Path, rows: list[tuple[int, int, list[int]]], gap_ms: int = 10_000) -> None:
    """Rows (input, output, hash_ids), ``gap_ms`` apart."""
    lines = [
        json.dumps({"timestamp": k * gap_ms, "input_length": p, "output_length": o,
                    "hash_ids": h})
        for k, (p, o, h) in enumerate(rows)
    ]  # fmt: skip
    path.write_text("\n".join(lines) + "\n")


def scenario(n: int, cache: bool = True, kv_tokens: int | None = None) -> dict[str, Any]:
    gpu: dict[str, Any] = {"type": "a100-80gb", "count": 1}
    wl: dict[str, Any] = {}
    if kv_tokens is not None:  # mem_fraction 1: KV holds exactly kv_tokens
        gpu["memory_bytes"] = WEIGHTS + kv_tokens * KV_PER_TOKEN
        wl["mem_fraction"] = 1.0
    return {
        "name": "t",
        "seed": 3,
        "cluster": {
            "nodes": [{"name": "n", "devices": {"gpu": gpu}}],
            "network": {"type": "ib-ndr", "attach": "gpu"},
        },
        "workload": {
            "kind": "serving", "model": "llama-3-8b", "tp_options": [1],
            "prefix_cache": cache, "slo": {"ttft_s": 10.0, "tpot_s": 1.0},
            "requests": {
                "num_requests": n, "arrivals": "trace", "lengths": "trace", "rate_per_s": None,
                "trace": {"format": "mooncake", "path": "trace.jsonl"},
            },
            **wl,
        },
        "policies": {"deployment": {"name": "fixed", "instances": [{"gpu_type": "a100-80gb"}]}},
        "outputs": {"spans": False},
    }  # fmt: skip


# ---- importer -----------------------------------------------------------------------
def test_sample_hashes_one_per_512_token_block() -> None:
    t = read_trace(TraceConfig(format="mooncake", path=SAMPLE.name), DATA)
    assert t.hashes is not None and t.hashes.block_tokens == 512
    counts = np.diff(t.hashes.offsets)
    assert (counts == -(-t.prompt // 512)).all()  # ceil(input_length / 512) every row
    assert t.hashes.flat.dtype == np.int64 and len(t.hashes.flat) == counts.sum()
    # the first row (SOURCE.md sample): 6758 tokens, hash_ids 0..13
    assert t.hashes.of(0).tolist() == list(range(14))
    sub = t.hashes.take(np.array([3, 0]))
    assert sub.of(1).tolist() == list(range(14)) and sub.of(0).tolist() == t.hashes.of(3).tolist()


@pytest.mark.parametrize(
    ("ids", "what"),
    [
        ('"x"', "'x' is not a list"),
        ("[0, -1]", "-1 is not a block hash (int >= 0)"),
        ("[0, 1.5]", "1.5 is not a block hash (int >= 0)"),
        ("[0, 1, 2]", "3 hashes for 600 tokens (2 blocks of 512)"),
    ],
)
def test_bad_hash_ids_name_line_and_column(tmp_path: Path, ids: str, what: str) -> None:
    good = '{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [0, 1]}'
    bad = good.replace("[0, 1]", ids)
    (tmp_path / "t.jsonl").write_text(good + "\n" + bad + "\n")
    with pytest.raises(ValueError) as err:
        read_trace(TraceConfig(format="mooncake", path="t.jsonl"), tmp_path)
    assert str(err.value) == f"{tmp_path / 't.jsonl'}:2: column hash_ids: {what}"


# ---- mechanism -----------------------------------------------------------------------
def test_second_request_prefills_only_its_uncached_block(tmp_path: Path) -> None:
    # A: 1536 tokens = blocks [1, 2, 3]; B, 10 s later: [1, 2, 4], its first 1024
    # tokens cached under the same chain. One output token each (finish at prefill).
    write_trace(tmp_path / "trace.jsonl", [(1536, 1, [1, 2, 3]), (1536, 1, [1, 2, 4])])
    res = run(scenario(2), tmp_path)
    req, s = res.tables["requests"], res.summary.iloc[0]
    assert req.arrival_s[1] == pytest.approx(10.0)
    # A: a whole 1536-token prefill; B: 512 new tokens over 1024 cached ones
    assert req.ttft_s[0] == pytest.approx(prefill_time(1536, 0), rel=1e-9)
    assert req.ttft_s[1] == pytest.approx(prefill_time(512, 1024), rel=1e-9)
    assert prefill_time(512, 1024) < 0.45 * prefill_time(1536, 0)
    assert s.prefix_saved_tokens == 1024
    assert s.prefix_hit_rate == pytest.approx(1024 / 3072)
    off = run(scenario(2, cache=False), tmp_path)
    assert off.tables["requests"].ttft_s[1] == pytest.approx(prefill_time(1536, 0), rel=1e-9)
    assert off.summary.iloc[0].prefix_saved_tokens == 0


def test_chain_mismatch_in_the_middle_stops_reuse(tmp_path: Path) -> None:
    # block 3's hash recurs, but under a different second block: only block 1 is reused
    write_trace(tmp_path / "trace.jsonl", [(1536, 1, [1, 2, 3]), (1536, 1, [1, 9, 3])])
    res = run(scenario(2), tmp_path)
    assert res.summary.iloc[0].prefix_saved_tokens == 512
    assert res.tables["requests"].ttft_s[1] == pytest.approx(prefill_time(1024, 512), rel=1e-9)


def test_a_full_hit_still_computes_the_last_token(tmp_path: Path) -> None:
    write_trace(tmp_path / "trace.jsonl", [(1024, 1, [1, 2]), (1024, 1, [1, 2])])
    res = run(scenario(2), tmp_path)
    # the last block is not taken (it would leave no token to compute): 512 saved
    assert res.summary.iloc[0].prefix_saved_tokens == 512


def test_lru_eviction_at_the_exact_block_count(tmp_path: Path) -> None:
    # KV of 2048 tokens = 128 blocks of 16; a 512-token hash block holds 32.
    # R0 [1, 2] and R1 [3, 4] leave 4 cached nodes = 128 blocks: exactly full, nothing
    # evicted (R2 below still finds [1, 2]). LRU order after them (a chain's deepest
    # block released first): 2, 1, 4, 3. R2 [1, 2, 5] holds 1 and 2 (1024 tokens
    # saved) and needs 32 blocks: node 4 (R1's second block) is evicted; LRU 3, then
    # R2's 5, 2, 1. R3 [3, 4, 6] finds 3 only (512 saved: 4 is gone) and prefills
    # 1024 tokens = 64 blocks: nodes 5 and 2 are evicted. 96 blocks evicted in all.
    rows = [(1024, 1, [1, 2]), (1024, 1, [3, 4]), (1536, 1, [1, 2, 5]), (1536, 1, [3, 4, 6])]
    write_trace(tmp_path / "trace.jsonl", rows)
    res = run(scenario(4, kv_tokens=2048), tmp_path)
    inst, s = res.tables["instances"].iloc[0], res.summary.iloc[0]
    assert inst.kv_capacity_tokens == 2048
    assert inst.prefix_evicted_blocks == 32 + 64
    assert s.prefix_saved_tokens == 1024 + 512
    ttft = res.tables["requests"].ttft_s
    assert ttft[2] == pytest.approx(prefill_time(512, 1024), rel=1e-9)
    assert ttft[3] == pytest.approx(prefill_time(1024, 512), rel=1e-9)


@pytest.mark.parametrize("disaggregated", [False, True])
def test_conservation_with_the_cache_under_memory_pressure(
    tmp_path: Path, disaggregated: bool
) -> None:
    sc = scenario(300)
    sc["cluster"]["nodes"][0]["devices"]["gpu"]["count"] = 2
    wl = sc["workload"]
    wl["requests"]["rate_per_s"] = 6.0
    wl["requests"]["trace"]["path"] = str(SAMPLE)
    wl["mem_fraction"] = 0.3  # 24 GB - 16 GB of weights: ~61k KV tokens, preemptions
    wl["slo"] = {"ttft_s": 2.0, "tpot_s": 0.05}
    inst = [
        {"role": "prefill", "gpu_type": "a100-80gb"},
        {"role": "decode", "gpu_type": "a100-80gb"},
    ]
    sc["policies"] = {
        "deployment": {"name": "fixed", "instances": inst}
        if disaggregated else {"name": "fixed", "instances": [{"gpu_type": "a100-80gb", "count": 2}]},
        "routing": "least-outstanding",
    }  # fmt: skip
    res = run(sc, tmp_path)  # runs check(): every request finished, no KV held
    req, inst_t, s = res.tables["requests"], res.tables["instances"], res.summary.iloc[0]
    assert len(req) == 300 and req.finish_s.notna().all()
    assert inst_t.tokens_out.sum() == req.output_tokens.sum()
    assert s.prefix_saved_tokens > 0 and 0 < s.prefix_hit_rate < 1
    e2e = float((req.finish_s - req.arrival_s).sum())
    held = inst_t.request_seconds.sum()
    if not disaggregated:
        assert s.preemptions > 0
        assert held == pytest.approx(e2e, rel=1e-9)
    else:  # decode instances have no cache: only the prefill instance hits
        assert (inst_t.prefix_hit_tokens[inst_t.role == "decode"] == 0).all()
        assert held < e2e


def test_cache_needs_hashes_cli_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "trace.jsonl").write_text(
        '{"timestamp": 0, "input_length": 600, "output_length": 5}\n'
    )
    assert cli_error(tmp_path, capsys, yaml.safe_dump(scenario(1))) == (
        "workload: workload.prefix_cache: needs requests with prefix-block hashes "
        "(a mooncake trace with hash_ids and lengths: trace)"
    )


# ---- routing -------------------------------------------------------------------------
def _view(outstanding: list[int], cached: tuple[int, ...], prompt: int = 1000) -> RouteView:
    inst = tuple(
        InstanceView(k, 0, "a100-80gb", "mixed", o, 0, 0, 10_000, 1.0)
        for k, o in enumerate(outstanding)
    )
    return RouteView(0.0, 0, prompt, "entry", -1, inst, cached_tokens=cached)


def test_prefix_affinity_follows_the_cache_within_the_imbalance() -> None:
    r = PrefixAffinityRouting(PrefixAffinityParams(min_hit=0.5, max_imbalance=2), None)  # type: ignore[arg-type]
    assert r.route(_view([3, 1, 2], (512, 0, 512))) == 2  # longest; fewer outstanding
    assert r.route(_view([4, 1, 2], (900, 0, 512))) == 2  # instance 0 is 3 over the least
    assert r.route(_view([3, 1, 2], (0, 0, 400))) == 1  # 400 < 0.5 x 1000: least loaded
    assert r.route(_view([3, 1, 2], ())) == 1  # cache off: least loaded


def test_concurrent_copies_are_shared_once_computed_and_released_deepest_first() -> None:
    from hetsim.workloads.serving.prefix import PrefixCache
    from hetsim.workloads.serving.traces import BlockHashes

    # three prompts of 1100 tokens: blocks of 512, 512, 76 tokens = 32, 32, 5 KV blocks
    flat = np.array([1, 2, 3, 1, 2, 3, 1, 2, 7], dtype=np.int64)
    cache = PrefixCache(BlockHashes(flat, np.array([0, 3, 6, 9]), 512), [1100] * 3, 16)
    # requests 0 and 1 both computed the whole prompt (neither found anything cached)
    assert cache.acquire(0, 1100) == 0 and cache.acquire(1, 1100) == 0
    assert cache.insert(0) == 69  # its 69 private blocks move into the cache
    assert cache.insert(1) == 69  # its copy is dropped: the cached nodes are shared
    assert cache.total_blocks == 69 and cache.pinned_blocks == 69
    assert cache.release(0) == 69 and cache.free_blocks == 0  # request 1 still holds them
    assert cache.release(1) == 69 and cache.free_blocks == 69
    # request 2 [1, 2, 7]: takes blocks 1 and 2 (1024 tokens)
    assert cache.peek(2, 1100) == 1024 and cache.acquire(2, 1100) == 1024
    cache.evict(1)  # LRU: block 3, the deepest of the released chain, goes first
    assert cache.total_blocks == 64 and cache.evicted_blocks == 5
    assert cache.hit_tokens == 1024 and cache.lookup_tokens == 3 * 1100
