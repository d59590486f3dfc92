"""Mechanisms: what the work is and how it runs physically, one module per workload kind.

Importing this package imports every module in it (``simulator.discovery``), which
registers every workload kind, and registers the model catalogue.
"""

import sys

from hetsim.simulator.discovery import import_submodules
from hetsim.workloads.models.dense import register_models

register_models()
import_submodules(sys.modules[__name__])
