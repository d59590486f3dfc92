"""TEE domain: secure training and inference across CPU and NPU/GPU enclaves.

Modules (``view`` is the contract: the read-only views and decision types this
domain's policies in ``hetsim.schedulers.tee`` receive and return):

- ``collab``: Secure collaborative LLM training: accelerator forward/backward, CPU Adam
  (TensorTEE).
- ``collab_costs``: Per-step costs of collaborative LLM training (ZeRO-Offload style) under a
  protection plan.
- ``models``: Model shapes used by the TEE workloads: GPT-class LLMs and small DNNs as layer
  tables.
- ``nna``: DNN training with private data in a CPU TEE and linear ops on untrusted NNAs
  (DAC'23).
- ``nna_costs``: Per-op costs of DNN training with private data in a CPU TEE and untrusted NNAs
  (DAC'23).
- ``pipeline``: Closed-form schedules of layer-by-layer pipelines (numpy, no SimPy process per
  layer).
- ``secure``: Secure-memory traffic and cross-enclave transfers, built on
  :mod:`devices.enclave`.
- ``verify``: Verifiable DNN inference: a CPU enclave outsources linear layers to an untrusted
  GPU and checks them with Freivalds' algorithm (Slalom).
- ``verify_costs``: Per-layer costs of verifiable DNN inference (Slalom).
- ``view``: Read-only snapshots the TEE mechanisms hand to their policies, and the decisions.
"""
