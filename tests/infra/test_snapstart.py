"""SnapStart on the functions that answer requests: what Lambda requires of them, and that
every caller reaches the published version (the alias), never the unpublished $LATEST."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from infra.config import SluiceConfig

from tests.infra.synth import FULL_CONFIG, Synthesized, function_by_handler, synthesize

API = "sluice.handlers.api.handler"
SHADOW = "sluice.handlers.shadow.handler"
SNAPSTART_RUNTIMES = ("python3.12", "python3.13", "python3.14")


def _alias_of(template: Any, function_id: str) -> tuple[str, dict[str, Any]]:
    aliases = [
        (alias_id, alias["Properties"])
        for alias_id, alias in template.find_resources("AWS::Lambda::Alias").items()
        if alias["Properties"]["FunctionName"] == {"Ref": function_id}
    ]
    assert len(aliases) == 1, f"{function_id} has {len(aliases)} aliases"
    return aliases[0]


@pytest.mark.parametrize("handler", [API, SHADOW])
def test_request_functions_run_from_snapshots_within_lambdas_limits(
    full_app: Synthesized, handler: str
) -> None:
    template = full_app.template("api")
    function_id, function = function_by_handler(template, handler)
    assert function["SnapStart"] == {"ApplyOn": "PublishedVersions"}
    # What SnapStart refuses: older Pythons, more than 512 MB of /tmp, provisioned concurrency.
    assert function["Runtime"] in SNAPSTART_RUNTIMES
    assert function.get("EphemeralStorage", {"Size": 512})["Size"] <= 512
    _, alias = _alias_of(template, function_id)
    assert alias["Name"] == "live"
    assert "ProvisionedConcurrencyConfig" not in alias
    version_id = alias["FunctionVersion"]["Fn::GetAtt"][0]
    version = template.to_json()["Resources"][version_id]
    assert version["Type"] == "AWS::Lambda::Version"
    assert "ProvisionedConcurrencyConfig" not in version["Properties"]


def test_api_gateway_invokes_the_published_alias(full_app: Synthesized) -> None:
    template = full_app.template("api")
    function_id, _ = function_by_handler(template, API)
    alias_id, _ = _alias_of(template, function_id)
    methods = template.find_resources("AWS::ApiGateway::Method")
    uris = [m["Properties"]["Integration"]["Uri"] for m in methods.values()]
    assert uris and all({"Ref": alias_id} in uri["Fn::Join"][1] for uri in uris)
    permissions = [
        p["Properties"]
        for p in template.find_resources("AWS::Lambda::Permission").values()
        if p["Properties"]["Principal"] == "apigateway.amazonaws.com"
        and p["Properties"]["FunctionName"] != {"Fn::GetAtt": [_authorizer(template), "Arn"]}
        and p["Properties"]["FunctionName"] not in _websocket_functions(template)
    ]
    assert permissions and all(p["FunctionName"] == {"Ref": alias_id} for p in permissions)


def _authorizer(template: Any) -> str:
    return function_by_handler(template, "sluice.handlers.authorizer.handler")[0]


def test_functions_off_the_request_path_keep_plain_versions(full_app: Synthesized) -> None:
    for component in ("api", "batch"):
        for function in full_app.template(component).find_resources(
            "AWS::Lambda::Function"
        ).values():
            props = function["Properties"]
            if props["Handler"] in (API, SHADOW):
                continue
            assert "SnapStart" not in props, props["Handler"]


def test_preload_reaches_the_snapstart_functions(full_app: Synthesized) -> None:
    template = full_app.template("api")
    assert full_app.config.functions.preload == ["acme/fraud", "acme/iris"]
    for handler in (API, SHADOW):
        variables = function_by_handler(template, handler)[1]["Environment"]["Variables"]
        assert json.loads(variables["SLUICE_PRELOAD"]) == ["acme/fraud", "acme/iris"]
        assert variables["SLUICE_PRELOAD_MAX_BYTES"] == str(64 * 1024 * 1024)


def test_snapstart_turns_off_with_its_aliases_and_preload(full_app: Synthesized, tmp_path: Path) -> None:
    # The full app, SnapStart on, has the aliases this one must not.
    assert full_app.template("api").find_resources("AWS::Lambda::Alias")
    config = {**FULL_CONFIG, "functions": {"snap_start": False, "preload": ["acme/fraud"]}}
    off = synthesize(tmp_path / "off", SluiceConfig.model_validate(config)).template("api")
    assert off.find_resources("AWS::Lambda::Alias") == {}
    shadow_id, _ = function_by_handler(off, SHADOW)
    _, api = function_by_handler(off, API)
    assert "SnapStart" not in api and "SLUICE_PRELOAD" not in api["Environment"]["Variables"]
    mirror = api["Environment"]["Variables"]["SLUICE_MIRROR"]
    assert mirror == {"Fn::Join": ["", ["lambda://", {"Ref": shadow_id}]]}


def test_preload_entries_must_name_a_tenant_and_a_deployment() -> None:
    with pytest.raises(ValueError, match="tenant/deployment, not 'fraud'"):
        SluiceConfig.model_validate({**FULL_CONFIG, "functions": {"preload": ["fraud"]}})


def _websocket_functions(template) -> list[dict]:
    functions = template.find_resources("AWS::Lambda::Function")
    return [
        {"Fn::GetAtt": [logical_id, "Arn"]}
        for logical_id, f in functions.items()
        if "websocket" in str(f["Properties"].get("Handler", ""))
    ]
