"""Mechanisms: what the work is and how it runs physically, one module per workload kind.

Importing this package registers the model catalogue and makes the package a lazy
source of workload kinds (``simulator.discovery``): a module is imported when a
scenario names a workload kind it registers, or when a registry is listed.
"""

import sys

from hetsim.simulator.discovery import lazy_package
from hetsim.workloads.models.dense import register_models

register_models()
lazy_package(sys.modules[__name__])
