"""Every Python runtime the config offers (`functions.python`) synthesizes with cdk-nag on,
and every function and layer follows it, on either architecture.

The values come from the config model itself, so a runtime added to it is tested here
without touching this file.
"""

from __future__ import annotations

import itertools
import re
import subprocess
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, get_args

import pytest
import yaml
from infra.config import FunctionsConfig, load_config

from tests.infra.synth import FULL_CONFIG, Synthesized, api_function, cdk_context
from tests.infra.test_nag import acknowledgements

pytestmark = pytest.mark.usefixtures("cdk_runtime")  # constructs of its own: on the CDK's worker (tests/conftest.py)

PYTHONS: tuple[str, ...] = get_args(FunctionsConfig.model_fields["python"].annotation)
ARCHITECTURES: tuple[str, ...] = get_args(FunctionsConfig.model_fields["architecture"].annotation)
LATEST_RUNTIME_RULES = ("AwsSolutions-L1", "Serverless-LambdaLatestVersion")
SLUICE_HANDLERS = "sluice.handlers."


def newest_python_runtime() -> str:
    """What cdk-nag's latest-runtime rules want: the newest Python runtime aws-cdk-lib knows."""
    from aws_cdk import aws_lambda as lambda_

    versions = {
        tuple(int(part) for part in runtime.name.removeprefix("python").split(".")): runtime.name
        for runtime in lambda_.Runtime.ALL
        if runtime.name.startswith("python")
    }
    return versions[max(versions)]


def test_the_values_tested_here_are_read_from_the_config_model() -> None:
    # Were either field no longer a Literal, the tests below would be parametrized over nothing.
    assert len(PYTHONS) > 1 and all(value.startswith("3.") for value in PYTHONS)
    assert set(ARCHITECTURES) == {"x86_64", "arm64"}


@pytest.fixture(scope="module", params=PYTHONS)
def app_on(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, full_app: Synthesized) -> Synthesized:
    """The full app (every kind of function) with `-c sluice:python=<value>`, as the CLI gives
    it; the session's full_app where that is already the value."""
    from infra.app import build_app

    python: str = request.param
    if full_app.config.functions.python == python:
        return full_app
    folder = tmp_path_factory.mktemp(f"python{python}")
    config_file = folder / "sluice.yaml"
    config_file.write_text(yaml.safe_dump(FULL_CONFIG))
    context = {"sluice:config": str(config_file), "sluice:python": python}
    outdir = folder / "cdk.out"
    app = build_app(context=cdk_context(**context), outdir=str(outdir))
    return Synthesized(app, load_config(config_file, context=context), outdir)


def _sluice_functions(app: Synthesized) -> dict[str, dict[str, Any]]:
    """Construct path -> properties of every function running sluice code, in every stack."""
    found = {}
    for component, stack in app.stacks.items():
        resources = app.template(component).find_resources("AWS::Lambda::Function")
        for logical_id, resource in resources.items():
            props = resource["Properties"]
            if str(props.get("Handler", "")).startswith(SLUICE_HANDLERS):
                found[f"{stack.node.path}/{logical_id}"] = props
    return found


def test_every_offered_runtime_synthesizes_with_no_finding_left(app_on: Synthesized) -> None:
    # build_app registers the AwsSolutions and Serverless packs and synth() raises on any
    # finding neither fixed nor acknowledged, so an older runtime failed in the fixture.
    assert {artifact.stack_name for artifact in app_on.assembly.stacks} == {
        stack.stack_name for stack in app_on.stacks.values()
    }
    assert app_on.findings() == []


def test_every_function_and_layer_runs_the_chosen_python(app_on: Synthesized) -> None:
    runtime = f"python{app_on.config.functions.python}"
    functions = _sluice_functions(app_on)
    # API, authorizer, shadow, rollouts, websocket, six batch and the streams' functions.
    assert len(functions) >= 10 + len(app_on.config.streams)
    assert {path: props["Runtime"] for path, props in functions.items()} == {
        path: runtime for path in functions
    }
    layers = [
        layer
        for component in app_on.stacks
        for layer in app_on.template(component).find_resources("AWS::Lambda::LayerVersion").values()
    ]
    assert layers
    for layer in layers:
        assert layer["Properties"]["CompatibleRuntimes"] == [runtime]


def test_latest_runtime_rules_are_acknowledged_only_below_the_newest_runtime(
    app_on: Synthesized,
) -> None:
    from infra.constructs.functions import SluiceFunction

    python = app_on.config.functions.python
    acknowledged: dict[str, dict[str, str]] = {}
    for path, rule_id, reason in acknowledgements(app_on.app):
        if rule_id in LATEST_RUNTIME_RULES:
            acknowledged.setdefault(path, {})[rule_id] = reason
    if f"python{python}" == newest_python_runtime():
        # On the newest runtime the rules stay armed: nothing silences them.
        assert acknowledged == {}
        return
    functions = [
        construct
        for construct in app_on.app.node.find_all()
        if isinstance(construct, SluiceFunction)
    ]
    assert len(functions) == len(_sluice_functions(app_on))
    assert set(acknowledged) == {function.function.node.path for function in functions}
    for path, rules in acknowledged.items():
        assert set(rules) == set(LATEST_RUNTIME_RULES), path
        for reason in rules.values():
            assert f"python{python}" in reason and "functions.python" in reason, path


def test_drift_monitoring_follows_the_runtime_and_3_14_says_it_is_off(app_on: Synthesized) -> None:
    """Where Apache DataSketches has a wheel (3.12, 3.13) the functions that profile or check get
    the monitor layer; on 3.14 no function has it, and the API and streams stacks, which would
    have built it, warn the operator (see test_layers for which functions get it)."""
    from infra.constructs.functions import MONITOR_PYTHONS

    from tests.infra.test_layers import MONITOR_LAYER, NO_SKETCHES

    python = app_on.config.functions.python
    with_layer = {
        component
        for component in app_on.stacks
        for layer in app_on.template(component).find_resources("AWS::Lambda::LayerVersion").values()
        if layer["Properties"].get("Description") == MONITOR_LAYER
    }
    warnings = {component: [w for w in app_on.warnings(component) if NO_SKETCHES in w] for component in app_on.stacks}
    warned = {component for component, found in warnings.items() if found}
    if python in MONITOR_PYTHONS:
        assert (with_layer, warned) == ({"api", "streams"}, set())
    else:
        assert (with_layer, warned) == (set(), {"api", "streams"})
        (message,) = warnings["api"]
        assert f"Python {python}:" in message and 'functions.python: "3.13"' in message



@pytest.mark.parametrize(
    ("python", "architecture"), list(itertools.product(PYTHONS, ARCHITECTURES))
)
def test_context_picks_the_runtime_and_architecture_functions_and_layers_follow(
    python: str, architecture: str
) -> None:
    from aws_cdk import App, Stack
    from aws_cdk.assertions import Template
    from infra.constructs.functions import FunctionPlatform

    config = load_config(
        context={"sluice:python": python, "sluice:architecture": architecture}
    ).functions
    assert (config.python, config.architecture) == (python, architecture)
    platform = FunctionPlatform(
        python=config.python,
        architecture_name=config.architecture,
        log_retention_days=30,
        retain_logs=False,
        environment={},
    )
    stack = Stack(App(context=cdk_context()), "Runtime")
    layer = platform.layer(stack, "Core", name="core", description="core")
    api_function(stack, "Api", name="api", description="api", platform=platform, layers=[layer])
    template = Template.from_stack(stack)
    (function,) = template.find_resources("AWS::Lambda::Function").values()
    assert function["Properties"]["Runtime"] == f"python{python}"
    assert function["Properties"]["Architectures"] == [architecture]
    (built,) = template.find_resources("AWS::Lambda::LayerVersion").values()
    assert built["Properties"]["CompatibleRuntimes"] == [f"python{python}"]
    assert built["Properties"]["CompatibleArchitectures"] == [architecture]
    # uv fetches wheels for this Python and this CPU.
    command = layer.installer.arguments(Path("out"))
    assert command[command.index("--python-version") + 1] == python
    wheel_arch = {"x86_64": "x86_64", "arm64": "aarch64"}[architecture]
    assert command[command.index("--python-platform") + 1] == f"{wheel_arch}-manylinux_2_34"


@pytest.mark.slow
@pytest.mark.parametrize(("python", "architecture"), [(min(PYTHONS), "arm64")])
def test_every_layer_finds_wheels_for_the_oldest_offered_runtime(
    python: str, architecture: str, tmp_path: Path
) -> None:
    """uv resolves each layer's pins for the oldest runtime on Graviton, where a wheel is the
    likeliest to be missing (dry run: nothing is installed; with --only-binary a pin without a
    wheel for that Python and CPU fails to resolve). The default runtime's core layer is built
    for real by test_bytecode and its monitor layer by test_layers, as are 3.14's core and
    triton layers; the resolutions mostly wait on the index, so the layers are resolved at
    once, and the other combinations are left to those and to `make synth`."""
    from aws_cdk import App, Stack
    from infra.constructs.functions import LAYERS_DIR, FunctionPlatform
    from infra.constructs.python_layer import find_uv

    uv = find_uv()
    assert uv is not None, "uv is in the `cdk` extra"
    platform = FunctionPlatform(
        python=python,
        architecture_name=architecture,
        log_retention_days=30,
        retain_logs=False,
        environment={},
    )
    stack = Stack(App(context=cdk_context()), "Layers")
    commands = {}
    for folder in sorted(p for p in LAYERS_DIR.iterdir() if (p / "requirements.txt").is_file()):
        layer = platform.layer(stack, folder.name, name=folder.name, description=folder.name)
        arguments = layer.installer.arguments(tmp_path / folder.name)
        arguments.remove("--quiet")  # the plan ("Would install", then ` + name==version`)
        at = arguments.index("install") + 1
        arguments[at:at] = ["--dry-run"]
        commands[folder] = [uv, *arguments]
    assert len(commands) >= 3  # core, batch, triton
    with ThreadPoolExecutor(len(commands)) as pool:
        results = dict(zip(commands, pool.map(_run, commands.values()), strict=True))
    for folder, result in results.items():
        assert result.returncode == 0, f"{folder.name}: {result.stderr[-2000:]}"
        installed = {
            match.group(1).lower().replace("_", "-")
            for match in re.finditer(r"^ \+ (\S+)==\S+$", result.stderr, re.MULTILINE)
        }
        pinned = {
            line.split("==", 1)[0].strip().lower().replace("_", "-")
            for line in (folder / "requirements.txt").read_text().splitlines()
            if "==" in line and not line.lstrip().startswith("#")
        }
        assert pinned <= installed, (folder.name, pinned - installed)


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, check=False)
