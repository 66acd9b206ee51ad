"""`python -m strat.cli`: the `strat` command (what submitted Ray jobs run)."""

import sys

from strat.cli import main

sys.exit(main())
