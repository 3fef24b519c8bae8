"""What a user writes by hand for `examples/policies/transform.json`: FastAPI, a pydantic body,
the same NumPy work (a length filled and scaled, a colour encoded, a score calibrated and
labelled) and one ONNX Runtime call; `make_handler` gives the Lambda entry point (Mangum).
The peer `benchmarks.bench_graphs` measures a sluice graph against."""

from typing import Any

import numpy as np
import onnxruntime as ort
from fastapi import FastAPI
from mangum import Mangum
from pydantic import BaseModel


class Row(BaseModel):
    length: float
    colour: str


class Body(BaseModel):
    batch: list[Row]


def make_handler(model: bytes, vocabulary: list[str]) -> Any:
    options = ort.SessionOptions()
    options.intra_op_num_threads = options.inter_op_num_threads = 1
    session = ort.InferenceSession(model, options, providers=["CPUExecutionProvider"])
    index = {v: i for i, v in enumerate(vocabulary)}
    app = FastAPI()

    @app.post("/api/v1/predictions")
    async def predict(body: Body) -> dict:
        length = np.asarray([r.length for r in body.batch], np.float32)
        length = (np.where(np.isnan(length), np.float32(5.8), length) - np.float32(5.8)) / np.float32(0.8)
        code = np.asarray([index.get(r.colour, -1) for r in body.batch], np.float32)
        (score,) = session.run(None, {"embedding": np.stack([length, code], axis=1)})
        probability = 1 / (1 + np.exp(-1.5 * score[:, 0]))
        labels = np.where(probability >= 0.5, "yes", "no")
        return {"predictions": [{"prediction": str(label), "probability": float(p)} for label, p in zip(labels, probability, strict=True)]}

    return Mangum(app, lifespan="off")
