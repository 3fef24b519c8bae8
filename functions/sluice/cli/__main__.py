"""`python -m sluice.cli`: the `sluice` console script."""

from __future__ import annotations

import sys

from sluice.cli import main

sys.exit(main())
