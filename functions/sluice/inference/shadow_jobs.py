"""A shadow job: everything a mirror needs, as JSON that survives an asynchronous invoke."""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from sluice.codecs.datatypes import numpy_of_v2, v2_of_numpy
from sluice.domain.signature import Signature


def encode_arrays(arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    out = {}
    for name, array in arrays.items():
        datatype = v2_of_numpy(array.dtype)
        if datatype == "BYTES":
            out[name] = {"datatype": datatype, "shape": list(array.shape), "data": [str(x) for x in array.reshape(-1).tolist()]}
        else:
            raw = np.ascontiguousarray(array).tobytes()
            out[name] = {"datatype": datatype, "shape": list(array.shape), "b64": base64.b64encode(raw).decode()}
    return out


def decode_arrays(data: dict[str, Any]) -> dict[str, np.ndarray]:
    out = {}
    for name, item in data.items():
        if item["datatype"] == "BYTES":
            out[name] = np.asarray(item["data"], dtype=object).reshape(item["shape"])
        else:
            raw = base64.b64decode(item["b64"])
            out[name] = np.frombuffer(raw, dtype=numpy_of_v2(item["datatype"])).reshape(item["shape"]).copy()
    return out


@dataclass
class ShadowJob:
    tenant: str
    deployment: str
    revision: int
    mirror: str
    node: dict[str, Any]  # the mirror's policy node
    inputs: dict[str, np.ndarray]
    primary_outputs: dict[str, np.ndarray]
    primary_classes: dict[str, list[Any]] = field(default_factory=dict)
    primary_signature: Signature | None = None
    primary_latency_ms: float = 0.0
    request_id: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "tenant": self.tenant,
            "deployment": self.deployment,
            "revision": self.revision,
            "mirror": self.mirror,
            "node": self.node,
            "inputs": encode_arrays(self.inputs),
            "primary_outputs": encode_arrays(self.primary_outputs),
            "primary_classes": self.primary_classes,
            "primary_signature": self.primary_signature.to_dict() if self.primary_signature else None,
            "primary_latency_ms": self.primary_latency_ms,
            "request_id": self.request_id,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ShadowJob:
        return cls(
            tenant=data["tenant"],
            deployment=data["deployment"],
            revision=int(data["revision"]),
            mirror=data["mirror"],
            node=data["node"],
            inputs=decode_arrays(data["inputs"]),
            primary_outputs=decode_arrays(data["primary_outputs"]),
            primary_classes=data.get("primary_classes") or {},
            primary_signature=Signature.from_dict(data["primary_signature"]) if data.get("primary_signature") else None,
            primary_latency_ms=float(data.get("primary_latency_ms", 0.0)),
            request_id=data.get("request_id", ""),
        )
