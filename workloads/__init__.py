"""Mechanisms: what the work is and how it runs physically, one module per workload kind.

Importing this package registers every workload kind and model in the registries.
"""

from workloads import queueing
from workloads.models import register_models

register_models()

__all__ = ["queueing"]
