"""Offload domain policies: where weights, KV cache and attention go (FlexGen, ZeRO-Inference,
accelerate layer streaming, llama.cpp)."""
