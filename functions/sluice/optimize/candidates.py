"""Candidate variants of an ONNX model, each made by ONNX Runtime's own tooling:

- `graph`: the graph optimized offline (`SessionOptions.optimized_model_filepath`) at the
  extended level: the `all` level adds layout changes tied to the machine that saved them.
- `int8-dynamic`: `onnxruntime.quantization.quantize_dynamic`, weights INT8, activations
  quantized per call.
- `int8-static`: `quantize_static` (QDQ) with activation ranges calibrated on rows the user
  gives.
- `fp16`: `onnxruntime.transformers.float16` (inputs and outputs stay float32).

A candidate that does not apply is kept with the reason, so the report can say why.
"""

from __future__ import annotations

import logging
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np

# Operators ORT's quantizer rewrites; a graph without any has nothing to quantize.
QUANTIZABLE = frozenset({"MatMul", "Gemm", "Conv", "ConvTranspose", "Attention", "LSTM", "GRU", "Gather", "EmbedLayerNormalization"})
ML_DOMAIN = "ai.onnx.ml"
KINDS = ("original", "graph", "int8-dynamic", "int8-static", "fp16")


@dataclass(slots=True)
class Candidate:
    name: str
    data: bytes | None  # None: skipped
    how: dict[str, Any] = field(default_factory=dict)  # the tool and its settings (recorded as `optimization`)
    skipped: str | None = None


def build_candidates(
    original: bytes, *, calibration: dict[str, np.ndarray] | None, kinds: tuple[str, ...] = KINDS
) -> list[Candidate]:
    import onnx

    model = onnx.load_from_string(original)
    ops = {node.op_type for node in model.graph.node}
    ml_ops = sorted({n.op_type for n in model.graph.node if n.domain == ML_DOMAIN})
    found: list[Candidate] = []
    quiet = _QuietQuantizer()
    logging.getLogger().addFilter(quiet)
    try:
        with tempfile.TemporaryDirectory(prefix="sluice-optimize-") as tmp:
            _build(original, model, ops, ml_ops, Path(tmp), calibration, kinds, found)
    finally:
        logging.getLogger().removeFilter(quiet)
    return found


def _build(
    original: bytes, model: Any, ops: set[str], ml_ops: list[str], work: Path,
    calibration: dict[str, np.ndarray] | None, kinds: tuple[str, ...], found: list[Candidate],
) -> None:  # fmt: skip
    (work / "original.onnx").write_bytes(original)
    for kind in kinds:
        if kind == "original":
            found.append(Candidate("original", original, {"tool": "none"}))
        elif kind == "graph":
            found.append(_graph(work))
        elif kind == "int8-dynamic":
            found.append(_skip(kind, _why_not_quantize(ops, ml_ops)) or _dynamic(work))
        elif kind == "int8-static":
            why = _why_not_quantize(ops, ml_ops) or (
                None if calibration else "no calibration rows: give --data with rows the model takes"
            )
            found.append(_skip(kind, why) or _static(work, calibration or {}))
        elif kind == "fp16":
            why = (
                f"{ML_DOMAIN} operators ({', '.join(ml_ops)}) take float32 or double only" if ml_ops else None
            )
            found.append(_skip(kind, why) or _fp16(model))


class _QuietQuantizer(logging.Filter):
    """The quantizer logs advice to the root logger on every call; the report says what matters."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Please consider")


def _skip(name: str, why: str | None) -> Candidate | None:
    return Candidate(name, None, skipped=why) if why else None


def _why_not_quantize(ops: set[str], ml_ops: list[str]) -> str | None:
    if ops & QUANTIZABLE:
        return None
    if ml_ops:
        return f"no MatMul, Gemm or Conv to quantize: the graph is {ML_DOMAIN} operators ({', '.join(ml_ops)})"
    return "no MatMul, Gemm or Conv nodes for ONNX Runtime's quantizer"


def _graph(work: Path) -> Candidate:
    import onnxruntime as ort

    target = work / "graph.onnx"
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    options.optimized_model_filepath = str(target)
    ort.InferenceSession(str(work / "original.onnx"), options, providers=["CPUExecutionProvider"])
    return Candidate(
        "graph", target.read_bytes(),
        {"tool": "onnxruntime.SessionOptions.optimized_model_filepath", "level": "ORT_ENABLE_EXTENDED"},
    )  # fmt: skip


def _dynamic(work: Path) -> Candidate:
    from onnxruntime.quantization import QuantType, quantize_dynamic

    target = work / "int8-dynamic.onnx"
    quantize_dynamic(work / "original.onnx", target, weight_type=QuantType.QInt8)
    return Candidate(
        "int8-dynamic", target.read_bytes(),
        {"tool": "onnxruntime.quantization.quantize_dynamic", "weight_type": "QInt8"},
    )  # fmt: skip


def _static(work: Path, calibration: dict[str, np.ndarray]) -> Candidate:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    rows = len(next(iter(calibration.values())))

    class Rows(CalibrationDataReader):  # one row per call, as the calibrator asks
        def __init__(self) -> None:
            self.at = 0

        def get_next(self) -> dict[str, Any] | None:
            if self.at >= rows:
                return None
            item = {name: array[self.at : self.at + 1] for name, array in calibration.items()}
            self.at += 1
            return item

    target = work / "int8-static.onnx"
    quantize_static(
        work / "original.onnx", target, Rows(),
        quant_format=QuantFormat.QDQ, activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
    )  # fmt: skip
    return Candidate(
        "int8-static", target.read_bytes(),
        {"tool": "onnxruntime.quantization.quantize_static", "format": "QDQ", "activation_type": "QUInt8",
         "weight_type": "QInt8", "calibration_rows": rows, "calibrate_method": "MinMax"},
    )  # fmt: skip


def _fp16(model: Any) -> Candidate:
    from onnxruntime.transformers.float16 import convert_float_to_float16

    converted = convert_float_to_float16(model, keep_io_types=True)
    return Candidate(
        "fp16", converted.SerializeToString(),
        {"tool": "onnxruntime.transformers.float16.convert_float_to_float16", "keep_io_types": True},
    )  # fmt: skip
