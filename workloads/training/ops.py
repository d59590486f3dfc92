"""One training iteration as an operator sequence with tensors and their lifetimes.

Forward ops of a layer follow Korthikanti et al.'s accounting (arXiv 2205.05198, Sec. 4.1):
every tensor they list as stored for backward is produced by one op here and consumed by
that op's backward counterpart, so the stored bytes per layer are exactly
``s b h (34 + 5 a s / h)`` (``34 s b h`` with flash attention). Backward runs the layers in
reverse; each GEMM splits into a data-gradient and a weight-gradient op. One gradient
tensor flows between consecutive backward ops (sized like the op's first input; a
simplification). The optimizer is one Adam op per layer (plus one for the embeddings),
memory-bound over 32 B/param (reconstruction: read param, grad, master, m, v; write back).
Eager-mode variability adds ``branch_ops`` and ``moe_ops`` elementwise ops per layer in
forward and backward, which changes the op count the way MoE routing or a feature toggle do,
and ``ffn_tokens`` scales the FFN activations (the tokens MoE routing sends through the
layer's expert), which changes tensor sizes without changing the op count.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from hetsim.workloads.training.model import TransformerSpec

FWD, BWD, OPT = 0, 1, 2
PHASE_NAMES = ("FWD", "BWD", "OPT")

#: ATen dispatches a profiler hooks per modelled op in PyTorch eager mode, by op kind and
#: phase (reconstruction from the eager call chains: a Linear is t + addmm/matmul + view and
#: its backward two mm, two t and a bias sum; LayerNorm and dropout are a wrapper plus a
#: native kernel; flash attention adds the q/k/v reshapes and transposes around the fused
#: kernel). Scaled by the workload's ``dispatch_scale``.
DISPATCHES: dict[tuple[str, int], int] = {
    ("gemm", FWD): 4, ("gemm", BWD): 3, ("elem", FWD): 2, ("elem", BWD): 2,
    ("attn", FWD): 10, ("attn", BWD): 6, ("scores", FWD): 4, ("scores", BWD): 4,
    ("av", FWD): 2, ("av", BWD): 3, ("other", FWD): 2, ("other", BWD): 2, ("other", OPT): 6,
}  # fmt: skip

# (name, inputs, outputs, saved for backward, kind); kind: gemm k -> k s b h^2-ish FLOPs
_ATTN_EAGER = [
    ("scores", ("qk",), ("sm",), ("qk", "sm"), "scores"),
    ("dropout", ("sm",), ("smd", "smmask"), ("smmask",), "elem"),
    ("av", ("smd", "v"), ("ctx",), ("smd", "v"), "av"),
]
_ATTN_FLASH = [("attn", ("qk", "v"), ("ctx",), ("qk", "v", "ctx"), "attn")]
_PRE = [
    ("ln1", ("x",), ("a1",), ("x",), "elem"),
    ("qkv", ("a1",), ("qk", "v"), ("a1",), "gemm_qkv"),
]
_POST = [
    ("proj", ("ctx",), ("po",), ("ctx",), "gemm_proj"),
    ("drop_add1", ("po", "x"), ("r1", "mask1"), ("mask1",), "elem"),
    ("ln2", ("r1",), ("a2",), ("r1",), "elem"),
    ("fc1", ("a2",), ("gin",), ("a2",), "gemm_fc"),
    ("gelu", ("gin",), ("gout",), ("gin",), "elem"),
    ("fc2", ("gout",), ("mo",), ("gout",), "gemm_fc"),
    ("drop_add2", ("mo", "r1"), ("out", "mask2"), ("mask2",), "elem"),
]


@dataclass(frozen=True)
class Variant:
    """The parts of an iteration that change in eager mode."""

    seq_len: int
    branch_ops: int = 0
    moe_ops: int = 0
    ffn_tokens: float = 1.0  # share of tokens through the FFN (MoE routing changes sizes)


@dataclass
class OpSequence:
    """Ops (columns) and tensors (columns) of one iteration; built by :func:`build_sequence`."""

    op_name: list[str] = field(default_factory=list)
    op_phase: list[int] = field(default_factory=list)
    op_layer: list[int] = field(default_factory=list)
    op_flops: list[float] = field(default_factory=list)
    op_bytes: list[float] = field(default_factory=list)
    op_dispatches: list[int] = field(default_factory=list)
    op_kind: list[str] = field(default_factory=list)  # gemm_qkv, attn, elem, ... (_flops keys)
    op_ins: list[tuple[int, ...]] = field(default_factory=list)
    op_outs: list[tuple[int, ...]] = field(default_factory=list)
    t_key: list[tuple[int, str]] = field(default_factory=list)
    t_size: list[int] = field(default_factory=list)
    t_uses: list[list[int]] = field(default_factory=list)
    t_producer: list[int] = field(default_factory=list)

    @property
    def n_ops(self) -> int:
        """Operators in the iteration."""
        return len(self.op_name)

    def tensor(self, key: tuple[int, str], size: float) -> int:
        """Declare a tensor; returns its id."""
        self.t_key.append(key)
        self.t_size.append(int(size))
        self.t_uses.append([])
        self.t_producer.append(-1)
        return len(self.t_key) - 1

    def op(self, name: str, phase: int, layer: int, ins: tuple[int, ...],
           outs: tuple[int, ...], flops: float, nbytes: float,
           kind: str = "other") -> int:  # fmt: skip
        """Append an op consuming ``ins`` and producing ``outs``; returns its index."""
        i = self.n_ops
        family = "gemm" if kind.startswith("gemm") else kind
        self.op_dispatches.append(DISPATCHES.get((family, phase), DISPATCHES[("other", FWD)]))
        self.op_kind.append(kind)
        self.op_name.append(name)
        self.op_phase.append(phase)
        self.op_layer.append(layer)
        self.op_flops.append(flops)
        self.op_bytes.append(nbytes)
        self.op_ins.append(ins)
        self.op_outs.append(outs)
        for t in ins:
            self.t_uses[t].append(i)
        for t in outs:
            self.t_producer[t] = i
        return i

    def finish(self) -> Lifetimes:
        """Freeze the arrays the executor and policies use."""
        return Lifetimes.of(self)


@dataclass(frozen=True)
class Lifetimes:
    """Per-op and per-tensor arrays derived from an :class:`OpSequence`."""

    seq: OpSequence
    phase: np.ndarray
    layer: np.ndarray
    stage: np.ndarray  # contiguous (phase, layer) block index of each op
    flops: np.ndarray
    nbytes: np.ndarray
    size: np.ndarray
    producer: np.ndarray
    last_use: np.ndarray
    last_fwd_use: np.ndarray  # -1 if never used in forward
    first_bwd_use: np.ndarray  # -1 if never used in backward
    key_index: dict[tuple[int, str], int]

    @classmethod
    def of(cls, seq: OpSequence) -> Lifetimes:
        """Compute lifetimes: a tensor lives from its producer to its last consumer."""
        phase = np.asarray(seq.op_phase)
        layer = np.asarray(seq.op_layer)
        change = np.r_[True, (phase[1:] != phase[:-1]) | (layer[1:] != layer[:-1])]
        last, lfwd, fbwd = [], [], []
        for t, uses in enumerate(seq.t_uses):
            u = uses or [seq.t_producer[t]]
            last.append(max(u))
            f = [i for i in u if phase[i] == FWD]
            b = [i for i in u if phase[i] == BWD]
            lfwd.append(max(f) if f else -1)
            fbwd.append(min(b) if b else -1)
        return cls(
            seq, phase, layer, np.cumsum(change) - 1, np.asarray(seq.op_flops),
            np.asarray(seq.op_bytes), np.asarray(seq.t_size, dtype=np.int64),
            np.asarray(seq.t_producer), np.asarray(last), np.asarray(lfwd), np.asarray(fbwd),
            {k: i for i, k in enumerate(seq.t_key)},
        )  # fmt: skip

    @property
    def stored(self) -> np.ndarray:
        """Tensors produced in forward and kept for backward (the activations)."""
        return (self.first_bwd_use >= 0) & (self.phase[self.producer] == FWD)

    def memory_timeline(self) -> np.ndarray:
        """Bytes of live tensors while each op runs (its outputs allocated, nothing swapped)."""
        delta = np.zeros(len(self.phase) + 1, dtype=np.int64)
        np.add.at(delta, self.producer, self.size)
        np.add.at(delta, self.last_use + 1, -self.size)
        return np.cumsum(delta)[:-1]

    def signatures(self) -> list[tuple[int, str, int, tuple[str, ...], int]]:
        """Per tensor, what a profiler records to find it again (``view.Signature``):
        (layer, name, uses, sorted user op names, producer's position in its block)."""
        seq, first = self.seq, self.block_first_op()
        out = []
        for t, (layer, name) in enumerate(seq.t_key):
            prod = int(self.producer[t])
            rel = prod - first[int(self.stage[prod])] if prod >= 0 else -1
            users = tuple(sorted({seq.op_name[i] for i in seq.t_uses[t]}))
            out.append((int(layer), name, len(seq.t_uses[t]), users, rel))
        return out

    def block_first_op(self) -> np.ndarray:
        """First op index of each stage (contiguous (phase, layer) block)."""
        return np.flatnonzero(np.r_[True, np.diff(self.stage) != 0])

    def op_keys(self) -> list[tuple[int, int, str, int]]:
        """Per op, ``view.OpKey``: (phase, layer, name, occurrence within its stage)."""
        seen: dict[tuple[int, int, int, str], int] = {}
        out = []
        for i, name in enumerate(self.seq.op_name):
            ph, ly, st = int(self.phase[i]), int(self.layer[i]), int(self.stage[i])
            k = seen.get((st, ph, ly, name), 0)
            seen[(st, ph, ly, name)] = k + 1
            out.append((ph, ly, name, k))
        return out

    def stage_start(self) -> dict[tuple[int, int], int]:
        """First op index of each (phase, layer) stage label."""
        out: dict[tuple[int, int], int] = {}
        for i in np.flatnonzero(np.r_[True, np.diff(self.stage) != 0]):
            out.setdefault((int(self.phase[i]), int(self.layer[i])), int(i))
        return out


def _sizes(m: TransformerSpec, s: int, ffn_tokens: float = 1.0) -> dict[str, float]:
    b, h, a, f = m.micro_batch, m.hidden, m.heads, m.ffn
    sbh = s * b * h
    sbf = s * b * f * ffn_tokens  # FFN activations scale with the tokens routed through it
    return {
        "x": 2 * sbh, "a1": 2 * sbh, "qk": 4 * sbh, "v": 2 * sbh, "sm": 2 * a * s * s * b,
        "smd": 2 * a * s * s * b, "smmask": a * s * s * b, "ctx": 2 * sbh, "po": 2 * sbh,
        "r1": 2 * sbh, "mask1": sbh, "a2": 2 * sbh, "gin": 2 * sbf, "gout": 2 * sbf,
        "mo": 2 * sbh, "out": 2 * sbh, "mask2": sbh,
    }  # fmt: skip


def _flops(m: TransformerSpec, s: int, kind: str, ffn_tokens: float = 1.0) -> float:
    b, h, f = m.micro_batch, m.hidden, m.ffn
    causal = 0.5 if m.causal else 1.0
    return {
        "gemm_qkv": 6.0 * s * b * h * h, "gemm_proj": 2.0 * s * b * h * h,
        "gemm_fc": 2.0 * s * b * h * f * ffn_tokens, "scores": 2.0 * s * s * b * h * causal,
        "av": 2.0 * s * s * b * h * causal, "attn": 4.0 * s * s * b * h * causal,
        "elem": 5.0 * s * b * h,
    }[kind]  # fmt: skip


def _weights_bytes(m: TransformerSpec, kind: str) -> float:
    h, f = m.hidden, m.ffn
    return {"gemm_qkv": 6 * h * h, "gemm_proj": 2 * h * h, "gemm_fc": 2 * h * f}.get(kind, 0)


def _forward_layer(seq: OpSequence, m: TransformerSpec, v: Variant, layer: int,
                   x: int) -> tuple[int, list[tuple[str, tuple[int, ...], str, int]]]:  # fmt: skip
    """Append one layer's forward; returns (output tensor, backward recipe)."""
    size = _sizes(m, v.seq_len, v.ffn_tokens)
    local = {"x": x}
    recipe = []
    ops = _PRE + (_ATTN_FLASH if m.flash_attention else _ATTN_EAGER) + _POST
    for name, ins, outs, saved, kind in ops:
        for o in outs:
            local[o] = seq.tensor((layer, o), size[o])
        t_in = tuple(local[t] for t in ins)
        t_out = tuple(local[o] for o in outs)
        nbytes = sum(size[t] for t in ins + outs) + _weights_bytes(m, kind)
        fl = _flops(m, v.seq_len, kind, v.ffn_tokens)
        seq.op(name, FWD, layer, t_in, t_out, fl, nbytes, kind)
        recipe.append((name, tuple(local[t] for t in saved), kind, local[ins[0]]))
        if name == "proj":
            _extra_ops(seq, m, v, layer, FWD)
    return local["out"], recipe


def _extra_ops(seq: OpSequence, m: TransformerSpec, v: Variant, layer: int, phase: int) -> None:
    """Eager-mode variable ops (optional branch, MoE routing): transient elementwise work."""
    size = 2 * v.seq_len * m.micro_batch * m.hidden
    for k in range(v.branch_ops + v.moe_ops):
        t = seq.tensor((layer, f"extra{phase}.{k}"), size)
        seq.op("extra", phase, layer, (), (t,), _flops(m, v.seq_len, "elem"), 2 * size, "elem")
        seq.op("extra_use", phase, layer, (t,), (), _flops(m, v.seq_len, "elem"), 2 * size, "elem")


def _backward_layer(seq: OpSequence, m: TransformerSpec, v: Variant, layer: int, grad: int,
                    recipe: list[tuple[str, tuple[int, ...], str, int]]) -> int:  # fmt: skip
    """Append one layer's backward (reverse op order); returns the gradient flowing out."""
    s = v.seq_len
    for name, saved, kind, first_in in reversed(recipe):
        g_out = seq.tensor((layer, f"d_{name}"), seq.t_size[first_in])
        fl = _flops(m, s, kind, v.ffn_tokens)
        nb = seq.t_size[grad] + sum(seq.t_size[t] for t in saved) + seq.t_size[first_in]
        if kind.startswith("gemm"):
            wb = _weights_bytes(m, kind)
            seq.op(f"{name}_dgrad", BWD, layer, (grad,), (g_out,), fl, nb + wb, kind)
            seq.op(f"{name}_wgrad", BWD, layer, (grad, *saved), (), fl, nb + 2 * wb, kind)
        else:
            seq.op(f"{name}_bwd", BWD, layer, (grad, *saved), (g_out,), 2 * fl, nb, kind)
        if name == "proj":
            _extra_ops(seq, m, v, layer, BWD)
        grad = g_out
    return grad


def build_sequence(m: TransformerSpec, v: Variant) -> Lifetimes:
    """The full iteration: embedding, layers forward, head and loss, backward, Adam."""
    seq = OpSequence()
    s, b, h = v.seq_len, m.micro_batch, m.hidden
    x = seq.tensor((-1, "emb"), 2 * s * b * h)
    seq.op("embed", FWD, -1, (), (x,), 0.0, 4.0 * s * b * h)
    recipes = []
    for layer in range(m.layers):
        x, r = _forward_layer(seq, m, v, layer, x)
        recipes.append(r)
    logits = seq.tensor((m.layers, "logits"), 2 * s * b * m.vocab)
    head_fl = 2.0 * s * b * h * m.vocab
    seq.op("head", FWD, m.layers, (x,), (logits,), head_fl, 2.0 * (s * b * (h + m.vocab)))
    g = seq.tensor((m.layers, "d_head"), 2 * s * b * h)
    seq.op("head_bwd", BWD, m.layers, (logits, x), (g,), 2 * head_fl, 4.0 * s * b * m.vocab)
    for layer in reversed(range(m.layers)):
        g = _backward_layer(seq, m, v, layer, g, recipes[layer])
    seq.op("embed_bwd", BWD, -1, (g,), (), 0.0, 4.0 * s * b * h)
    for layer in range(m.layers):
        p = m.params_per_layer
        seq.op("adam", OPT, layer, (), (), 12.0 * p, 32.0 * p)
    seq.op("adam", OPT, m.layers, (), (), 12.0 * m.embedding_params, 32.0 * m.embedding_params)
    return seq.finish()
