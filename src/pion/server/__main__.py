"""``python -m pion.server``: same as the ``pion-server`` console script."""

import sys

from pion.server.main import main

sys.exit(main())
