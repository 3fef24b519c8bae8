"""The app a user writes by hand to serve ONNX models on Lambda or uvicorn: the peer sluice is
measured against. FastAPI, a pydantic request model, one ONNX Runtime session per model built
at import, a dict returned; `handler` is the Lambda entry point through Mangum.

The one departure from a typical hand-written app is the session options, set to sluice's
(ORT_ENABLE_ALL, 1 intra-op and 1 inter-op thread, sequential) so the two differ only in what
wraps the model, not in how ONNX Runtime runs it.

    BENCH_MODELS_DIR=benchmarks/work/models uvicorn benchmarks.peers.handwritten:app
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnxruntime as ort
from fastapi import FastAPI, HTTPException
from mangum import Mangum
from pydantic import BaseModel

MODELS_DIR = Path(os.environ.get("BENCH_MODELS_DIR", "models"))
MODEL_FILES = {"iris": "iris.onnx", "diabetes": "diabetes_mlp.onnx", "mlp_large": "mlp_large.onnx"}
ONLY = os.environ.get("BENCH_MODEL")  # a Lambda function serves one model: load only that one


def _session(path: Path) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.intra_op_num_threads = 1
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


sessions = {
    name: _session(MODELS_DIR / file)
    for name, file in MODEL_FILES.items()
    if (ONLY is None or name == ONLY) and (MODELS_DIR / file).exists()
}


class PredictRequest(BaseModel):
    inputs: list[list[float]]


app = FastAPI()


@app.get("/health")
async def health() -> dict:
    return {"status": "ok"}


@app.post("/models/{name}/predict")
async def predict(name: str, request: PredictRequest) -> dict:
    session = sessions.get(name)
    if session is None:
        raise HTTPException(status_code=404, detail=f"no model {name}")
    x = np.asarray(request.inputs, dtype=np.float32)
    outputs = session.run(None, {session.get_inputs()[0].name: x})
    names = [o.name for o in session.get_outputs()]
    # ZipMap outputs come back as a list of {label: probability}; tensors as arrays.
    return {n: (v.tolist() if isinstance(v, np.ndarray) else v) for n, v in zip(names, outputs, strict=True)}


handler = Mangum(app, lifespan="off")
