"""Load the fraud example's customer features into its Feast repository's online store:

    pip install 'sluice[feast]'
    python examples/features/feast/load.py

It writes the offline source (data/customer_features.parquet), registers the entity and the
feature view (what `feast apply` does), and writes the same rows to the online store, their
event times relative to now: c-1001 an hour old, c-1002 six hours, c-1003 thirty days (older
than the lookup's max_age_s of two days, so it takes the features' defaults).
"""

from __future__ import annotations

import runpy
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path


def load(repo: Path) -> None:
    import pandas as pd
    from feast import FeatureStore

    definitions = runpy.run_path(str(repo / "customers.py"))
    now = datetime.now(UTC)
    rows = pd.DataFrame(
        {
            "customer_id": ["c-1001", "c-1002", "c-1003"],
            "avg_amount_30d": [42.5, 310.0, 18.0],
            "chargebacks_90d": [0, 3, 1],
            "event_timestamp": [now - timedelta(hours=1), now - timedelta(hours=6), now - timedelta(days=30)],
        }
    )
    (repo / "data").mkdir(exist_ok=True)
    rows.to_parquet(repo / "data" / "customer_features.parquet")
    store = FeatureStore(repo_path=str(repo))
    store.apply([definitions["customer"], definitions["customer_features"]])
    store.write_to_online_store("customer_features", rows)


if __name__ == "__main__":
    load(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(__file__).resolve().parent)
