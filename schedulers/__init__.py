"""Policies: one sub-package per domain, one module per policy.

Importing this package imports every module in it (``simulator.discovery``), which
registers every policy in ``simulator.registry.policies``.
"""

import sys

from hetsim.simulator.discovery import import_submodules

import_submodules(sys.modules[__name__])
