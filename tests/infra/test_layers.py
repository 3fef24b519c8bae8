"""Layers built by uv on this machine (no Docker), and Lambda's size limit."""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tests.infra.synth import Synthesized, api_function, cdk_context, function_by_handler

pytestmark = pytest.mark.usefixtures("cdk_runtime")  # constructs of its own: on the CDK's worker (tests/conftest.py)

if TYPE_CHECKING:
    from aws_cdk.assertions import Template
    from infra.constructs.functions import FunctionPlatform
    from infra.constructs.python_layer import PythonLayer, UvInstall


def test_layers_target_the_runtimes_glibc_and_cpu() -> None:
    # AL2023's glibc; uv accepts every older manylinux tag too (the core layer's real build
    # below holds manylinux2014 and manylinux_2_28 wheels).
    from infra.constructs.python_layer import python_platform

    assert python_platform(architecture="x86_64", python="3.14") == "x86_64-manylinux_2_34"
    assert python_platform(architecture="arm64", python="3.12") == "aarch64-manylinux_2_34"


def test_strip_removes_tests_bytecode_and_excluded_parts(tmp_path: Path) -> None:
    from infra.constructs.python_layer import strip_layer

    for relative in (
        "pkg/__init__.py",
        "pkg/tests/test_x.py",
        "pkg/__pycache__/m.cpython-314.pyc",
        "pkg/mod.pyc",
        "pkg/libbig_flight.so.26",
        "pkg/include/a.h",
        "pkg/keep.so",
    ):
        (tmp_path / relative).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / relative).write_text("x")
    strip_layer(tmp_path, ["pkg/libbig_flight.so*", "pkg/include"])
    left = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert left == ["pkg/__init__.py", "pkg/keep.so"]


def test_batch_layer_excludes_are_read_from_its_folder() -> None:
    from infra.constructs.functions import LAYERS_DIR
    from infra.constructs.python_layer import read_excludes

    excludes = read_excludes(LAYERS_DIR / "batch" / "exclude.txt")
    assert "pyarrow/libarrow_flight.so*" in excludes
    assert not any(line.startswith("#") for line in excludes)
    assert read_excludes(LAYERS_DIR / "core" / "exclude.txt") == []


def _bundler(requirements: Path) -> UvInstall:
    from infra.constructs.python_layer import UvInstall, python_platform

    return UvInstall(
        name="broken",
        requirements=requirements,
        python="3.14",
        platform=python_platform(architecture="x86_64", python="3.14"),
    )


def test_uv_failure_stops_synthesis_with_a_clear_message(tmp_path: Path) -> None:
    from infra.constructs.python_layer import LayerBuildError

    requirements = tmp_path / "requirements.txt"
    requirements.write_text("this is not === a requirement\n")
    with pytest.raises(LayerBuildError, match="could not be built without Docker") as raised:
        _bundler(requirements).try_bundle(str(tmp_path / "out"))
    # What uv said comes along, naming the requirement it could not read.
    assert "uv said:" in str(raised.value) and "this is not === a requirement" in str(raised.value)


def test_without_uv_synthesis_stops_and_says_how_to_get_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from infra.constructs import python_layer
    from infra.constructs.python_layer import LayerBuildError

    monkeypatch.setattr(python_layer, "find_uv", lambda: None)
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("cronsim==2.8\n")
    with pytest.raises(LayerBuildError, match=r"uv is not installed .* \(the `cdk` extra has it"):
        _bundler(requirements).try_bundle(str(tmp_path / "out"))
    assert not (tmp_path / "out").exists()


def test_functions_over_the_unzipped_limit_are_refused() -> None:
    from infra.constructs.python_layer import MB, check_unzipped_size

    check_unzipped_size("fn", code_bytes=2 * MB, layers={"core": 130 * MB, "batch": 110 * MB})
    with pytest.raises(ValueError, match=r"over Lambda's 250 MiB \(262\.1 MB\) limit"):
        check_unzipped_size("fn", code_bytes=2 * MB, layers={"core": 131 * MB, "batch": 131 * MB})


def _platform() -> FunctionPlatform:
    """Python 3.14, the newest runtime offered: its layers build (its wheels are the likeliest
    to be missing), without a monitor layer. The default runtime's core layer is built, compiled
    and imported by test_bytecode; its monitor layer below."""
    from infra.constructs.functions import FunctionPlatform

    return FunctionPlatform(
        python="3.14",
        architecture_name="x86_64",
        log_retention_days=30,
        retain_logs=False,
        environment={},
    )


def _built_for_real(tmp_path: Path, construct_id: str, name: str, python: str = "3.14") -> PythonLayer:
    """The layer `name` of a stack bundled for real (uv on this machine), under tmp_path/cdk.out."""
    from aws_cdk import App, Stack

    context = cdk_context()
    context.pop("aws:cdk:bundling-stacks")  # this test builds for real
    app = App(context=context, outdir=str(tmp_path / "cdk.out"))
    platform = replace(_platform(), python=python)
    return platform.layer(Stack(app, "Layers"), construct_id, name=name, description=name)


def test_monitor_layer_only_where_datasketches_publishes_wheels() -> None:
    from aws_cdk import App, Stack
    from aws_cdk.assertions import Annotations, Match
    from infra.constructs.functions import LAYERS_DIR
    from infra.constructs.python_layer import read_excludes

    stack = Stack(App(context=cdk_context()), "Layers")
    assert _platform().monitor_layer(stack) is None  # 3.14: no wheel, and the synthesis says so
    layer = replace(_platform(), python="3.13").monitor_layer(stack)
    assert layer is not None and layer.name == "monitor"
    # A warning saying what is off and how to turn it on (matched inside CDK: its entries are
    # not read back into Python).
    Annotations.from_stack(stack).has_warning("*", Match.string_like_regexp(r"^Python 3\.14: Apache DataSketches .* without drift .*functions\.python: \"3\.13\""))
    assert read_excludes(LAYERS_DIR / "monitor" / "exclude.txt") == ["numpy", "numpy-*.dist-info", "numpy.libs", "bin"]


@pytest.mark.slow
def test_core_layer_really_builds_under_the_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from infra.constructs.python_layer import MB, UNZIPPED_LIMIT_BYTES

    layer = _built_for_real(tmp_path, "Core", "core")
    assert layer.unzipped_bytes is not None
    assert 20 * MB < layer.unzipped_bytes < UNZIPPED_LIMIT_BYTES
    assert f"layer core: {layer.unzipped_bytes / MB:.1f} MB unzipped" in capsys.readouterr().out

    staged = next((tmp_path / "cdk.out").glob("asset.*"))
    site = staged / "python"
    for package in (
        "fastapi",
        "mangum",
        "pydantic",
        "pydantic_settings",
        "numpy",
        "onnxruntime",
        "orjson",
        "aws_lambda_powertools",
        "cachetools",
        "cronsim",
        "tzdata",
    ):
        assert (site / package).is_dir(), package
    assert not (site / "boto3").exists() and not (site / "botocore").exists()
    assert list(
        site.glob("onnxruntime/capi/onnxruntime_pybind11_state.cpython-314-x86_64-linux-gnu.so")
    )
    # Every binary wheel is one Lambda's Amazon Linux loads (x86_64, glibc 2.34 or older),
    # from manylinux2014 (pydantic-core, orjson) to onnxruntime's manylinux_2_28.
    platforms = {
        line.rsplit("-", 1)[1]
        for wheel in site.glob("*.dist-info/WHEEL")
        for line in wheel.read_text().splitlines()
        if line.startswith("Tag:")
    } - {"any"}
    assert {"manylinux2014_x86_64", "manylinux_2_28_x86_64"} <= platforms
    for tag in platforms:
        glibc = re.fullmatch(r"manylinux(?:1|2014|_2_(\d+))_x86_64", tag)
        assert glibc and int(glibc.group(1) or 17) <= 34, tag
    assert not (site / ".lock").exists()  # uv's lock on the folder it installed into
    assert not [p for p in site.rglob("*") if p.name == "tests"]
    # Bytecode only where a Python 3.14 compiled it (tests/infra/test_bytecode.py covers it).
    assert all(p.name.endswith(".cpython-314.pyc") for p in site.rglob("__pycache__/*"))
    assert layer.bytecode == bool(list(site.rglob("__pycache__/*.pyc")))


@pytest.mark.slow
def test_monitor_layer_really_builds_for_the_default_runtime(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """DataSketches' wheel for the default runtime, without the numpy the core layer carries,
    compiled by that Python where this machine has one (else sources, and the build says so)."""
    from infra.config import FunctionsConfig
    from infra.constructs.bytecode import find_interpreter
    from infra.constructs.python_layer import MB, staged_path

    python: str = FunctionsConfig.model_fields["python"].default
    layer = _built_for_real(tmp_path, "Monitor", "monitor", python=python)
    assert layer.unzipped_bytes is not None and layer.unzipped_bytes < 5 * MB
    site = staged_path(layer.layer) / "python"
    tag = f"cpython-{python.replace('.', '')}"
    assert list(site.glob("_datasketches*.so"))
    wheel = (site / "datasketches-5.2.0.dist-info" / "WHEEL").read_text()
    assert f"Tag: cp{python.replace('.', '')}-cp{python.replace('.', '')}-manylinux" in wheel
    assert not (site / "numpy").exists() and not (site / "bin").exists()
    pycs = list(site.rglob("__pycache__/*.pyc"))
    assert layer.bytecode == bool(find_interpreter(python)) == bool(pycs)
    assert all(p.name.endswith(f".{tag}.pyc") for p in pycs)
    if not layer.bytecode:
        assert f"WARNING layer monitor: no Python {python} interpreter" in capsys.readouterr().out


TRITON_LAYER = "sluice triton runtime dependencies"
MONITOR_LAYER = "sluice monitoring dependencies"
# The functions that profile the traffic they answer (their profiles are what drift is
# checked on), the hourly check that reads the profiles, and the rollout controller whose
# `drift` gate reads them.
PROFILING = ("api", "shadow", "websocket")
CHECKING = ("monitor", "rollouts")
# What the synthesis warns where the runtime has no DataSketches wheel (functions.py).
NO_SKETCHES = "Apache DataSketches publishes no wheel"


def _layer_ids(template: Template, description: str) -> set[str]:
    return {
        logical_id
        for logical_id, layer in template.find_resources("AWS::Lambda::LayerVersion").items()
        if layer["Properties"].get("Description") == description
    }


def _layers_of(template: Template, handler: str) -> set[str]:
    _, function = function_by_handler(template, handler)
    return {layer["Ref"] for layer in function.get("Layers", [])}


def test_triton_layer_is_on_the_functions_that_predict_online_only(full_app: Synthesized) -> None:
    api = full_app.template("api")
    (triton,) = _layer_ids(api, TRITON_LAYER)
    (core,) = _layer_ids(api, "sluice core dependencies")
    (monitor,) = _layer_ids(api, MONITOR_LAYER)  # the default runtime has DataSketches
    for handler in ("api", "shadow", "websocket"):
        assert _layers_of(api, f"sluice.handlers.{handler}.handler") == {core, triton, monitor}, handler
    for handler in CHECKING:
        assert _layers_of(api, f"sluice.handlers.{handler}.handler") == {core, monitor}, handler
    assert _layers_of(api, "sluice.handlers.authorizer.handler") == {core}

    streams = full_app.template("streams")
    (stream_triton,) = _layer_ids(streams, TRITON_LAYER)
    stream_functions = streams.find_resources("AWS::Lambda::Function").values()
    scorers = [f["Properties"] for f in stream_functions if f["Properties"].get("Layers")]
    assert len(scorers) == len(full_app.config.streams)
    for function in scorers:
        assert {"Ref": stream_triton} in function["Layers"]

    # The batch functions are near Lambda's unzipped limit: core and batch layers only.
    batch = full_app.template("batch")
    assert _layer_ids(batch, TRITON_LAYER) == set()
    for function in batch.find_resources("AWS::Lambda::Function").values():
        layers = function["Properties"].get("Layers", [])
        assert all("Triton" not in layer["Ref"] for layer in layers)


def test_size_check_counts_the_triton_layer(tmp_path: Path) -> None:
    """Each function's code plus all its layers, the triton layer included, is checked."""
    from aws_cdk import App, Stack
    from infra.constructs.python_layer import MB, UNZIPPED_LIMIT_BYTES

    context = cdk_context()
    context["aws:cdk:bundling-stacks"] = ["Fn"]  # the function's code; the layers are sized here
    app = App(context=context, outdir=str(tmp_path / "cdk.out"))
    platform = _platform()
    layers_stack = Stack(app, "Layers")
    core = platform.layer(layers_stack, "Core", name="core", description="core")
    triton = platform.layer(layers_stack, "Triton", name="triton", description="triton")
    core.unzipped_bytes = UNZIPPED_LIMIT_BYTES - 5 * MB
    triton.unzipped_bytes = 12 * MB
    function_stack = Stack(app, "Fn")
    # The core layer alone (and the code, a few MB) fits ...
    api_function(function_stack, "CoreOnly", name="core-only", description="core", platform=platform, layers=[core])
    # ... core and triton do not, and the message names the triton layer.
    with pytest.raises(ValueError, match=r"triton 12\.0 MB"):
        api_function(
            function_stack, "WithTriton", name="with-triton", description="core and triton", platform=platform, layers=[core, triton]
        )


@pytest.mark.slow
def test_triton_layer_really_builds_small_without_what_core_carries(tmp_path: Path) -> None:
    from infra.constructs.python_layer import MB, staged_path

    layer = _built_for_real(tmp_path, "Triton", "triton")
    assert layer.unzipped_bytes is not None
    assert 2 * MB < layer.unzipped_bytes < 20 * MB
    site = staged_path(layer.layer) / "python"
    for package in ("aiohttp", "aiohappyeyeballs", "aiosignal", "attr", "frozenlist", "multidict", "propcache", "yarl"):
        assert (site / package).is_dir(), package
    assert list(site.glob("aiohttp/*.cpython-314-x86_64-linux-gnu.so"))
    # The core layer carries these (anyio needs idna, pydantic typing_extensions).
    assert not (site / "idna").exists()
    assert not list(site.glob("typing_extensions*"))
    assert not list(site.glob("bin/*"))


@pytest.mark.parametrize("config", ["default", "full"])
def test_with_the_default_runtime_the_functions_that_profile_or_check_drift_get_datasketches(
    config: str, request: pytest.FixtureRequest
) -> None:
    """What `cdk deploy --all` ships (and the full config, on the same default runtime): the
    monitor layer on every function that profiles or checks, on no other, and no warning."""

    app: Synthesized = request.getfixturevalue(f"{config}_app")
    assert app.config.functions.python == "3.13"
    api = app.template("api")
    (monitor,) = _layer_ids(api, MONITOR_LAYER)
    functions = {
        str(f["Properties"]["Handler"]).split(".")[2]: {layer["Ref"] for layer in f["Properties"].get("Layers", [])}
        for f in api.find_resources("AWS::Lambda::Function").values()
        if str(f["Properties"].get("Handler", "")).startswith("sluice.handlers.")
    }
    expected = {*PROFILING, *CHECKING} - (set() if app.config.websocket.enabled else {"websocket"})
    assert {name for name, layers in functions.items() if monitor in layers} == expected
    assert {"authorizer", "registry_events"} <= set(functions)  # and none of these
    if "streams" in app.stacks:
        streams = app.template("streams")
        (stream_monitor,) = _layer_ids(streams, MONITOR_LAYER)
        scorers = [f["Properties"] for f in streams.find_resources("AWS::Lambda::Function").values() if f["Properties"].get("Layers")]
        assert scorers and all({"Ref": stream_monitor} in f["Layers"] for f in scorers)
    # The batch functions profile nothing, and are near Lambda's unzipped limit.
    assert _layer_ids(app.template("batch"), MONITOR_LAYER) == set()
    for component in app.stacks:
        assert not [w for w in app.warnings(component) if NO_SKETCHES in w], component
