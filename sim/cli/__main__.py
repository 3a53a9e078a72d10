"""``python -m sim.cli``: the ``servesim`` command."""

import sys

from sim.cli import main

sys.exit(main())
