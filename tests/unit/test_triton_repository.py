"""Triton repositories: config.pbtxt from a signature, the two flavours, model.tar.gz, and
checking a user's own archive."""

from __future__ import annotations

import importlib.util
import io
import tarfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.domain import ModelVersion
from sluice.domain.errors import InvalidInput
from sluice.domain.signature import Signature, TensorSpec
from sluice.endpoints.repository import (
    PYTHON_MODEL,
    TritonOptions,
    build_model,
    build_repository,
    model_config,
    tarball_bytes,
)
from sluice.endpoints.repository_check import DEFAULT_MODEL_ENV, validate_repository_tarball
from sluice.services.models import read_signature
from sluice.storage.folder import FolderStore
from tests.conftest import MODELS
from tests.models import relu_model

if TYPE_CHECKING:
    from collections.abc import Callable

CLASSIFIER = Signature(
    inputs=(TensorSpec("input", "FP32", (-1, 4)),),
    outputs=(
        TensorSpec("label", "BYTES", (-1,), role="label"),
        TensorSpec("probabilities", "FP32", (-1, 3), role="probabilities"),
    ),
)
FIXED = Signature(inputs=(TensorSpec("image", "FP16", (1, 3, 8, 8)),), outputs=(TensorSpec("out", "FP16", (1, 10)),))


@pytest.fixture(scope="module")
def parse_config() -> Callable[[str], Any]:
    """Triton's own ModelConfig message, from tritonclient's generated module, to parse with."""
    import tritonclient

    path = Path(tritonclient.__file__).parent / "grpc" / "model_config_pb2.py"
    if not path.exists():
        pytest.skip("tritonclient ships no model_config_pb2")
    spec = importlib.util.spec_from_file_location("triton_model_config_pb2", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    from google.protobuf import text_format

    return lambda text: text_format.Parse(text, module.ModelConfig())


def test_sagemaker_config_is_the_onnxruntime_container_config(parse_config: Callable[[str], Any]) -> None:
    options = TritonOptions(max_batch_size=32, preferred_batch_sizes=(8, 16), max_queue_delay_us=250, instance_count=2, tensorrt_fp16=True)
    config = parse_config(model_config("iris", CLASSIFIER, flavour="sagemaker", options=options))
    assert (config.name, config.backend, config.max_batch_size) == ("iris", "onnxruntime", 32)
    assert config.default_model_filename == "model.onnx"
    assert [(i.name, list(i.dims)) for i in config.input] == [("input", [4])]
    label, probabilities = config.output
    assert list(label.dims) == [1] and label.HasField("reshape") and list(label.reshape.shape) == []
    assert label.data_type == 13  # TYPE_STRING
    assert list(probabilities.dims) == [3] and not probabilities.HasField("reshape")
    assert list(config.dynamic_batching.preferred_batch_size) == [8, 16]
    assert config.dynamic_batching.max_queue_delay_microseconds == 250
    (group,) = config.instance_group
    assert (group.kind, group.count) == (1, 2)  # KIND_GPU
    (accelerator,) = config.optimization.execution_accelerators.gpu_execution_accelerator
    assert accelerator.name == "tensorrt" and dict(accelerator.parameters) == {"precision_mode": "FP16"}


def test_local_config_runs_the_python_backend_on_cpu(parse_config: Callable[[str], Any]) -> None:
    text = model_config("iris", CLASSIFIER, flavour="local", options=TritonOptions(tensorrt_fp16=True))
    config = parse_config(text)
    assert config.backend == "python"
    assert config.max_batch_size == 64  # the default when every tensor batches
    assert config.instance_group[0].kind == 2  # KIND_CPU
    assert not config.HasField("optimization")  # no TensorRT on the CPU twin
    assert config.dynamic_batching.max_queue_delay_microseconds == 100


def test_fixed_shapes_do_not_batch(parse_config: Callable[[str], Any]) -> None:
    config = parse_config(model_config("net", FIXED, flavour="sagemaker", options=TritonOptions()))
    assert config.max_batch_size == 0
    assert list(config.input[0].dims) == [1, 3, 8, 8]
    assert not config.HasField("dynamic_batching")
    with pytest.raises(InvalidInput, match="dynamic first axis"):
        model_config("net", FIXED, flavour="sagemaker", options=TritonOptions(max_batch_size=8))


def test_odd_names_are_quoted_for_protobuf_text(parse_config: Callable[[str], Any]) -> None:
    signature = Signature(inputs=(TensorSpec('in"put\\é', "FP32", (-1, 2)),), outputs=(TensorSpec("dense/BiasAdd:0", "FP32", (-1, 1)),))
    config = parse_config(model_config("m", signature, flavour="sagemaker", options=TritonOptions()))
    assert config.input[0].name == 'in"put\\é'
    assert config.output[0].name == "dense/BiasAdd:0"


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"max_batch_size": -1}, "max_batch_size"),
        ({"instance_count": 0}, "instance_count"),
        ({"preferred_batch_sizes": (0,)}, "preferred_batch_sizes"),
        ({"instance_kind": "KIND_TPU"}, "instance_kind"),
        # Wider than Triton's model_config.proto holds (int32; the delay uint64): a config
        # Triton could not parse.
        ({"max_batch_size": 2**31}, "max_batch_size"),
        ({"instance_count": 2**31}, "instance_count"),
        ({"preferred_batch_sizes": (8, 2**31)}, "preferred_batch_sizes"),
        ({"max_queue_delay_us": 2**64}, "max_queue_delay_us"),
    ],
)
def test_bad_options_are_refused(options: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidInput) as err:
        TritonOptions(**options)
    assert err.value.field == field


_WIDE = st.one_of(st.integers(-(2**65), 2**65), st.sampled_from([-1, 0, 1, 2**31 - 1, 2**31, 2**32, 2**63, 2**64 - 1, 2**64]))


@settings(max_examples=200, deadline=None)
@given(
    max_batch=st.one_of(st.none(), _WIDE),
    preferred=st.lists(_WIDE, max_size=3),
    delay=_WIDE,
    count=_WIDE,
    flavour=st.sampled_from(["sagemaker", "local"]),
)
def test_any_options_accepted_make_a_config_triton_parses(
    parse_config: Callable[[str], Any], max_batch: int | None, preferred: list[int], delay: int, count: int, flavour: str
) -> None:
    """Whatever TritonOptions accepts ends up in a config.pbtxt Triton's own parser reads with
    the same numbers; the rest is refused naming its field, never written."""
    try:
        options = TritonOptions(max_batch_size=max_batch, preferred_batch_sizes=tuple(preferred), max_queue_delay_us=delay, instance_count=count)
        text = model_config("m", CLASSIFIER, flavour=flavour, options=options)  # type: ignore[arg-type]
    except InvalidInput as exc:
        assert exc.field in {"max_batch_size", "preferred_batch_sizes", "max_queue_delay_us", "instance_count"}
        return
    config = parse_config(text)
    assert config.instance_group[0].count == count
    if max_batch is not None:
        assert config.max_batch_size == max_batch
    if config.max_batch_size > 0:
        assert config.dynamic_batching.max_queue_delay_microseconds == delay
        assert list(config.dynamic_batching.preferred_batch_size) == sorted(set(preferred))


def test_preferred_batch_sizes_fit_under_max_batch_size() -> None:
    with pytest.raises(InvalidInput, match="exceeds max_batch_size"):
        model_config("m", CLASSIFIER, flavour="sagemaker", options=TritonOptions(max_batch_size=8, preferred_batch_sizes=(16,)))


def test_local_flavour_writes_model_onnx_and_model_py(tmp_path: Path) -> None:
    data = (MODELS / "diabetes_mlp.onnx").read_bytes()
    built = build_model(tmp_path, "diabetes", 3, read_signature(data), data, flavour="local")
    assert built.path == tmp_path / "diabetes" and built.max_batch_size == 64
    assert (tmp_path / "diabetes" / "config.pbtxt").read_text() == built.config
    assert (tmp_path / "diabetes" / "3" / "model.onnx").read_bytes() == data
    source = (tmp_path / "diabetes" / "3" / "model.py").read_text()
    assert source == PYTHON_MODEL
    compile(source, "model.py", "exec")


def test_a_local_repository_and_its_backends_are_owner_only(tmp_path: Path) -> None:
    """What a local endpoint puts under the home: folders 0700, files 0600, the python backend's
    stub copied executable (0700) and never with its source's mode, whatever the umask."""
    import os
    import stat

    from sluice.endpoints.triton_env import TritonEnv, prepare_backends

    wheel = tmp_path / "wheel"
    (wheel / "python").mkdir(parents=True)
    for name, mode in (("libtriton_python.so", 0o755), ("triton_python_backend_utils.py", 0o644), ("stub", 0o755)):
        (wheel / "python" / name).write_bytes(b"x")
        (wheel / "python" / name).chmod(mode)
    env = TritonEnv(wheel, wheel / "tritonserver", wheel, wheel, "3.11", wheel / "python", wheel / "python" / "stub")
    data = (MODELS / "diabetes_mlp.onnx").read_bytes()
    home = tmp_path / "home"
    previous = os.umask(0)
    try:
        build_model(home / "endpoints" / "ep" / "blue" / "repository", "diabetes", 1, read_signature(data), data, flavour="local")
        prepare_backends(env, home / "triton" / "backends")
    finally:
        os.umask(previous)
    modes = {p.relative_to(home).as_posix(): stat.S_IMODE(p.stat().st_mode) for p in [home, *home.rglob("*")]}
    executable = {"triton/backends/python/triton_python_backend_stub", "triton/backends/python/libtriton_python.so", "triton/backends/python/stub"}
    wanted = {name: 0o700 if name in executable or (home / name).is_dir() else 0o600 for name in modes}
    assert modes == wanted
    assert "endpoints/ep/blue/repository/diabetes/1/model.py" in modes and "triton/backends/python/.source" in modes


def test_zipmap_outputs_are_refused_by_name(tmp_path: Path) -> None:
    data = (MODELS / "iris.onnx").read_bytes()
    with pytest.raises(InvalidInput) as err:
        build_model(tmp_path, "iris", 1, read_signature(data), data, flavour="sagemaker")
    assert err.value.field == "outputs.output_probability"
    assert "zipmap=False" in err.value.message
    assert not (tmp_path / "iris").exists()


def test_a_registered_version_builds_from_the_store(tmp_path: Path) -> None:
    data = (MODELS / "diabetes_mlp.onnx").read_bytes()
    store = FolderStore(tmp_path / "store")
    ref = store.put("acme", data, suffix=".onnx")
    version = ModelVersion("acme", "diabetes", 2, "onnx", ref.uri, ref.sha256, ref.size_bytes, read_signature(data))
    built = build_repository(tmp_path / "repo", version, store, flavour="sagemaker")
    assert (built.name, built.version) == ("diabetes", 2)
    assert (tmp_path / "repo" / "diabetes" / "2" / "model.onnx").exists()
    assert not (tmp_path / "repo" / "diabetes" / "2" / "model.py").exists()


def test_tarball_has_the_model_folders_at_its_top_and_is_reproducible(tmp_path: Path) -> None:
    data = (MODELS / "diabetes_mlp.onnx").read_bytes()
    build_model(tmp_path, "diabetes", 1, read_signature(data), data, flavour="sagemaker")
    archive = tarball_bytes(tmp_path)
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        names = tar.getnames()
    assert names == ["diabetes", "diabetes/1", "diabetes/1/model.onnx", "diabetes/config.pbtxt"]
    assert tarball_bytes(tmp_path) == archive
    assert archive[4:8] == bytes(4)  # gzip's time stamp: none, so the bytes do not depend on the clock's second
    check = validate_repository_tarball(archive)
    assert check.models == ("diabetes",)
    assert check.environment == {DEFAULT_MODEL_ENV: "diabetes"}


# a user's own archive --------------------------------------------------------------------
def _archive(files: dict[str, bytes | None], *, links: tuple[str, ...] = ()) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, content in files.items():
            info = tarfile.TarInfo(name)
            if content is None:
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = len(content)
                tar.addfile(info, io.BytesIO(content))
        for name in links:
            info = tarfile.TarInfo(name)
            info.type = tarfile.SYMTYPE
            info.linkname = "/etc/passwd"
            tar.addfile(info)
    return buffer.getvalue()


CONFIG = b'name: "a"\nbackend: "onnxruntime"\nmax_batch_size: 8\ninput [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]\n'


def test_a_two_model_repository_needs_its_default_named() -> None:
    archive = _archive(
        {
            "./a/config.pbtxt": CONFIG,
            "./a/1/model.onnx": b"onnx",
            "./b/config.pbtxt": b"# ensemble\nplatform: \"ensemble\"\n",
            "./b/1": None,
        }
    )
    with pytest.raises(InvalidInput, match=DEFAULT_MODEL_ENV):
        validate_repository_tarball(archive)
    assert validate_repository_tarball(archive, "b").default_model == "b"
    with pytest.raises(InvalidInput, match="'c' is not in the repository"):
        validate_repository_tarball(archive, "c")


@pytest.mark.parametrize(
    ("files", "message"),
    [
        ({"/a/config.pbtxt": CONFIG, "/a/1/model.onnx": b"x"}, "absolute"),
        ({"a/config.pbtxt": CONFIG, "a/1/../../../etc/x": b"x"}, "'..'"),
        ({"config.pbtxt": CONFIG, "1/model.onnx": b"x"}, "belongs in <model>/config.pbtxt"),
        ({"repo/a/config.pbtxt": CONFIG, "repo/a/1/model.onnx": b"x"}, "extra folder"),
        ({"a/config.pbtxt": CONFIG, "a/model.onnx": b"x"}, "no numbered version folder"),
        ({"a/config.pbtxt": CONFIG.replace(b'"a"', b'"other"'), "a/1/model.onnx": b"x"}, "names the model 'other'"),
        ({"a/config.pbtxt": CONFIG.replace(b'"a"', b"'other'"), "a/1/model.onnx": b"x"}, "names the model 'other'"),
        ({"a/config.pbtxt": CONFIG, "a/01/model.onnx": b"x"}, "leading zero"),
        ({"a/config.pbtxt": CONFIG, "a/1/model.onnx": b"x", "README.md": b"hi"}, "file at the top"),
        ({}, "empty"),
    ],
    ids=["absolute", "dotdot", "top-config", "wrapped", "no-version", "name-mismatch", "single-quoted-mismatch",
         "leading-zero", "top-file", "empty"],
)
def test_bad_layouts_are_refused_with_the_reason(files: dict[str, bytes], message: str) -> None:
    with pytest.raises(InvalidInput, match=message):
        validate_repository_tarball(_archive(files))


@settings(max_examples=60, deadline=None)
@given(st.text(st.sampled_from("0123456789+-_ a"), min_size=1, max_size=6))
def test_a_version_folder_counts_only_as_triton_reads_one(folder: str) -> None:
    """Triton loads `<model>/<n>/` only where n is written as a plain integer: it ignores `01`."""
    archive = _archive({"a/config.pbtxt": CONFIG.replace(b'"a"', b"'a'"), f"a/{folder}/model.onnx": b"x"})
    if folder.isdigit() and str(int(folder)) == folder:
        assert validate_repository_tarball(archive).models == ("a",)
    else:
        with pytest.raises(InvalidInput, match="no numbered version folder"):
            validate_repository_tarball(archive)


def test_links_are_refused() -> None:
    archive = _archive({"a/config.pbtxt": CONFIG, "a/1/model.onnx": b"x"}, links=("a/1/secret",))
    with pytest.raises(InvalidInput, match="is a link"):
        validate_repository_tarball(archive)


def test_not_a_tarball_is_refused() -> None:
    with pytest.raises(InvalidInput, match="not a tar archive"):
        validate_repository_tarball(b"PK\x03\x04 a zip file")


def test_nested_names_in_config_do_not_count_as_the_model_name() -> None:
    config = b'# name: "nope"\ninput [ { name: "x" data_type: TYPE_FP32 dims: [ 4 ] } ]\nname: "a"\n'
    check = validate_repository_tarball(_archive({"a/config.pbtxt": config, "a/1/model.onnx": b"x"}))
    assert check.default_model == "a"


# scalars and names as Triton reads them ----------------------------------------------------
def test_a_scalar_tensor_is_refused_naming_it_not_declared_without_dims() -> None:
    """Triton requires `dims` on every tensor, so a rank-0 one cannot be declared: the config
    sluice wrote (`dims: [ ]`) was one the container refused to load."""
    signature = read_signature(relu_model([]))  # x: FP32 [], y: FP32 []
    with pytest.raises(InvalidInput) as err:
        model_config("scalar", signature, flavour="sagemaker", options=TritonOptions())
    assert err.value.field == "inputs.x"
    assert "scalar" in err.value.message and "[1]" in err.value.message
    only_out = Signature(inputs=(TensorSpec("x", "FP32", (1,)),), outputs=(TensorSpec("y", "FP32", ()),))
    with pytest.raises(InvalidInput) as err:
        model_config("scalar", only_out, flavour="local", options=TritonOptions())
    assert err.value.field == "outputs.y"


@pytest.mark.parametrize("config", [
    b'name: "a"\ninput [ { name: "x" data_type: TYPE_FP32 dims: [ ] } ]\n',
    b'name: "a"\noutput { name: "y", data_type: TYPE_FP32, dims: [] }\n',
])  # fmt: skip
def test_the_checker_refuses_a_tensor_without_dims(config: bytes) -> None:
    with pytest.raises(InvalidInput) as err:
        validate_repository_tarball(_archive({"a/config.pbtxt": config, "a/1/model.onnx": b"x"}))
    assert err.value.field in ("inputs.x", "outputs.y") and "[1]" in err.value.message


@pytest.mark.parametrize("name", ["modèle", 'a"b', "a#b", "a'b", "a'#\"d", "模型"])
def test_the_checker_accepts_what_the_generator_writes(tmp_path: Path, parse_config: Callable[[str], Any], name: str) -> None:
    """Names the generator escapes (non-ASCII as octal bytes, a quote) or that hold a `#`:
    Triton reads the folder's name back, and so does the checker."""
    data = (MODELS / "diabetes_mlp.onnx").read_bytes()
    build_model(tmp_path, name, 1, read_signature(data), data, flavour="sagemaker")
    assert parse_config((tmp_path / name / "config.pbtxt").read_text()).name == name
    assert validate_repository_tarball(tarball_bytes(tmp_path)).models == (name,)


_NAMES = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="/\\\0"), min_size=1, max_size=12).filter(
    lambda n: n not in (".", "..")
)
_TENSOR_NAMES = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"), min_size=1, max_size=8)


@settings(max_examples=80, deadline=None)
@given(name=_NAMES, tensor=_TENSOR_NAMES)
def test_any_repository_the_generator_writes_passes_the_checker(parse_config: Callable[[str], Any], name: str, tensor: str) -> None:
    """The model and tensor names, whatever their characters: Triton's own parser and the
    checker read the same name from the config the generator writes."""
    signature = Signature(inputs=(TensorSpec(tensor, "FP32", (-1, 2)),), outputs=(TensorSpec("y", "FP32", (-1, 1)),))
    text = model_config(name, signature, flavour="sagemaker", options=TritonOptions())
    config = parse_config(text)
    assert (config.name, config.input[0].name) == (name, tensor)
    archive = _archive({f"{name}/config.pbtxt": text.encode(), f"{name}/1/model.onnx": b"x"})
    assert validate_repository_tarball(archive).models == (name,)


@pytest.mark.parametrize(("config", "name"), [
    (b'name: "a#b" # name: "c"\n', "a#b"),
    (b"name: 'a\\'#' # '\n", "a'#"),
    (b'name: "m\\303\\250" input [ { name: "x\\"#" dims: [ 1 ] } ]', "m\u00e8"),
    (b'name: "a" "b"\n', "ab"),  # adjacent strings are one
    (b'name: "\\x61\\u00e9"\n', "a\u00e9"),
])  # fmt: skip
def test_the_checker_reads_the_name_as_protobuf_text_format_does(parse_config: Callable[[str], Any], config: bytes, name: str) -> None:
    assert parse_config(config.decode()).name == name
    assert validate_repository_tarball(_archive({f"{name}/config.pbtxt": config, f"{name}/1/model.onnx": b"x"})).models == (name,)


def test_a_config_that_is_not_text_format_is_refused() -> None:
    with pytest.raises(InvalidInput, match="not protobuf text format"):
        validate_repository_tarball(_archive({"a/config.pbtxt": b'name: "a\ninput [', "a/1/model.onnx": b"x"}))
