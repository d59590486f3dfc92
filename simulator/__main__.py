"""``python -m simulator`` is the ``hetsim`` command."""

import sys

from simulator.cli import main

sys.exit(main())
