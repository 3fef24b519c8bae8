"""A prediction request's inputs as arrays (`PredictionService.decode`): rows of simple JSON,
Open Inference Protocol tensors or arrays already decoded, and the outputs asked for, checked
against the signatures that take and answer them."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sluice.codecs.classification import check_rankable
from sluice.codecs.json_text import nested_too_deep
from sluice.codecs.plain_inputs import arrays_from_request
from sluice.codecs.tensors import decode_tensor
from sluice.domain.errors import BadRequest, InvalidInput
from sluice.domain.requests import ArrayInputs, RowInputs, TensorInputs

if TYPE_CHECKING:
    from collections.abc import Callable

    import numpy as np

    from sluice.domain.requests import PredictionRequest
    from sluice.domain.signature import Signature


def decode_inputs(
    signature: Signature, request: PredictionRequest, check: Callable[..., dict[str, np.ndarray]], *, answers: Signature | None = None
) -> dict[str, np.ndarray]:
    """The request's inputs as arrays, checked against `signature` by `check` (the outputs asked
    for against `answers`, where the answer is not the same version's: a sequence's)."""
    inputs = request.inputs
    declared: dict[str, str] | None = None
    # JSON read outside the HTTP API's parser (an upload, a stream record, the CLI's) may nest
    # deeper than decoding walks (`sluice.codecs.json_text`): that request's input is refused.
    if isinstance(inputs, RowInputs):
        try:
            arrays = arrays_from_request(signature, inputs=inputs.inputs, features=inputs.features, batch=inputs.batch, bools=request.json_bools)
        except RecursionError:
            raise nested_too_deep("inputs" if inputs.inputs is not None else "features" if inputs.features is not None else "batch") from None
    elif isinstance(inputs, TensorInputs):
        arrays, declared = {}, {}
        for tensor in inputs.tensors:
            where = f"inputs.{tensor.name}"
            if tensor.name in arrays:
                raise InvalidInput(f"input '{tensor.name}' is given twice", field=where)
            try:
                arrays[tensor.name] = decode_tensor(tensor.name, tensor.datatype, list(tensor.shape), tensor.data, field=where, bools=request.json_bools)
            except RecursionError:
                raise nested_too_deep(where) from None
            declared[tensor.name] = tensor.datatype
    elif isinstance(inputs, ArrayInputs):
        arrays = dict(inputs.arrays)
        declared = dict(inputs.datatypes) if inputs.datatypes else None
    else:
        raise BadRequest("no inputs", field="inputs")
    gives = answers or signature
    outputs = request.outputs or ()
    if len(set(outputs)) != len(outputs):  # as an input given twice: which of the asks would hold?
        twice = next(out for i, out in enumerate(outputs) if out in outputs[:i])
        raise InvalidInput(f"output '{twice}' is asked for twice: name each output once", field=f"outputs.{twice}")
    for out in outputs:
        if gives.output(out) is None:
            raise InvalidInput(f"unknown output '{out}'; this version gives {[s.name for s in gives.outputs]}", field=f"outputs.{out}")
    for out in request.classify or ():  # refused before it is answered, not after (counted once)
        spec = gives.output(out)
        if spec is not None:
            check_rankable(out, spec.datatype)
    return check(signature, arrays, datatypes=declared)
