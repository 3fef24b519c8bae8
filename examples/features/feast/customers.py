"""The customer features of examples/features/fraud.json, as Feast defines them (`feast apply`
in this folder reads this module; `load.py` applies it through Feast's SDK and writes values)."""

from datetime import timedelta
from pathlib import Path

from feast import Entity, FeatureView, Field, FileSource, ValueType
from feast.types import Float32, Int64

HERE = Path(__file__).resolve().parent

customer = Entity(name="customer", join_keys=["customer_id"], value_type=ValueType.STRING)

customer_features = FeatureView(
    name="customer_features",
    entities=[customer],
    ttl=timedelta(days=90),
    schema=[Field(name="avg_amount_30d", dtype=Float32), Field(name="chargebacks_90d", dtype=Int64)],
    source=FileSource(path=str(HERE / "data" / "customer_features.parquet"), timestamp_field="event_timestamp"),
    online=True,
)
