"""Greedy FCFS admission of waiting prompts under token, sequence and KV-block limits."""

from __future__ import annotations

from hetsim.workloads.serving.view import BatchView, blocks


def admit(view: BatchView, token_budget: int, max_seqs: int, chunked: bool) -> tuple[int, ...]:
    """Chunk sizes for the head of the queue, in order, until a limit is hit.

    Whole prompts only unless ``chunked``; an unchunked head prompt larger than the
    budget is still admitted alone (as vLLM does for a prompt up to the model length),
    so a long prompt never blocks the queue forever.
    """
    free_blocks = view.free_kv_tokens // view.block_tokens
    seqs = view.running
    chunks: list[int] = []
    for remaining, done in view.waiting:
        take = min(remaining, token_budget) if chunked else remaining
        if take <= 0 or seqs >= max_seqs:
            break
        if take > token_budget and (chunks or view.running):
            break
        need = blocks(done + take, view.block_tokens) - blocks(done, view.block_tokens)
        if need > free_blocks:
            break
        chunks.append(take)
        token_budget -= take
        free_blocks -= need
        seqs += 1 if done == 0 else 0
    return tuple(chunks)
