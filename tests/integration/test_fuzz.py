"""A property-based fuzz run over sluice's own OpenAPI document (schemathesis): every
documented operation, called with generated path, query and body values by an admin of a
test tenant, answers without a 5xx and as documented (status codes, content types, bodies).

Bounded and reproducible: a fixed seed, derandomized, the examples and fuzzing phases only
(the coverage phase enumerates thousands of policy shapes), CASES_PER_OPERATION each
(POLICY_CASES for the two that write a whole policy): about a thousand calls."""

from __future__ import annotations

import os
import tempfile
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

schemathesis = pytest.importorskip("schemathesis")
from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis.configuration import set_hypothesis_home_dir  # noqa: E402
from schemathesis import checks as st_checks  # noqa: E402
from schemathesis.specs.openapi import checks as openapi_checks  # noqa: E402
from schemathesis.specs.openapi.negative import mutations  # noqa: E402

from sluice.api.app import create_app  # noqa: E402
from tests.support import built_once  # noqa: E402

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sluice.wiring import Container

# Hypothesis keeps caches in a folder of its own: outside the repository, and no example
# database at all (`database=None`), so every run is the same run.
set_hypothesis_home_dir(Path(tempfile.gettempdir()) / "sluice-fuzz-hypothesis")

SEED = 20240611

# Negative cases mutate one node of a body's schema; schemathesis first lists every node it can
# reach, each path through the `$ref`s apart, down to MAX_WALK_DEPTH (32) nested schemas. The
# policy grammar's node kinds refer to one another, so that list has ~170,000 entries, and making
# it was 85% of the fuzz run's CPU (14 s for each operation that takes a policy). Twelve deep
# still reaches every field of a node nested two graph levels down; deeper wrong values are the
# grammar's own tests' (tests/unit/test_graph_policies.py).
mutations.MAX_WALK_DEPTH = int(os.environ.get("SLUICE_FUZZ_WALK_DEPTH", "12"))
CASES_PER_OPERATION = 15

# The document is the app's own; calls go to the same app, given a fresh demo container for
# every operation (`served`). Building it reads no settings: /openapi.json is public.
APP = create_app(None, max_request_bytes=1024 * 1024)
# Every pytest-xdist worker collects this module, and so needs the operations to name its tests,
# though one worker runs them: the document (FastAPI makes it from every route's models: ~2
# CPU-s) is built by one worker of the run and read by the others (`built_once`).
schema = schemathesis.openapi.from_dict(built_once("openapi.json", APP.openapi))
schema.app, schema.location = APP, "/openapi.json"  # as `from_asgi` leaves them: calls go to APP
schema.config.seed = SEED
schema.config.phases.update(phases=["examples", "fuzzing"])

CHECKS = [
    st_checks.not_a_server_error,
    openapi_checks.status_code_conformance,
    openapi_checks.content_type_conformance,
    openapi_checks.response_schema_conformance,
]


@pytest.fixture
def fuzz_keys(demo: Container) -> dict[str, Any]:
    fuzzer, plain = demo.keys.create("acme", ["admin", "predict"], name="fuzzer")
    spare, _ = demo.keys.create("acme", ["predict"], name="spare")
    return {"id": fuzzer.key_id, "plain": plain, "spare": spare.key_id}


@pytest.fixture
def served(demo: Container) -> Iterator[Container]:
    APP.state.container = demo
    yield demo
    APP.state.container = None


# The two operations that take a whole policy draw their bodies from its grammar (seven node
# kinds, nested, with patterns): schemathesis spends about three CPU-seconds generating each such
# case, against milliseconds elsewhere, so they take fewer cases. The grammar's own properties are
# tested where it is parsed (tests/unit/test_graph_policies.py, tests/integration/test_graphs.py).
POLICY_WRITES = ["POST /api/v1/deployments", "PUT /api/v1/deployments/{name}"]
POLICY_CASES = 6
FUZZ = {"derandomize": True, "database": None, "deadline": None, "suppress_health_check": list(HealthCheck)}


@schema.exclude(name=POLICY_WRITES).parametrize()
@settings(max_examples=CASES_PER_OPERATION, **FUZZ)
def test_no_input_gets_a_server_error_or_an_undocumented_answer(case: Any, fuzz_keys: dict[str, Any], served: Container) -> None:
    call_and_validate(case, fuzz_keys)


@schema.include(name=POLICY_WRITES).parametrize()
@settings(max_examples=POLICY_CASES, **FUZZ)
def test_no_policy_written_gets_a_server_error_or_an_undocumented_answer(case: Any, fuzz_keys: dict[str, Any], served: Container) -> None:
    call_and_validate(case, fuzz_keys)


def call_and_validate(case: Any, fuzz_keys: dict[str, Any]) -> None:
    params = case.path_parameters or {}
    # Two cases in three address the demo's real deployments and models rather than a name
    # nobody has: the rest of the route runs, not only its 404.
    if isinstance(params.get("name"), str):
        params["name"] = ("iris", "diabetes", params["name"])[zlib.crc32(params["name"].encode()) % 3]
    if "key_id" in params and (params["key_id"] == fuzz_keys["id"] or zlib.crc32(str(params["key_id"]).encode()) % 2):
        params["key_id"] = fuzz_keys["spare"]  # a real key, never the one the fuzzer calls with
    # Triton answers an explicit load or unload it does not serve with 503 (UNAVAILABLE), and so
    # does sluice, documented: there a 5xx is the answer, still held to its schema.
    refusing = case.path.endswith(("/load", "/unload"))
    checks = [c for c in CHECKS if not (refusing and c is st_checks.not_a_server_error)]
    case.call_and_validate(headers={"Authorization": f"Bearer {fuzz_keys['plain']}"}, checks=checks)
