"""Host side of Hugging Face transformers' eager Llama decode: kernels and host time.

Measures, for one batch-1 decode step of ``LlamaForCausalLM`` (transformers 4.31, the
release current when the ML.ENERGY Leaderboard v1 ran FastChat 0.2.20 on PyTorch 2.0.1),
with a tiny configuration (hidden 128, 4 heads, FFN 256, vocabulary 1,024) on the CPU:

* the aten calls the model's Python issues per layer and how many of them do work (the
  kernels a CUDA device would launch: every call but views, no-op casts and allocations),
  read from ``torch.profiler``;
* the host time per layer and per forward outside the layers (slope and intercept of the
  step time over 8 and 32 layers): with tensors this small the time is the Python, the
  dispatcher and the allocator, not arithmetic;
* the host time of the leaderboard loop's sampling tail per token (temperature warper,
  NaN check, softmax, multinomial, the token's transfer), on a 1,024-entry vocabulary;
* the host time of the loop's text decode at every token: ``batch_decode`` of the whole
  response so far with transformers' slow (sentencepiece) ``LlamaTokenizer``, as FastChat's
  base adapter loads it (``use_fast=False``), against the response length. The vocabulary
  is a stand-in (a 32,000-piece BPE model trained on the installed packages' Python
  sources; the Llama-2 file is not redistributable): the cost is the tokenizer's Python
  work per token, not the pieces.

The figures go to ``devices/data/host_dispatch_points.csv`` by hand, with the machine they
were read on. They need torch and transformers, which hetsim does not depend on::

    python -m venv /tmp/hfenv
    /tmp/hfenv/bin/pip install torch==2.13.0 transformers==4.31.0 sentencepiece
    /tmp/hfenv/bin/python benchmarks/hf_eager_host.py
"""

from __future__ import annotations

import platform
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: aten calls that launch no kernel by themselves (a cast or copy among them counts when
#: it reaches ``aten::copy_`` or another working call below it)
_VIEWS = (
    "view transpose unsqueeze squeeze slice expand as_strided _unsafe_view _reshape_alias "
    "reshape t select alias detach resolve_conj resolve_neg empty empty_strided "
    "result_type resize_ to contiguous lift_fresh _to_copy empty_like split chunk"
)
NO_WORK = frozenset("aten::" + n for n in _VIEWS.split(" "))


def _works(event: Any) -> bool:
    if event.name not in NO_WORK:
        return True
    return any(_works(c) for c in event.cpu_children)


def _kernels(call: Callable[[], object]) -> int:
    """Aten calls made from Python by one ``call()`` that do work (module doc)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        call()
    top = [
        e
        for e in prof.events()
        if e.name.startswith("aten::")
        and (e.cpu_parent is None or not e.cpu_parent.name.startswith("aten::"))
    ]
    return sum(1 for e in top if _works(e))


def _median_s(call: Callable[[], object], repeats: int, calls: int, warm: int = 5) -> float:
    """Median over ``repeats`` of the mean seconds of ``calls`` back-to-back ``call()``."""
    for _ in range(warm):
        call()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(calls):
            call()
        times.append((time.perf_counter() - t0) / calls)
    return statistics.median(times)


def decode_step(layers: int, repeats: int = 7, steps: int = 50) -> tuple[int, float]:
    """(kernels, median host seconds) of one batch-1 decode step at 300 cached tokens."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    torch.set_default_dtype(torch.float16)  # from_pretrained(torch_dtype=fp16) builds so
    cfg = LlamaConfig(
        hidden_size=128, intermediate_size=256, num_attention_heads=4,
        num_key_value_heads=4, num_hidden_layers=layers, vocab_size=1024,
        max_position_embeddings=2048,
    )  # fmt: skip
    model = LlamaForCausalLM(cfg).eval()
    torch.set_default_dtype(torch.float32)
    with torch.inference_mode():
        cache = model(torch.randint(0, 1024, (1, 300)), use_cache=True).past_key_values
        token = torch.tensor([[5]])

        def step() -> object:
            return model(token, use_cache=True, past_key_values=cache)

        step()
        return _kernels(step), _median_s(step, repeats, steps, warm=3)


def sampling_tail(vocab: int = 1024, repeats: int = 7, steps: int = 200) -> tuple[int, float]:
    """(kernels, median host seconds) of the loop's per-token sampling (benchmark.py of
    ml-energy/leaderboard: temperature 0.7, NaN check, softmax, two multinomial draws)."""
    import torch
    from transformers.generation.logits_process import (
        LogitsProcessorList,
        TemperatureLogitsWarper,
    )

    warp = LogitsProcessorList([TemperatureLogitsWarper(0.7)])

    def tail(logits: Any) -> list[list[int]] | None:
        last = warp(None, logits[:, -1, :])
        if bool(torch.any(torch.isnan(last))):
            return None
        picks = torch.multinomial(torch.softmax(last, dim=-1), num_samples=2)
        return [[int(t) for t in q] for q in picks.tolist()]

    with torch.inference_mode():
        logits = torch.randn(1, 1, vocab)

        def once() -> object:
            return tail(logits)

        once()
        return _kernels(once), _median_s(once, repeats, steps, warm=100)


def text_decode(workdir: Path, repeats: int = 7, calls: int = 20) -> tuple[float, float]:
    """(seconds per response token, seconds per call) of decoding a response of n tokens:
    slope and intercept of the call time over n = 100 and 800."""
    import sentencepiece as spm
    from transformers import LlamaTokenizer

    site = Path(spm.__file__).resolve().parents[1]
    corpus = workdir / "corpus.txt"
    with corpus.open("w", encoding="utf-8") as out:
        for f in sorted(site.rglob("*.py"))[:3000]:
            out.write(f.read_text(encoding="utf-8", errors="ignore"))
    prefix = workdir / "standin"
    spm.SentencePieceTrainer.train(
        input=str(corpus), model_prefix=str(prefix), vocab_size=32000, model_type="bpe",
        byte_fallback=True, input_sentence_size=400000, shuffle_input_sentence=True,
        minloglevel=2,
    )  # fmt: skip
    tok = LlamaTokenizer(vocab_file=str(prefix) + ".model")
    ids = tok(corpus.read_text(encoding="utf-8")[:200000]).input_ids[1:]
    kw = {"skip_special_tokens": True, "spaces_between_special_tokens": False,
          "clean_up_tokenization_spaces": True}  # fmt: skip
    at = {n: _median_s(lambda n=n: tok.batch_decode([ids[:n]], **kw), repeats, calls)
          for n in (100, 800)}  # fmt: skip
    slope = (at[800] - at[100]) / 700
    return slope, at[100] - 100 * slope


def main() -> None:
    import torch
    import transformers

    torch.set_num_threads(1)
    cpu = platform.processor() or platform.machine()
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, "
          f"Python {platform.python_version()}, {cpu}")  # fmt: skip
    r = {n: decode_step(n) for n in (1, 2, 8, 32)}
    per_layer_kernels = r[2][0] - r[1][0]
    outside_kernels = r[1][0] - per_layer_kernels
    per_layer_s = (r[32][1] - r[8][1]) / 24
    outside_s = r[8][1] - 8 * per_layer_s
    print(f"kernels per layer: {per_layer_kernels}; outside the layers: {outside_kernels}")
    print(f"host per layer: {per_layer_s * 1e6:.1f} us "
          f"({per_layer_s / per_layer_kernels * 1e6:.2f} us per kernel); "
          f"outside the layers: {outside_s * 1e6:.1f} us")  # fmt: skip
    k, s = sampling_tail()
    print(f"sampling tail: {k} kernels, {s * 1e6:.1f} us host")
    with tempfile.TemporaryDirectory() as tmp:
        per_token, per_call = text_decode(Path(tmp))
    print(f"text decode of the response so far: {per_token * 1e6:.2f} us per response token "
          f"+ {per_call * 1e6:.1f} us per call")  # fmt: skip


if __name__ == "__main__":
    main()
