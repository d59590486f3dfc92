"""Policies: one sub-package per domain, one module per policy.

Importing this package makes it a lazy source of policies (``simulator.discovery``):
a policy's module is imported when a scenario names it (or its workload's default),
or when the policy registry is listed.
"""

import sys

from hetsim.simulator.discovery import lazy_package

lazy_package(sys.modules[__name__])
