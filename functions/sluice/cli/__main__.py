"""`python -m sluice.cli`, and the `sluice` console script (`run`)."""

from __future__ import annotations

import sys

from sluice.startup import exiting, pause


def run() -> int:
    pause()  # the collector off while the CLI starts (`sluice.startup`): this package imports little
    from sluice.cli import main

    try:
        return main()
    finally:
        exiting()


if __name__ == "__main__":
    sys.exit(run())
