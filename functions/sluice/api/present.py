"""How a prediction reads on the wire: simple JSON rows, or Open Inference Protocol tensors.
The HTTP API and the CLI present the core's `Prediction` through these; neither computes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.codecs.plain import present_rows, who_answered
from sluice.codecs.tensors import encode_tensor, json_data
from sluice.inference.outcomes import presenting

if TYPE_CHECKING:
    from collections.abc import Set as AbstractSet

    from sluice.domain.results import Prediction


def plain_body(prediction: Prediction, *, several: bool, return_probabilities: bool = True) -> dict[str, Any]:
    """Rows as labels, probabilities and values; one row inline unless `several` were asked for."""
    answer = prediction.answer
    rows = present_rows(answer.signature, answer.result, return_probabilities=return_probabilities)
    content: dict[str, Any] = {"deployment": prediction.resolved.deployment.name, **who_answered(prediction)}
    if several or len(rows) != 1:
        content["predictions"] = rows
    else:
        content.update(rows[0])
    return content


def v2_body(
    prediction: Prediction,
    *,
    request_id: str | None,
    wanted: tuple[str, ...] | None,
    classify: dict[str, int] | None = None,
    binary: AbstractSet[str] | bool = frozenset(),
) -> dict[str, Any]:
    """The protocol's response; its `id` only where the request gave one, as the protocol
    says (the request's own id is in the `x-request-id` header whatever it gave). The outputs
    in `classify` ({name: k}) as their top k classes (`sluice.codecs.classification`); those
    not in `binary` (True: all) as JSON writes them (`json_data`). A refusal here comes after
    `predict` counted the request answered: it is not counted again."""
    answer = prediction.answer
    outputs = []
    with presenting():
        arrays = answer.result.outputs
        if classify:
            from sluice.codecs.classification import classified

            arrays = classified(arrays, answer.result.classes, classify)
        for name, array in arrays.items():
            if wanted and name not in wanted:
                continue
            tensor = encode_tensor(name, array)
            if binary is not True and name not in binary:
                tensor["data"] = json_data(name, tensor["datatype"], tensor["data"])
            classes = answer.result.classes.get(name)
            if classes is not None and not (classify and name in classify):
                tensor["parameters"] = {"classes": classes}
            outputs.append(tensor)
    body: dict[str, Any] = {"model_name": prediction.resolved.deployment.name, "model_version": str(answer.version.version)}
    if request_id:  # as Triton: a given id, never an empty one
        body["id"] = request_id
    body["parameters"] = who_answered(prediction)
    body["outputs"] = outputs
    return body
