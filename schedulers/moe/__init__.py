"""Policies of the MoE offloading workload (decision points ``moe.gating``,
``moe.placement``, ``moe.prefetch``, ``moe.cache``), one module per policy."""
