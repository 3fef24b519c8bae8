"""Price files: one JSON per region under `prices/`, dated, with where the figures come from.

Update a region's file when AWS's prices change (and its `as_of`), or pass another file
(`sluice cost --prices FILE`). Only the CLI reads a file of the caller's choosing.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from sluice.domain.errors import BadRequest

PRICES_DIR = Path(__file__).resolve().parent / "prices"
REGION = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d\Z")
REQUIRED = (
    "region", "as_of", "source", "lambda", "api_gateway", "step_functions", "s3", "sagemaker_instance_hour",
    "lambda_managed_instances", "sagemaker_serverless",
)  # fmt: skip


def regions() -> list[str]:
    return sorted(p.stem for p in PRICES_DIR.glob("*.json"))


def load_prices(region: str, path: str | Path | None = None) -> dict[str, Any]:
    if path is None:
        if not REGION.match(region):
            raise BadRequest(f"'{region}' is not an AWS region name", field="region")
        path = PRICES_DIR / f"{region}.json"
        if not path.exists():
            raise BadRequest(f"no price file for {region}; there are {regions()} (add prices/{region}.json)", field="region")
    try:
        prices = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise BadRequest(f"the price file {path} cannot be read ({type(exc).__name__})", field="prices") from None
    missing = [key for key in REQUIRED if key not in prices]
    if missing:
        raise BadRequest(f"the price file {path} lacks {missing}", field="prices")
    return prices


def about(prices: dict[str, Any]) -> dict[str, Any]:
    return {key: prices.get(key) for key in ("region", "currency", "as_of", "verified", "source")}
