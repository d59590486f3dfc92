"""``python -m hetsim`` is the ``hetsim`` command."""

import sys

from hetsim.simulator.cli import main

sys.exit(main())
