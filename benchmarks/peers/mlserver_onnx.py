"""An ONNX Runtime model for MLServer, the peer sluice is measured against.

MLServer ships no ONNX runtime (its runtimes are sklearn, xgboost, lightgbm, mlflow,
huggingface, catboost, mllib, alibi), so ONNX users write this custom `MLModel`, as MLServer's
docs describe for any other framework. Session options match sluice's.
"""

from __future__ import annotations

import onnxruntime as ort
from mlserver import MLModel
from mlserver.codecs import NumpyCodec
from mlserver.types import InferenceRequest, InferenceResponse


class OnnxModel(MLModel):
    async def load(self) -> bool:
        options = ort.SessionOptions()
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
        options.intra_op_num_threads = 1
        options.inter_op_num_threads = 1
        options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
        uri = self.settings.parameters.uri
        self._session = ort.InferenceSession(uri, options, providers=["CPUExecutionProvider"])
        self._outputs = [o.name for o in self._session.get_outputs()]
        return True

    async def predict(self, payload: InferenceRequest) -> InferenceResponse:
        feeds = {item.name: NumpyCodec.decode_input(item) for item in payload.inputs}
        values = self._session.run(self._outputs, feeds)
        return InferenceResponse(
            model_name=self.name,
            id=payload.id,
            outputs=[NumpyCodec.encode_output(name, value) for name, value in zip(self._outputs, values, strict=True)],
        )
