"""Offload domain: dense LLM inference with weights, KV cache and compute split across
GPU, CPU and SSD (CPU-only llama.cpp, llama.cpp partial offload, accelerate-style layer
streaming, ZeRO-Inference, FlexGen).

Modules (``view`` is the contract the policies in ``hetsim.schedulers.offload`` see):

- ``costs``: per-layer prices of one step on the GPU, the CPU and the copy paths.
- ``schedule``: the zig-zag block schedule of one layer-step over GPU, CPU and PCIe.
- ``view``: the placement view and the plan a placement policy returns.
- ``workload``: the ``offload`` workload kind (prefill then decode of one batch).
"""
