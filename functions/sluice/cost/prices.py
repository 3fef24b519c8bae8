"""Price files: one JSON per region under `prices/`, dated, with where the figures come from.

Update a region's file when AWS's prices change (and its `as_of`), or pass another file
(`sluice cost --prices FILE`). Only the CLI reads a file of the caller's choosing.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from sluice.domain.errors import BadRequest

PRICES_DIR = Path(__file__).resolve().parent / "prices"
REGION = re.compile(r"^[a-z]{2}(-gov)?-[a-z]+-\d\Z")
REQUIRED = ("region", "as_of", "source")
# Every price the cost model reads, by path; `*`: a table of them by instance type.
PRICES = (
    "lambda.x86_64.gb_second", "lambda.x86_64.requests_per_million",
    "lambda.arm64.gb_second", "lambda.arm64.requests_per_million",
    "api_gateway.rest_requests_per_million", "step_functions.standard_transitions_per_thousand",
    "s3.put_per_thousand", "s3.get_per_thousand", "sagemaker_instance_hour.*",
    "lambda_managed_instances.requests_per_million", "lambda_managed_instances.management_fee",
    "lambda_managed_instances.ec2_instance_hour.*",
    "sagemaker_serverless.gb_second", "sagemaker_serverless.data_processed_per_gb",
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
    if not isinstance(prices, dict):
        raise BadRequest(f"the price file {path} is not a JSON object", field="prices")
    missing = [key for key in REQUIRED if key not in prices] + [where for where in PRICES if not _priced(prices, where)]
    if missing:
        raise BadRequest(f"the price file {path} lacks {', '.join(missing)} (or holds no price there)", field="prices")
    return prices


def _priced(prices: dict[str, Any], where: str) -> bool:
    """Whether `where` (a dotted path) holds a price: a finite number, at least 0 (each of a `*` table's)."""
    *path, last = where.split(".")
    node: Any = prices
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    if not isinstance(node, dict):
        return False
    found = node.values() if last == "*" else [node.get(last)]
    return all(not isinstance(v, bool) and isinstance(v, int | float) and 0 <= v < math.inf for v in found)


def about(prices: dict[str, Any]) -> dict[str, Any]:
    return {key: prices.get(key) for key in ("region", "currency", "as_of", "verified", "source")}
