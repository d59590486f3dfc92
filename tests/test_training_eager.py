"""Eager-mode pressure on swap plans: dispatch counts, signature matching, Capuchin keys,
size-changing variability (issue 19)."""

from __future__ import annotations

import numpy as np

from hetsim.workloads.training.exec import _Matcher
from hetsim.workloads.training.model import TransformerSpec
from hetsim.workloads.training.ops import Variant, build_sequence
from hetsim.workloads.training.view import SwapOrder

TINY = dict(layers=2, hidden=16, heads=4, ffn=64, vocab=10, seq_len=8, micro_batch=2)


def test_dispatches_per_layer_by_hand() -> None:
    lt = build_sequence(TransformerSpec(**TINY), Variant(8))
    # per layer forward: ln1 2 + qkv 4 + attn 10 + proj 4 + drop_add1 2 + ln2 2 + fc1 4 +
    # gelu 2 + fc2 4 + drop_add2 2 = 36; backward: 4 GEMMs x (dgrad 3 + wgrad 3) = 24, 5
    # elementwise x 2 = 10, attention 6: 40; Adam 6 per layer. Plus embed, head, head_bwd,
    # embed_bwd (2 each) and the embeddings' Adam (6): 2 x 82 + 14 = 178
    assert sum(lt.seq.op_dispatches) == 178
    assert lt.seq.n_ops < 178  # a profiler sees more kernels than modelled ops


def test_ffn_tokens_change_sizes_not_the_op_count() -> None:
    m = TransformerSpec(**TINY)
    a, b = build_sequence(m, Variant(8)), build_sequence(m, Variant(8, ffn_tokens=1.5))
    assert a.seq.n_ops == b.seq.n_ops
    gin = a.key_index[(0, "gin")]
    # gin: 2 B x s b f = 2 x 8 x 2 x 64 = 2048 B, x 1.5 routed tokens = 3072
    assert a.size[gin] == 2048 and b.size[gin] == 3072
    assert b.flops.sum() > a.flops.sum()


def test_signature_matching_finds_moved_tensors_and_misses() -> None:
    m = TransformerSpec(**TINY)
    base, branched = build_sequence(m, Variant(8)), build_sequence(m, Variant(8, branch_ops=2))
    t = base.key_index[(0, "gin")]
    sig = base.signatures()[t]
    # the branch inserts 4 ops after proj: gin's producer moves 4 places within its block;
    # its other 3 features (name, number of uses, user op names) agree: 3/4 >= 0.75 matches
    moved = branched.signatures()[branched.key_index[(0, "gin")]]
    assert moved[4] == sig[4] + 4 and moved[:4] == sig[:4]
    order = SwapOrder((0, "gin"), signature=sig)
    assert _Matcher(branched, 0.75).find(order) == branched.key_index[(0, "gin")]
    assert _Matcher(branched, 1.0).find(order) is None  # exact signature: a miss
    assert _Matcher(base, 1.0).find(order) == t
    # a signature from another layer never matches here
    assert _Matcher(branched, 0.75).find(SwapOrder((7, "gin"), signature=(7, *sig[1:]))) is None


def test_capuchin_op_keys_survive_inserted_ops() -> None:
    m = TransformerSpec(**TINY)
    base, branched = build_sequence(m, Variant(8)), build_sequence(m, Variant(8, branch_ops=2))
    k_base, k_br = base.op_keys(), branched.op_keys()
    i = base.seq.op_name.index("fc1_dgrad")
    j = k_br.index(k_base[i])  # same operation, found by its key
    assert branched.seq.op_name[j] == "fc1_dgrad" and j > i  # at a new index
    assert len(set(k_br)) == len(k_br)  # keys are unique
    assert np.all(np.diff([k_br.index(k) for k in k_base]) > 0)  # order kept
