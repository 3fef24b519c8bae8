"""Uploads below the API: content types as stored, the local form's policy, the stores (a
folder; S3 in moto, ranged reads included), reading a body as a route's inputs, and the
sagemaker runtime's hand-off of an upload as it lies (its binary header checked first)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import boto3
import numpy as np
import pytest
from botocore.stub import ANY, Stubber
from hypothesis import given, settings
from hypothesis import strategies as st
from moto import mock_aws

from sluice.codecs.triton import encode_request
from sluice.domain import ModelVersion
from sluice.domain.errors import Accepted, BadRequest, Forbidden, InvalidInput, PayloadTooLarge
from sluice.domain.requests import ArrayInputs, RowInputs, TensorInputs
from sluice.domain.signature import Signature, TensorSpec
from sluice.domain.uploads import Upload
from sluice.inference.uploads import inputs_of_upload, stored_type
from sluice.runtimes.sagemaker import SageMakerRuntime
from sluice.storage.results import S3Results
from sluice.storage.s3 import S3Store
from sluice.storage.uploads import FolderUploads, S3Uploads

SIGNATURE = Signature(inputs=(TensorSpec("x", "FP32", (-1, 4)),), outputs=(TensorSpec("y", "FP32", (-1, 4)),))
BINARY = "application/vnd.sagemaker-triton.binary+json"


def test_content_types_are_stored_as_sagemaker_triton_takes_them() -> None:
    assert stored_type("application/json", None) == ("application/json", None)
    assert stored_type("application/octet-stream", 120) == (f"{BINARY};json-header-size=120", 120)
    assert stored_type(f"{BINARY};json-header-size=64", None) == (f"{BINARY};json-header-size=64", 64)
    for asked, size, field in [
        ("text/csv", None, "content_type"),
        ("application/octet-stream", None, "header_size"),
        ("application/json", 12, "header_size"),
        (f"{BINARY};json-header-size=64", 65, "content_type"),
        (BINARY, None, "content_type"),
    ]:
        with pytest.raises(BadRequest) as caught:
            stored_type(asked, size)
        assert caught.value.field == field, asked


# the local form -------------------------------------------------------------------------------
def test_the_local_form_is_checked_as_s3_checks_a_post_policy(tmp_path: Path) -> None:
    now = [1_800_000_000.0]
    store = FolderUploads(tmp_path, clock=lambda: now[0])
    rid = "a" * 32
    form = store.form("acme", rid, content_type="application/json", max_bytes=8, expires_in=900, base_url="http://h:1/")
    assert form.url == f"http://h:1/api/v1/uploads/{rid}/body" and form.method == "POST"
    path, least, most = store.check_form(rid, form.fields)
    assert (least, most) == (1, 8) and path == tmp_path / "uploads/tenants/acme" / rid / "body"
    assert (tmp_path / "uploads/.signing-key").stat().st_mode & 0o777 == 0o600
    for changed in ({"Content-Type": "text/plain"}, {"key": f"uploads/tenants/globex/{rid}/body"}, {"x-sluice-signature": "0" * 64}):
        with pytest.raises(Forbidden):
            store.check_form(rid, {**form.fields, **changed})
    with pytest.raises(Forbidden, match="key"):
        store.check_form("b" * 32, form.fields)
    # another process serving the same home reads the same key
    assert FolderUploads(tmp_path, clock=lambda: now[0]).check_form(rid, form.fields)[0] == path
    now[0] += 901
    with pytest.raises(Forbidden, match="expired"):
        store.check_form(rid, form.fields)


def test_a_body_is_in_place_only_once_whole_and_within_bounds(tmp_path: Path) -> None:
    store = FolderUploads(tmp_path)
    rid = "c" * 32
    path = tmp_path / "uploads/tenants/acme" / rid / "body"
    with pytest.raises(PayloadTooLarge), store.writer(path, 1, 4) as sink:
        sink.write(b"12345")
    with store.writer(path, 1, 4) as sink:
        sink.write(b"12")  # never committed: a client that went away
    assert not path.exists() and list(path.parent.iterdir()) == []
    with store.writer(path, 1, 4) as sink:
        sink.write(b"1234")
        sink.commit()
    assert store.size("acme", rid) == 4 and store.read("acme", rid, 1, 2) == b"23" and store.read("acme", rid, 2) == b"34"
    with pytest.raises(BadRequest):
        store.record("acme", "../../x")


def test_two_posts_of_one_form_at_once_keep_the_last_whole_body(tmp_path: Path) -> None:
    """A retry of an upload's post while the first still streams, both fed from one thread (as
    a server's worker pool hands its threads out): neither fails, and the body kept is the last
    one whole, as S3 keeps the last whole object."""
    from sluice.api.upload_post import UploadPost
    from tests.support import FORM_BOUNDARY, upload_form

    store = FolderUploads(tmp_path)
    rid, size = "d" * 32, 64 * 1024
    form = store.form("acme", rid, content_type="application/json", max_bytes=size, expires_in=900, base_url="http://h")
    first_body, second_body = b"A" * size, b"B" * (size // 2)
    first, second = upload_form(form.fields, first_body), upload_form(form.fields, second_body)
    kind = f"multipart/form-data; boundary={FORM_BOUNDARY}"
    a, b = (UploadPost(store, rid, kind, declared=None, max_upload=size) for _ in range(2))
    cut = len(first) // 2
    try:
        a.feed(first[:cut])  # the first post is half way through its file
        b.feed(second)  # the second arrives whole, and is put in place
        assert b.complete
        assert (tmp_path / "uploads/tenants/acme" / rid / "body").read_bytes() == second_body
        a.feed(first[cut:])  # then the first one's rest
        assert a.complete
    finally:
        a.close()
        b.close()
    folder = tmp_path / "uploads/tenants/acme" / rid
    assert (folder / "body").read_bytes() == first_body
    assert (folder / "body").stat().st_mode & 0o777 == 0o600
    assert [p.name for p in folder.iterdir()] == ["body"]  # no partial file left behind


# S3 ---------------------------------------------------------------------------------------------
def test_s3_uploads_keep_records_and_read_ranges() -> None:
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="art")
        store = S3Uploads(S3Store("art", "sluice", client=s3, server_side_encryption="AES256", region="us-east-1"))
        rid = "d" * 32
        assert store.record("acme", rid) is None and store.size("acme", rid) is None
        store.put_record("acme", rid, b'{"id": 1}')
        assert store.record("acme", rid) == b'{"id": 1}'
        key = f"sluice/uploads/tenants/acme/{rid}/body"
        assert store.uri("acme", rid) == f"s3://art/{key}"
        s3.put_object(Bucket="art", Key=key, Body=b"0123456789")
        assert store.size("acme", rid) == 10 and store.read("acme", rid, 2, 3) == b"234" and store.read("acme", rid) == b"0123456789"
        form = store.form("acme", rid, content_type="application/json", max_bytes=10, expires_in=600, base_url="")
        assert form.fields["key"] == key and form.fields["x-amz-server-side-encryption"] == "AES256"
        assert s3.head_object(Bucket="art", Key=f"sluice/uploads/tenants/acme/{rid}/record.json")["ServerSideEncryption"] == "AES256"


# a body as a route's inputs -----------------------------------------------------------------------
def _upload(data: bytes, header_size: int | None = None, content_type: str = "application/json") -> Upload:
    return Upload("e" * 32, "acme", "d", content_type, len(data), "file:///x", header_size, reader=lambda s, n: data[s : None if n is None else s + n])


def test_an_upload_reads_as_the_body_of_the_route_that_names_it() -> None:
    plain = json.dumps({"batch": [[1, 2, 3, 4]], "deployment": "d"}).encode()  # a whole body, naming its own deployment
    inputs, outputs, bools = inputs_of_upload(plain, _upload(plain), "plain")
    assert inputs == RowInputs(batch=[[1, 2, 3, 4]]) and outputs is None and not bools
    v2 = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "data": [1, 2, 3, 4]}], "outputs": [{"name": "y"}]}).encode()
    inputs, outputs, _ = inputs_of_upload(v2, _upload(v2), "v2")
    assert isinstance(inputs, TensorInputs) and inputs.tensors[0].shape == (1, 4) and outputs == ("y",)
    encoded = encode_request({"x": np.ones((2, 4), np.float32)}, binary_inputs=True)
    inputs, _, _ = inputs_of_upload(encoded.body, _upload(encoded.body, encoded.header_size), "v2")
    assert isinstance(inputs, ArrayInputs) and inputs.arrays["x"].shape == (2, 4)
    refused = [(b'{"batch": [[1]], "deployment": "other"}', "plain"), (b'{"batch": [[1]], "version": 2}', "plain")]
    for data, form in [(b"nope", "plain"), (b'{"inputs": [], "batch": []}', "plain"), (b"{}", "v2"), *refused]:
        with pytest.raises(BadRequest) as caught:
            inputs_of_upload(data, _upload(data), form)
        assert caught.value.field == "upload_id"
    with pytest.raises(BadRequest):
        inputs_of_upload(encoded.body, _upload(encoded.body, encoded.header_size), "plain")


# the runtime's hand-off ---------------------------------------------------------------------------
def _version(**config: Any) -> ModelVersion:
    return ModelVersion("acme", "m", 1, "sagemaker", "s3://b/m.tar.gz", "0" * 64, 1, SIGNATURE, config={"endpoint_name": "m-ep", **config})


def _binary(header: dict[str, Any], tail: bytes) -> tuple[bytes, int]:
    raw = json.dumps(header).encode()
    return raw + tail, len(raw)


def test_an_upload_is_handed_to_invoke_endpoint_async_as_it_lies() -> None:
    with mock_aws():
        s3 = boto3.client("s3", region_name="us-east-1")
        s3.create_bucket(Bucket="art")
        results = S3Results(S3Store("art", "sluice", client=s3, server_side_encryption="AES256"))
        sm = boto3.client("sagemaker-runtime", region_name="us-east-1")
        stub = Stubber(sm)
        stub.activate()
        runtime = SageMakerRuntime(sm, results=results)
        data, size = _binary({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "parameters": {"binary_data_size": 16}}]}, b"\0" * 16)
        upload = _upload(data, size, f"{BINARY};json-header-size={size}")
        upload = Upload(upload.id, "acme", "d", upload.content_type, len(data), "s3://art/sluice/uploads/tenants/acme/x/body", size, reader=upload.reader)
        stub.add_response(
            "invoke_endpoint_async",
            {"InferenceId": "i", "OutputLocation": "s3://art/sluice/results/tenants/acme/sagemaker/i.out"},
            {"EndpointName": "m-ep", "InputLocation": upload.uri, "ContentType": upload.content_type, "Accept": "application/json", "InferenceId": ANY, "InvocationTimeoutSeconds": 900},
        )
        with pytest.raises(Accepted) as caught:
            asyncio.run(runtime.submit_upload(_version(invocation="async"), upload))
        stub.assert_no_pending_responses()
        record = json.loads(results.read("acme", results.uri("acme", caught.value.result_id, "record.json"))[0])  # type: ignore[index]
        assert record["input"] == upload.uri and record["input_bytes"] == len(data) and record["upload"] == upload.id
        assert [o["Key"] for o in s3.list_objects_v2(Bucket="art")["Contents"]] == [f"sluice/results/tenants/acme/{caught.value.result_id}/record.json"]
        # a synchronous endpoint: nothing handed off, the caller reads and scores it
        assert asyncio.run(runtime.submit_upload(_version(), upload)) is None


@pytest.mark.parametrize(
    ("header", "tail", "match"),
    [
        ({"inputs": [{"name": "z", "datatype": "FP32", "shape": [1, 4], "parameters": {"binary_data_size": 16}}]}, 16, "input 'z'"),
        ({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "parameters": {"binary_data_size": 16}}]}, 12, "add up"),
        ({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "parameters": {"binary_data_size": 16}}], "parameters": {"binary_data_output": True}}, 16, "JSON"),
        ({"inputs": {"x": 1}}, 0, "inputs list"),
        ({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "parameters": ["binary_data_size", 16]}]}, 16, "input 'x' parameters that are not an object"),
        ({"inputs": [{"name": ["x"], "datatype": "FP32", "shape": [1, 4]}]}, 16, "name is not a string"),
        ({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "parameters": {"binary_data_size": "16"}}]}, 16, "not a whole number"),
        ({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "parameters": {"binary_data_size": 16}}], "outputs": 3}, 16, "outputs that are not a list"),
        ({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 4], "parameters": {"binary_data_size": 16}}], "parameters": "binary"}, 16, "request parameters"),
    ],
)
def test_a_binary_uploads_header_is_checked_before_it_is_handed_on(header: dict[str, Any], tail: int, match: str, tmp_path: Path) -> None:
    from sluice.storage.results import FolderResults

    data, size = _binary(header, b"\0" * tail)
    runtime = SageMakerRuntime(object(), results=FolderResults(tmp_path))
    with pytest.raises(InvalidInput, match=match) as caught:
        asyncio.run(runtime.submit_upload(_version(invocation="async"), _upload(data, size, f"{BINARY};json-header-size={size}")))
    assert caught.value.field == "upload_id"


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2, 2**70) | st.floats(allow_nan=False) | st.text(max_size=6),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=10,
)
_SIZES = st.fixed_dictionaries({}, optional={"binary_data_size": st.integers(0, 16) | JSON, "binary_data": JSON})
_TENSOR = st.fixed_dictionaries({}, optional={"name": st.just("x") | JSON, "datatype": st.just("FP32") | JSON, "shape": JSON, "parameters": _SIZES | JSON})
_OUTPUT = st.fixed_dictionaries({}, optional={"name": st.just("y") | JSON, "parameters": _SIZES | JSON})
HEADERS = JSON | st.fixed_dictionaries(
    {"inputs": st.lists(_TENSOR | JSON, max_size=2) | JSON},
    optional={"outputs": st.lists(_OUTPUT | JSON, max_size=2) | JSON, "parameters": st.fixed_dictionaries({}, optional={"binary_data_output": JSON}) | JSON},
)


def _sizes_of(raw: bytes) -> int:
    """The bytes after the header that a well-formed header of this shape says follow it (at
    most a MiB: a header may say 2**70, which no test should try to hold)."""
    try:
        header = json.loads(raw)
    except (ValueError, RecursionError):
        return 0
    inputs = header.get("inputs") if isinstance(header, dict) else None
    params = [i.get("parameters") or {} for i in inputs if isinstance(i, dict)] if isinstance(inputs, list) else []
    sizes = [p.get("binary_data_size") for p in params if isinstance(p, dict)]
    return min(sum(n for n in sizes if type(n) is int and n >= 0), 1 << 20)  # a size past a MiB: a body that falls short


@settings(max_examples=150, deadline=None)
@given(raw=HEADERS.map(lambda h: json.dumps(h).encode()) | st.binary(max_size=12) | st.just(b"[" * 100_000), off=st.sampled_from([0, 0, 0, 1]))
def test_a_binary_uploads_header_of_any_shape_is_bad_input_or_handed_on(raw: bytes, off: int) -> None:
    """Whatever the caller's header holds (any JSON, not JSON, JSON nested deeper than the
    stack), the check before the hand-off accepts it or answers a 4xx naming `upload_id`:
    never a 500 from a member of another shape than a v2 request's."""
    from sluice.domain.errors import SluiceError
    from sluice.runtimes.sagemaker_async import check_upload_header

    data = raw + b"\0" * (_sizes_of(raw) + off)
    try:
        check_upload_header(raw, _upload(data, len(raw), f"{BINARY};json-header-size={len(raw)}"), _version(invocation="async"))
    except SluiceError as exc:
        assert 400 <= exc.status < 500 and exc.field == "upload_id", (exc.status, exc.message)
