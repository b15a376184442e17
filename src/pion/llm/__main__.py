"""``python -m pion.llm`` = ``pion-llm``."""

import sys

from pion.llm.main import main

sys.exit(main())
