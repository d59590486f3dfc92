"""Automatic prefix caching of one instance's KV blocks (opt-in: ``workload.prefix_cache``).

Modelled on vLLM's automatic prefix caching: a prompt is cut into hash blocks of
``hash_block_tokens`` tokens (Mooncake's ``hash_ids``: 512 tokens per block; the last
block may be partial), and a cached block is identified by its hash **chain** (its own
hash under its parent's node), so a block is reusable only if every block before it
matches. The cache is a trie of nodes; each node holds ``ceil(tokens / block_tokens)``
KV blocks of the instance's paged cache.

Life of a node: when a request's prefill completes, its prompt's hash blocks become
nodes held by the request (its private KV blocks for them move into the cache; a block
already cached under the same chain is shared and the private copy is dropped). When
the request finishes, is preempted or hands its KV off, it releases its nodes; a node
no request holds stays cached (evictable) and is evicted least recently released
first (a chain's deepest block first, as vLLM frees a sequence's blocks in reverse)
when running requests need blocks. A new (or re-prefilled) request takes the longest
cached chain of its prompt, capped so at least one token is computed (the first
token's logits), and its prefill runs only the tokens after it: the cost model prices
that chunk as a prefill of ``q`` new tokens over ``c`` cached tokens (new-token FLOPs,
attention over and reads of the ``c`` cached tokens), as for a chunked prefill.

Simplifications: a block's KV size is the same on every instance (one instance per
cache; no cross-instance or CPU/SSD tier, as Mooncake's store has); an orphaned node
(its parent evicted while it was held) is unreachable but keeps its blocks until LRU
evicts it.
"""

from __future__ import annotations

from collections import OrderedDict, deque
from typing import Any

import simpy

from hetsim.workloads.serving.traces import BlockHashes
from hetsim.workloads.serving.view import blocks

ROOT = 0


class PrefixCache:
    """One instance's cached prefix blocks: trie by hash chain, LRU of evictable nodes."""

    def __init__(self, hashes: BlockHashes, prompt: list[int], block_tokens: int) -> None:
        if hashes.block_tokens % block_tokens:
            raise ValueError(
                f"workload.block_tokens: {block_tokens} does not divide the trace's "
                f"hash_block_tokens {hashes.block_tokens}"
            )
        self.hashes, self.prompt, self.block_tokens = hashes, prompt, block_tokens
        self._child: dict[tuple[int, int], int] = {}  # (parent node, hash) -> node
        self._key: dict[int, tuple[int, int]] = {}
        self._size: dict[int, int] = {}  # KV blocks of a node
        self._ref: dict[int, int] = {}  # requests holding a node
        self._lru: OrderedDict[int, None] = OrderedDict()  # evictable nodes, oldest first
        self._held: dict[int, list[int]] = {}  # request -> nodes it holds, chain order
        self._owned: dict[int, int] = {}  # request -> KV blocks of those nodes
        self._chains: dict[int, list[tuple[int, int]]] = {}  # request -> its prompt's chain
        self._next = ROOT + 1
        self.total_blocks = 0  # KV blocks of every cached node
        self.free_blocks = 0  # ... of the evictable ones (held by no request)
        self.lookup_tokens = 0  # prefill tokens of requests that looked up a prefix
        self.hit_tokens = 0  # ... of them found cached (prefill skipped)
        self.evicted_blocks = 0

    @property
    def pinned_blocks(self) -> int:
        """KV blocks of cached nodes some request holds (not evictable)."""
        return self.total_blocks - self.free_blocks

    def _chain(self, i: int) -> list[tuple[int, int]]:
        """(hash, tokens) of request ``i``'s prompt hash blocks (built once: every
        lookup of a waiting request's prefix, each iteration, walks it)."""
        chain = self._chains.get(i)
        if chain is None:
            hb, p = self.hashes.block_tokens, self.prompt[i]
            ids = self.hashes.of(i).tolist()
            if len(ids) > -(-p // hb):  # prompt truncated (context): whole blocks only
                ids = ids[: p // hb]
            chain = self._chains[i] = [(h, min(hb, p - hb * k)) for k, h in enumerate(ids)]
        return chain

    def _match(self, i: int, limit: int) -> tuple[list[int], int]:
        """The cached chain of ``i``'s prompt covering at most ``limit`` tokens."""
        nodes: list[int] = []
        parent, tokens = ROOT, 0
        for h, t in self._chain(i):
            node = self._child.get((parent, h))
            if node is None or tokens + t > limit:
                break
            nodes.append(node)
            parent, tokens = node, tokens + t
        return nodes, tokens

    def peek(self, i: int, prefill_len: int) -> int:
        """Tokens of ``i``'s next prefill (``prefill_len`` tokens) found cached now."""
        return self._match(i, prefill_len - 1)[1]

    def _pin(self, node: int) -> None:
        r = self._ref.get(node, 0)
        self._ref[node] = r + 1
        if r == 0 and node in self._lru:
            del self._lru[node]
            self.free_blocks -= self._size[node]

    def acquire(self, i: int, prefill_len: int) -> int:
        """Request ``i`` starts a prefill of ``prefill_len`` tokens: hold its longest
        cached prefix (at most ``prefill_len - 1`` tokens) and return its tokens."""
        nodes, tokens = self._match(i, prefill_len - 1)
        for node in nodes:
            self._pin(node)
        self._held[i] = nodes
        self._owned[i] = sum(self._size[n] for n in nodes)
        self.lookup_tokens += prefill_len
        self.hit_tokens += tokens
        return tokens

    def cancel(self, i: int, prefill_len: int, tokens: int) -> None:
        """Undo :meth:`acquire` (the prefill did not start)."""
        self.release(i)
        self.lookup_tokens -= prefill_len
        self.hit_tokens -= tokens

    def insert(self, i: int) -> int:
        """``i``'s prefill completed: its prompt hash blocks beyond those it holds become
        nodes it holds. Returns the KV blocks that left its private blocks."""
        held = self._held.setdefault(i, [])
        parent = held[-1] if held else ROOT
        moved = 0
        for h, t in self._chain(i)[len(held) :]:
            node = self._child.get((parent, h))
            if node is None:
                node, self._next = self._next, self._next + 1
                self._child[(parent, h)], self._key[node] = node, (parent, h)
                self._size[node] = -(-t // self.block_tokens)
                self.total_blocks += self._size[node]
            self._pin(node)
            held.append(node)
            moved += self._size[node]
            parent = node
        self._owned[i] = self._owned.get(i, 0) + moved
        return moved

    def release(self, i: int) -> int:
        """``i`` no longer needs its KV: its nodes become evictable when no request holds
        them (deepest first in LRU order). Returns the KV blocks of its nodes."""
        for node in reversed(self._held.pop(i, [])):
            self._ref[node] -= 1
            if self._ref[node] == 0:
                del self._ref[node]
                self._lru[node] = None
                self.free_blocks += self._size[node]
        return self._owned.pop(i, 0)

    def evict(self, need_blocks: int) -> None:
        """Drop least recently released nodes until ``need_blocks`` are freed or none is
        evictable."""
        while need_blocks > 0 and self._lru:
            node, _ = self._lru.popitem(last=False)
            size = self._size.pop(node)
            del self._child[self._key.pop(node)]
            self.total_blocks -= size
            self.free_blocks -= size
            self.evicted_blocks += size
            need_blocks -= size


class CachedKv:
    """An instance's KV-block accounting with an optional prefix cache (mixed into
    :class:`workloads.serving_instance.Instance`): used blocks are the requests'
    private blocks; cached nodes a request holds are pinned; the rest is evictable.
    Also keeps the peak and the time integral of used plus pinned blocks."""

    cache: PrefixCache | None
    capacity_blocks: int
    used_blocks: int
    peak_blocks: int
    block_tokens: int
    queued_tokens: int
    waiting: deque[int]
    reqs: Any  # RequestState
    _env: simpy.Environment
    _kv_area: float  # integral over time of _kv_level
    _kv_t: float
    _kv_level: int  # used blocks plus cached blocks requests hold

    def _set_used(self, blocks_now: int) -> None:
        """Used (private) blocks are now ``blocks_now``; advance the KV-use integral."""
        now = float(self._env.now)
        self._kv_area += self._kv_level * (now - self._kv_t)
        self._kv_t = now
        self.used_blocks = blocks_now
        if self.cache is not None:
            blocks_now += self.cache.pinned_blocks
        self._kv_level = blocks_now
        if blocks_now > self.peak_blocks:
            self.peak_blocks = blocks_now

    def kv_utilisation(self, end_s: float) -> float:
        """Time-average of used / capacity KV blocks over [0, end_s]."""
        area = self._kv_area + self._kv_level * (end_s - self._kv_t)
        return area / (self.capacity_blocks * end_s) if end_s > 0 else 0.0

    def _free_blocks(self) -> int:
        """Blocks not used by requests (evictable cached blocks count as free)."""
        pinned = self.cache.pinned_blocks if self.cache is not None else 0
        return self.capacity_blocks - self.used_blocks - pinned

    def _fits(self, extra: int) -> bool:
        """Whether ``extra`` more used blocks fit, evicting cached blocks (LRU) if need be."""
        if self.cache is None:
            return self.used_blocks + extra <= self.capacity_blocks
        over = self.used_blocks + extra + self.cache.total_blocks - self.capacity_blocks
        if over > 0:
            self.cache.evict(over)
            over = self.used_blocks + extra + self.cache.total_blocks - self.capacity_blocks
        return over <= 0

    def _free_seq(self, i: int, ctx: int) -> None:
        """Request ``i`` (``ctx`` cached tokens) leaves: free its private blocks and
        release its cached ones (they stay cached, evictable)."""
        owned = self.cache.release(i) if self.cache is not None else 0
        self._set_used(self.used_blocks - blocks(ctx, self.block_tokens) + owned)

    def _take_prefixes(self, taken: list[int], chunks: tuple[int, ...]) -> None:
        """Cached prefixes for the prefills starting now; from the first request whose
        blocks do not fit (after eviction), requests go back to the queue, in order,
        with the prefix taken for them here given back."""
        assert self.cache is not None
        done, bt, total = self.reqs.done, self.block_tokens, 0
        for k, (i, q) in enumerate(zip(taken, chunks, strict=True)):
            fresh = i not in done
            if fresh:
                done[i] = self.cache.acquire(i, self.reqs.prefill_len[i])
            c = done[i]
            total += blocks(c + min(q, self.reqs.prefill_len[i] - c), bt) - blocks(c, bt)
            if not self._fits(total):
                if fresh:
                    self.cache.cancel(i, self.reqs.prefill_len[i], done.pop(i))
                for j in reversed(taken[k:]):
                    self.waiting.appendleft(j)
                del taken[k:]
                break
            self.queued_tokens -= c if fresh else 0
        self._set_used(self.used_blocks)  # pinned blocks changed
