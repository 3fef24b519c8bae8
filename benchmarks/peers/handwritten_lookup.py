"""What a user writes by hand for a lookup -> model graph: FastAPI, a pydantic body, the
customers' features read from the same SQLite file in one query (defaults for customers not
there), the same concatenation and one ONNX Runtime call; `make_handler` gives the Lambda
entry point (Mangum). The peer `benchmarks.bench_lookups` measures a sluice lookup against."""

import sqlite3
from typing import Any

import numpy as np
import onnxruntime as ort
from fastapi import FastAPI
from mangum import Mangum
from pydantic import BaseModel


class Row(BaseModel):
    customer: str
    amount: float


class Body(BaseModel):
    batch: list[Row]


def make_handler(model: bytes, path: str) -> Any:
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, check_same_thread=False)
    app = FastAPI()

    @app.post("/api/v1/predictions")
    async def predict(body: Body) -> dict:
        customers = [r.customer for r in body.batch]
        distinct = list(dict.fromkeys(customers))
        query = f"SELECT customer_id, avg_amount, chargebacks FROM customer_features WHERE customer_id IN ({', '.join('?' * len(distinct))})"
        found = {c: (a, n) for c, a, n in db.execute(query, distinct)}
        avg = np.asarray([found.get(c, (0.0, 0))[0] for c in customers], np.float32)
        chargebacks = np.asarray([found.get(c, (0.0, 0))[1] for c in customers], np.float32)
        amount = np.asarray([r.amount for r in body.batch], np.float32)
        (score,) = session.run(None, {"features": np.stack([amount, avg, chargebacks], axis=1)})
        return {"predictions": [{"prediction": float(s)} for s in score[:, 0]]}

    return Mangum(app, lifespan="off")
