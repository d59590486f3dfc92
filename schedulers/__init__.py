"""Policies, one sub-package per domain and one module per policy.

Importing this package registers every policy in ``simulator.registry.policies``.
"""

from schedulers import queueing

__all__ = ["queueing"]
