"""Settings come in groups, one per reader; each variable is still `SLUICE_` + its field's name."""

from __future__ import annotations

from typing import TYPE_CHECKING, get_origin

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sluice.settings import GROUP_OF, GROUPS, SettingRefused, Settings

if TYPE_CHECKING:
    from pathlib import Path

    from sluice.settings import Group


def test_every_variable_is_read_by_exactly_one_group() -> None:
    assert sum(len(group.model_fields) for group in GROUPS.values()) == len(GROUP_OF)
    assert all(group.model_config["env_prefix"] == "SLUICE_" for group in GROUPS.values())
    assert not set(GROUPS) & set(GROUP_OF), "a group named as a setting: Settings(name=...) could not tell them apart"


def test_a_group_reads_its_variables_and_named_fields_go_to_their_group(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SLUICE_BATCH_CHUNK_ROWS", "7")
    monkeypatch.setenv("SLUICE_STREAMS", '{"*": {"tenant": "acme", "deployment": "iris"}}')
    settings = Settings(mode="local", home=tmp_path, batch_infer_rows=3)
    assert (settings.batch.batch_chunk_rows, settings.batch.batch_infer_rows) == (7, 3)
    assert settings.stream.streams == {"*": {"tenant": "acme", "deployment": "iris"}}
    assert settings.home_path == tmp_path.resolve() and settings.mode == "local"
    with pytest.raises(SettingRefused, match="no setting is called 'batch_rows'"):
        Settings(batch_rows=3)


def test_the_environment_is_read_again_whenever_a_variable_changes(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # Groups read the environment once for each set of SLUICE_* variables: set, changed,
    # spelled in lower case or removed between two builds, each build sees it as it is.
    monkeypatch.setenv("SLUICE_STREAMS", '{"a": {"tenant": "acme", "deployment": "iris"}}')
    first = Settings(mode="local", home=tmp_path)
    monkeypatch.setenv("SLUICE_STREAMS", '{"b": {"tenant": "acme", "deployment": "iris"}}')
    monkeypatch.setenv("sluice_batch_chunk_rows", "9")
    second = Settings(mode="local", home=tmp_path, streams={"c": {"tenant": "acme", "deployment": "iris"}})
    assert list(first.stream.streams) == ["a"] and sorted(second.stream.streams) == ["b", "c"]  # merged, as pydantic-settings merges
    assert (first.batch.batch_chunk_rows, second.batch.batch_chunk_rows, Settings(home=tmp_path).stream.streams.keys() == {"b"}) == (250_000, 9, True)
    monkeypatch.delenv("sluice_batch_chunk_rows")
    assert Settings(mode="local", home=tmp_path).batch.batch_chunk_rows == 250_000
    first.stream.streams["a"]["tenant"] = "changed"  # a build's values are its own
    assert Settings(mode="local", home=tmp_path).stream.streams["b"]["tenant"] == "acme"


def test_replace_changes_a_copy_and_checks_the_group_again(tmp_path: Path) -> None:
    settings = Settings(mode="local", home=tmp_path)
    changed = settings.replace(websocket_rate_limit="3/minute", batch_bucket="bucket")
    assert changed.websocket.websocket_rate_limit == "3/minute" and changed.batch_root_url == "s3://bucket/"
    assert settings.websocket.websocket_rate_limit == "100/second" and settings.jobs.batch_bucket == ""
    assert changed.onnx == settings.onnx and changed.onnx is not settings.onnx
    with pytest.raises(SettingRefused, match="SLUICE_ORCHESTRATOR"):
        settings.replace(orchestrator="somewhere")


@pytest.mark.parametrize(
    ("group", "setting", "good", "bad", "words"),
    [
        ("functions", "function_arns", "arn:aws:lambda:eu-west-1:123456789012:function:enrich", "enrich", "is not a Lambda function ARN"),
        ("lookups", "lookup_sources", "dynamodb:customers", "redis:customers", "is not dynamodb:TABLE, sagemaker:FEATURE_GROUP, feast:FEATURE_VIEW or sqlite:TABLE"),
    ],
)
def test_a_per_tenant_allowlist_names_the_setting_tenant_and_entry_it_refuses(group: str, setting: str, good: str, bad: str, words: str, tmp_path: Path) -> None:
    assert getattr(getattr(Settings(home=tmp_path, **{setting: {"acme": [good]}}), group), setting) == {"acme": [good]}
    with pytest.raises(SettingRefused) as refused:
        Settings(home=tmp_path, **{setting: {"acme": [good], "globex": [good, bad]}})
    assert f"SLUICE_{setting.upper()}: {bad!r} (tenant 'globex') {words}" in str(refused.value)


def test_no_folder_setting_reads_an_empty_value_as_the_current_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    """`SLUICE_HOME=` or `SLUICE_BATCH_INBOX=` (set, empty): pydantic reads "" as the path `.`,
    so the home became the folder a command ran in (made 0700, the registry put there) and
    `sluice serve` watched it as the batch inbox, each file under it a job. Empty is the
    default, for every setting that is a folder."""
    from pathlib import Path


    folders = [
        (group, name)
        for group in GROUPS.values()
        for name, field in group.model_fields.items()
        if "Path" in str(field.annotation)
    ]
    assert {name for _, name in folders} >= {"home", "batch_inbox"}
    for group, name in folders:
        monkeypatch.setenv(f"SLUICE_{name.upper()}", "")
        read = getattr(group(), name)
        assert read != Path("."), f"SLUICE_{name.upper()}= read as the current folder"
        assert read == group.model_fields[name].default, name
        monkeypatch.delenv(f"SLUICE_{name.upper()}")


@pytest.mark.parametrize(("given", "read"), [("debug", "DEBUG"), (" Warning ", "WARNING"), ("", "INFO"), ("ERROR", "ERROR")])
def test_the_log_level_is_a_level_in_any_case(given: str, read: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SLUICE_LOG_LEVEL", given)
    assert Settings().observability.log_level == read


def test_a_log_level_that_is_no_level_is_refused_when_the_settings_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    """`SLUICE_LOG_LEVEL=LOUD` was taken, and failed as the logger was first made: in a Lambda
    handler's first line, or a request's."""
    monkeypatch.setenv("SLUICE_LOG_LEVEL", "LOUD")
    with pytest.raises(SettingRefused, match="SLUICE_LOG_LEVEL: "):
        Settings()


_FIELDS = [(group, name) for group in GROUPS.values() for name in group.model_fields]
_GARBAGE = ["abc", "[1", "{", "[1]", '{"a": [1]}', "-1", "0", "1e400", "inf", "nan", "3000000000", "9" * 30, " ", "null", "true"]


@settings(max_examples=400, deadline=None)
@given(
    field=st.sampled_from(_FIELDS),
    value=st.sampled_from(_GARBAGE) | st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\x00"), max_size=12),
)
def test_a_variable_that_does_not_read_is_refused_in_one_line_by_its_name(field: tuple[type[Group], str], value: str) -> None:
    """`SLUICE_MAX_REQUEST_BYTES=abc` printed pydantic's report ("1 validation error for
    LimitSettings", a link), `SLUICE_IMPORT_PREFIXES='[1'` "error parsing value for field
    'import_prefixes' from source 'EnvSettingsSource'": neither named the variable."""
    group, name = field
    variable = f"SLUICE_{name.upper()}"
    with pytest.MonkeyPatch.context() as env:
        env.setenv(variable, value)
        try:
            group()
        except SettingRefused as exc:
            message = str(exc)
            assert message.startswith(variable) and "\n" not in message, message
            assert "pydantic" not in message and "EnvSettingsSource" not in message, message


def test_a_json_setting_set_empty_is_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """The docs say "empty: none" of `SLUICE_FUNCTION_ARNS`, `SLUICE_MLFLOW_TRACKING_SERVERS`…;
    set empty, each failed every command."""
    json_settings = [(group, name) for group, name in _FIELDS if get_origin(group.model_fields[name].annotation) in (list, dict)]
    assert {name for _, name in json_settings} >= {"function_arns", "mlflow_tracking_servers", "import_prefixes", "streams"}
    for group, name in json_settings:
        monkeypatch.setenv(f"SLUICE_{name.upper()}", "")
        assert getattr(group(), name) == group.model_fields[name].get_default(call_default_factory=True), name
        monkeypatch.delenv(f"SLUICE_{name.upper()}")


def test_every_float_setting_is_finite_and_every_wait_at_most_a_day(monkeypatch: pytest.MonkeyPatch) -> None:
    """`SLUICE_BATCH_INBOX_POLL_S=1e10` (or inf) was taken: the inbox thread died at its first
    wait (OverflowError) and so did the thread that stops `sluice serve` at SIGTERM."""
    floats = [(group, name) for group, name in _FIELDS if group.model_fields[name].annotation is float]
    waits = [(group, name, 1e10) for group, name in floats if name.endswith("_s")] + [(group, name, 1e13) for group, name in floats if name.endswith("_ms")]
    assert {name for _, name, _ in waits} >= {"batch_inbox_poll_s", "batch_schedule_poll_s", "follow_poll_s", "drain_timeout_s", "stream_max_wait_ms"}
    for group, name, too_long in [*((group, name, "inf") for group, name in floats), *((group, name, "nan") for group, name in floats), *waits]:
        variable = f"SLUICE_{name.upper()}"
        monkeypatch.setenv(variable, str(too_long))
        with pytest.raises(SettingRefused, match=f"^{variable}: "):
            group()
        monkeypatch.delenv(variable)


@pytest.mark.parametrize(
    "name", ["ort_intra_op_threads", "ort_inter_op_threads", "ort_vcpus", "grpc_max_concurrent_rpcs", "max_request_bytes", "max_response_bytes"]
)
def test_a_number_a_c_library_is_handed_is_refused_past_what_it_holds(name: str) -> None:
    """`SLUICE_ORT_INTRA_OP_THREADS=3000000000` made every ONNX prediction a 500, and
    `SLUICE_GRPC_MAX_CONCURRENT_RPCS=3000000000` killed `sluice serve --grpc-port` as it started:
    ONNX Runtime's and gRPC's options are C ints."""
    with pytest.raises(SettingRefused, match=f"^SLUICE_{name.upper()}: "):
        Settings(**{name: 2**31})


@pytest.mark.parametrize(
    ("variable", "value", "words"),
    [
        ("SLUICE_MIRROR", "nowhere", "local or lambda://FUNCTION"),
        ("SLUICE_MIRROR", "lambda://", "local or lambda://FUNCTION"),
        ("SLUICE_CAPTURE", "nowhere", "file:///PATH, firehose://STREAM or off"),
        ("SLUICE_CAPTURE", "firehose://", "file:///PATH, firehose://STREAM or off"),
        ("SLUICE_BATCH_BUCKET", "s3://my-bucket", "an S3 bucket's name"),
        ("SLUICE_BATCH_BUCKET", "My_Bucket", "an S3 bucket's name"),
        ("SLUICE_IMPORT_PREFIXES", '["relative/{tenant}/"]', "is no prefix"),
        ("SLUICE_IMPORT_PREFIXES", '["s3://Bad_Bucket/{tenant}/"]', "is no prefix"),
        ("SLUICE_IMPORT_PREFIXES", '["s3://uploads/shared/"]', "names no {tenant}"),
        ("SLUICE_SCHEDULE_GROUP", "nightly", "needs SLUICE_ORCHESTRATOR"),
        ("SLUICE_STREAMS", '{"*": {"tenant": "acme", "destination": {"kind": "sqs"}}}', "the binding of '*': deployment"),
        ("SLUICE_STREAMS", '{"*": {"tenant": "acme", "deployment": "fraud", "destination": {"kind": "sns"}}}', "destination.kind"),
    ],
)
def test_a_setting_each_request_would_build_from_is_refused_as_the_settings_are_read(
    monkeypatch: pytest.MonkeyPatch, variable: str, value: str, words: str
) -> None:
    """Read on the first request (the mirror, capture's sink, a tenant's roots, the schedules'
    timer, the stream bindings), these were a 500 on every request, or every invocation."""
    monkeypatch.setenv(variable, value)
    with pytest.raises(SettingRefused) as refused:
        Settings()
    message = str(refused.value)
    assert message.startswith(variable) and words in message and "\n" not in message, message


def test_the_settings_the_cdk_app_and_the_docs_give_are_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable, value in (
        ("SLUICE_MIRROR", "lambda://sluice-shadow"), ("SLUICE_CAPTURE", "file://localhost/var/capture"), ("SLUICE_BATCH_BUCKET", "sluice-batch-123456789012-eu-west-1"),
        ("SLUICE_IMPORT_PREFIXES", '["s3://uploads-bucket/{tenant}/", "file://{home}/imports/{tenant}/"]'),
        ("SLUICE_STREAMS", '{"*": {"tenant": "acme", "deployment": "fraud", "destination": {"kind": "sqs", "target": "https://sqs"}}}'),
    ):  # fmt: skip
        monkeypatch.setenv(variable, value)
    Settings()
    for capture in ("firehose://sluice-capture", "file://~/capture", "file:///srv/my%20capture"):
        monkeypatch.setenv("SLUICE_CAPTURE", capture)
        Settings()


@given(st.integers(60, 7 * 24 * 3600))
@settings(max_examples=60, deadline=None)
def test_an_upload_form_never_outlives_the_signer_session_it_is_signed_with(ttl: int) -> None:
    """Where forms are signed with the upload signer role (an hour's session, as the CDK app
    makes it), a form TTL past it is refused by name; without a signer, any TTL in range holds."""
    from sluice.settings.serving import SIGNER_FORM_TTL_S, UploadSettings

    assert UploadSettings(upload_form_ttl_s=ttl).upload_form_ttl_s == ttl
    role = "arn:aws:iam::123456789012:role/sluice-upload-signer"
    if ttl <= SIGNER_FORM_TTL_S:
        assert UploadSettings(upload_form_ttl_s=ttl, upload_signer_role_arn=role).upload_form_ttl_s == ttl
    else:
        with pytest.raises(ValueError, match="SLUICE_UPLOAD_FORM_TTL_S"):
            UploadSettings(upload_form_ttl_s=ttl, upload_signer_role_arn=role)
