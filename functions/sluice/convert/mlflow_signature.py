"""An MLflow model's signature as sluice maps it, read from the form MLflow writes into a model's
MLmodel file (`ModelSignature.to_dict()`: `inputs` and `outputs`, each a JSON list of column or
tensor specs). The client path (`sluice.convert.mlflow_models`, MLflow's own objects turned into
that form) and the REST path on AWS (`sluice.convert.mlflow_rest`, the MLmodel file read as YAML)
both map it here, so a version gets the same feature names either way:

- a column schema: its columns, in order, are the model's feature names (an unnamed one `fN`);
  a column sluice cannot feed as a float (a string, an array, …) is refused, naming it;
- one 2-D tensor: its width, and no names.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from sluice.domain.errors import Unprocessable

if TYPE_CHECKING:
    from collections.abc import Mapping

NUMERIC = frozenset({"double", "float", "long", "integer", "boolean"})


def hint(signature: Mapping[str, Any] | None, uri: str) -> tuple[list[str] | None, int | None]:
    """Feature names and width from the signature's inputs (None, None: no signature)."""
    specs = specs_of(signature, "inputs", uri)
    if not specs:
        return None, None
    if all(spec.get("type") == "tensor" for spec in specs):
        shape = (specs[0].get("tensor-spec") or {}).get("shape") if len(specs) == 1 else None
        if isinstance(shape, list) and len(shape) == 2 and isinstance(shape[1], int) and shape[1] > 0:
            return None, shape[1]
        return None, None
    names: list[str] = []
    for spec in specs:
        kind = str(spec.get("type"))
        name = spec.get("name")
        if kind not in NUMERIC:
            raise Unprocessable(
                f"{uri} takes column {name!r} of type {kind}; sluice feeds a model numeric columns "
                f"({', '.join(sorted(NUMERIC))})",
                field="signature",
            )
        names.append(str(name) if name is not None else f"f{len(names)}")
    return names, len(names)


def specs_of(signature: Mapping[str, Any] | None, part: str, uri: str) -> list[dict[str, Any]]:
    """The column or tensor specs of the signature's `inputs` or `outputs` ([] when absent)."""
    if not isinstance(signature, dict) or signature.get(part) is None:
        return []
    text = signature[part]
    try:
        specs = json.loads(text) if isinstance(text, str) else text
    except ValueError:
        specs = None
    if not isinstance(specs, list) or not all(isinstance(spec, dict) for spec in specs):
        raise Unprocessable(f"{uri}'s signature has {part} MLflow did not write (not a JSON list of specs)", field="signature")
    return specs
