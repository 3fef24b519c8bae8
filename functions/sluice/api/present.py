"""How a prediction reads on the wire: simple JSON rows, or Open Inference Protocol tensors.
The HTTP API and the CLI present the core's `Prediction` through these; neither computes."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sluice.codecs.plain import present_rows, who_answered
from sluice.codecs.tensors import encode_tensor

if TYPE_CHECKING:
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


def v2_body(prediction: Prediction, *, request_id: str, wanted: tuple[str, ...] | None) -> dict[str, Any]:
    answer = prediction.answer
    outputs = []
    for name, array in answer.result.outputs.items():
        if wanted and name not in wanted:
            continue
        tensor = encode_tensor(name, array)
        classes = answer.result.classes.get(name)
        if classes is not None:
            tensor["parameters"] = {"classes": classes}
        outputs.append(tensor)
    return {
        "model_name": prediction.resolved.deployment.name,
        "model_version": str(answer.version.version),
        "id": request_id,
        "parameters": who_answered(prediction),
        "outputs": outputs,
    }
