"""gRPC tensors to the core's request and the core's answer back to gRPC messages.

Inputs come as `raw_input_contents` (one little-endian buffer per input, in order; BYTES as
4-byte length-prefixed elements; views of the bytes the request came in: `wire`) or as typed
`contents`; outputs go back as `raw_output_contents`, as Triton answers by default.
"""

from __future__ import annotations

import math
import struct
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.codecs.binary import raw_values
from sluice.codecs.datatypes import V2_TO_NUMPY, v2_of_numpy
from sluice.domain.errors import InvalidInput
from sluice.domain.requests import Tensor
from sluice.grpc_service.wire import InferReply
from sluice.inference.outcomes import presenting

if TYPE_CHECKING:
    from sluice.domain.results import Prediction

# The typed `contents` field each datatype travels in (FP16 has none: raw only).
CONTENTS = {
    "BOOL": "bool_contents",
    "INT8": "int_contents",
    "INT16": "int_contents",
    "INT32": "int_contents",
    "INT64": "int64_contents",
    "UINT8": "uint_contents",
    "UINT16": "uint_contents",
    "UINT32": "uint_contents",
    "UINT64": "uint64_contents",
    "FP32": "fp32_contents",
    "FP64": "fp64_contents",
    "BYTES": "bytes_contents",
}


def _shape(name: str, dims: Any) -> tuple[int, ...]:
    shape = tuple(int(d) for d in dims)
    if any(d < 0 for d in shape):
        raise InvalidInput(f"shape of input '{name}' must be non-negative integers, got {list(shape)}", field=f"inputs.{name}.shape")
    return shape


def _dtype(name: str, datatype: str) -> np.dtype:
    dtype = V2_TO_NUMPY.get(datatype)
    if dtype is None:
        raise InvalidInput(f"datatype {datatype!r} is not one of {', '.join(V2_TO_NUMPY)}", field=f"inputs.{name}.datatype")
    return dtype


def split_bytes(name: str, raw: bytes) -> list[str]:
    """BYTES elements from Triton's serialization: each a 4-byte little-endian length, then it;
    each text in UTF-8, as REST's binary elements are (`_text`)."""
    out, at, end = [], 0, len(raw)
    view = memoryview(raw)
    while at < end:
        if at + 4 > end:
            raise InvalidInput(f"raw content of BYTES input '{name}' ends inside a length prefix", field=f"inputs.{name}")
        (size,) = struct.unpack_from("<I", raw, at)
        at += 4
        if at + size > end:
            raise InvalidInput(f"raw content of BYTES input '{name}' is shorter than its length prefix says", field=f"inputs.{name}")
        out.append(_text(name, len(out), view[at : at + size]))
        at += size
    return out


def _text(name: str, index: int, element: Any) -> str:
    """A BYTES element as the text a model takes (JSON's strings and REST's binary elements
    alike), or a refusal naming it, as REST's: `element 3 of BYTES input 'x' is not UTF-8`."""
    try:
        return str(element, "utf-8")
    except UnicodeDecodeError:
        raise InvalidInput(f"element {index} of BYTES input '{name}' is not UTF-8", field=f"inputs.{name}") from None


def _from_raw(name: str, datatype: str, shape: tuple[int, ...], raw: bytes) -> Any:
    dtype = _dtype(name, datatype)
    if datatype == "BYTES":
        return split_bytes(name, raw)  # text, as JSON strings are; the core checks the count
    want = math.prod(shape) * dtype.itemsize
    if len(raw) != want:
        raise InvalidInput(
            f"input '{name}' has {len(raw)} bytes of raw content but shape {list(shape)} of {datatype} needs {want}",
            field=f"inputs.{name}",
        )
    return raw_values(name, datatype, raw, field=f"inputs.{name}")


def _from_contents(name: str, datatype: str, contents: Any) -> Any:
    _dtype(name, datatype)
    field = CONTENTS.get(datatype)
    if field is None:
        raise InvalidInput(f"{datatype} input '{name}' has no typed contents: send it in raw_input_contents", field=f"inputs.{name}")
    values = getattr(contents, field)
    if datatype == "BYTES":
        return [_text(name, i, value) for i, value in enumerate(values)]
    # Element by element into the array: `np.asarray` would first build a Python list of them
    # (a 5 MiB FP32 tensor: 1.3 million float objects, ~40 MiB more, held by the allocator after).
    try:
        return np.fromiter(values, dtype=V2_TO_NUMPY[datatype], count=len(values))
    except (OverflowError, ValueError):
        raise InvalidInput(f"contents of {datatype} input '{name}' hold a value out of its range", field=f"inputs.{name}") from None


def tensors_of(request: Any) -> tuple[Tensor, ...]:
    """The request's inputs as the core's tensors: raw contents for every input, or none."""
    raws = request.raw_input_contents
    if raws and len(raws) != len(request.inputs):
        raise InvalidInput(
            f"raw_input_contents has {len(raws)} entries for {len(request.inputs)} inputs: send one per input, in order, or none",
            field="raw_input_contents",
        )
    out = []
    for i, tensor in enumerate(request.inputs):
        name, datatype = tensor.name, tensor.datatype
        shape = _shape(name, tensor.shape)
        if raws:
            if tensor.HasField("contents"):
                raise InvalidInput(f"input '{name}' has both contents and raw_input_contents", field=f"inputs.{name}")
            data = _from_raw(name, datatype, shape, raws[i])
        else:
            data = _from_contents(name, datatype, tensor.contents)
        # A decoded array goes in whole: the core takes it as it is (no copy) when it fits the shape.
        out.append(Tensor(name, datatype, shape, data))
    return tuple(out)


def parameter(value: Any) -> dict[str, Any]:
    """A value as an `InferParameter`'s fields; lists (members, classes) as JSON text."""
    if isinstance(value, bool):
        return {"bool_param": value}
    if isinstance(value, int):
        return {"int64_param": value}
    if isinstance(value, float):
        return {"double_param": value}
    if isinstance(value, str):
        return {"string_param": value}
    import orjson

    return {"string_param": orjson.dumps(value).decode()}


def response_of(
    pb: Any, prediction: Prediction, *, request_id: str, wanted: tuple[str, ...] | None, who: dict[str, Any], classify: dict[str, int] | None = None
) -> InferReply:
    """A `ModelInferResponse`: the outputs as raw contents (written once, as it is sent:
    `wire.InferReply`), the same parameters as REST's; the outputs in `classify` as their top
    k classes (`sluice.codecs.classification`)."""
    with presenting():  # after `predict` counted the request answered: a refusal is not counted again
        answer = prediction.answer
        arrays = answer.result.outputs
        if classify:
            from sluice.codecs.classification import classified

            arrays = classified(arrays, answer.result.classes, classify)
        response = pb.ModelInferResponse(
            model_name=prediction.resolved.deployment.name,
            model_version=str(answer.version.version),
            id=request_id,
        )
        for key, value in who.items():
            ((field, set_to),) = parameter(value).items()
            setattr(response.parameters[key], field, set_to)
        raws = []
        for name, array in arrays.items():
            if wanted and name not in wanted:
                continue
            datatype = v2_of_numpy(array.dtype)
            output = response.outputs.add(name=name, datatype=datatype, shape=list(array.shape))
            classes = answer.result.classes.get(name)
            if classes is not None and not (classify and name in classify):
                ((field, set_to),) = parameter(classes).items()
                setattr(output.parameters["classes"], field, set_to)
            raws.append(array)
        return InferReply(response, raws)
