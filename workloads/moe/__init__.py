"""MoE domain: MoE prefill and decode layer by layer, experts cached on the GPU or run on the
CPU.

Modules (``view`` is the contract: the read-only views and decision types this
domain's policies in ``hetsim.schedulers.moe`` receive and return):

- ``costs``: Costs of MoE work on one GPU + CPU + PCIe node, priced by the devices' rooflines.
- ``layer``: One MoE layer of one step: routing, placement, and the GPU/CPU/PCIe timeline.
- ``metrics``: Run metrics of the MoE workload: counters kept per phase and the summary row.
- ``prefetch``: Prefetch requests of one MoE layer: the lookahead view and the issued copies.
- ``residency``: Where each routed expert's weights are: GPU slot cache, in flight over PCIe, or
  host.
- ``routing``: Routing traces: full router probability vectors per token and MoE layer.
- ``view``: Read-only snapshots the MoE mechanism hands to its policies, and their decisions.
- ``workload``: MoE inference with offloaded experts: prefill and decode, layer by layer, on
  GPU+CPU+PCIe.
"""
