"""Names of a deployment's endpoint and what hangs off it, the same for SageMaker and its
local twin.

One endpoint per deployment, named from the tenant and the deployment so that no two tenants
can meet: `sluice-<tenant>-<deployment>` cut to fit, plus a digest of both (SageMaker names
are 63 characters of letters, digits and hyphens). Its endpoint configs and models are named
`<endpoint>-<digest>` and `<endpoint>-<variant>-<digest>`, and so are its inference
components. A name beginning with an endpoint's is not enough to make a thing that endpoint's:
another tenant's endpoint name can extend this one's, so undeploying matches these exact
shapes and the tenant and deployment tags (`sluice.endpoints.sagemaker_teardown`).
"""

from __future__ import annotations

import hashlib
import re

from sluice.domain.errors import BadRequest

SAGEMAKER_NAME = re.compile(r"^[a-zA-Z0-9](-*[a-zA-Z0-9]){0,62}\Z")


def slug(text: str) -> str:
    """Letters and digits joined by single hyphens, lower case."""
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")


def digest(*parts: str) -> str:
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:8]


def _cut(text: str, length: int) -> str:
    return text[:length].rstrip("-")


def endpoint_name(tenant: str, deployment: str) -> str:
    """At most 40 characters: the rest of SageMaker's 63 is for config and model suffixes."""
    return f"{_cut(slug(f'sluice-{tenant}-{deployment}'), 31)}-{digest(tenant, deployment)}"


def variant_name(name: str) -> str:
    variant = _cut(slug(name), 63)
    if not variant or not SAGEMAKER_NAME.match(variant):
        raise BadRequest(f"variant '{name}' has no letters or digits to name a production variant", field="policy")
    return variant


VARIANT_CHARS = 13  # of a variant's name in a model's or a component's
FINGERPRINT_CHARS = 8  # of a config's or a model's fingerprint (hexadecimal)
_CONFIG_TAIL = re.compile(rf"[0-9a-f]{{{FINGERPRINT_CHARS}}}")
_MODEL_TAIL = re.compile(rf"[a-z0-9](?:[a-z0-9-]{{0,{VARIANT_CHARS - 2}}}[a-z0-9])?-[0-9a-f]{{{FINGERPRINT_CHARS}}}")


def model_name(endpoint: str, variant: str, fingerprint: str) -> str:
    return f"{endpoint}-{_cut(variant, VARIANT_CHARS)}-{fingerprint[:FINGERPRINT_CHARS]}"


def config_name(endpoint: str, fingerprint: str) -> str:
    return f"{endpoint}-{fingerprint[:FINGERPRINT_CHARS]}"


def shaped_for(endpoint: str, name: str, *, model: bool) -> bool:
    """Whether `name` has the shape `model_name` (`model`) or `config_name` gives the
    endpoint's: its name, a hyphen, then exactly that tail (a name that merely begins with
    the endpoint's may be another endpoint's)."""
    prefix = endpoint + "-"
    return name.startswith(prefix) and (_MODEL_TAIL if model else _CONFIG_TAIL).fullmatch(name[len(prefix) :]) is not None


def component_name(endpoint: str, variant: str) -> str:
    """A version's inference component on an endpoint of components: 63 characters at most,
    unique per variant (the digest of the whole name), found again by the endpoint's prefix."""
    return f"{endpoint}-{_cut(variant, VARIANT_CHARS)}-{digest(endpoint, variant)}"
