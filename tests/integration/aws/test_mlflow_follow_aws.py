"""MLflow followed on AWS: the registry event function, invoked by its schedule, polls a tracking
server over MLflow's REST API (MLflow's client is in no Lambda layer). Here the server is a real
HTTP server on loopback that speaks the endpoints sluice calls, in MLflow's response shapes
(model versions, the alias lookup, the download URI, the artifact proxy); the tenant's
credentials come from Secrets Manager on moto.

A moved alias is pushed once, its signature's columns naming its features, and rolled out and
tagged back; a flavor that needs converting is recorded as such; a server outside
`mlflow_tracking_servers` is never called; credentials go in the Authorization header and
nowhere else: not in a message, not in a log, not in the poll error kept on the binding. A
claim whose poller died is finished by the first poll after its lease, once."""

from __future__ import annotations

import base64
import json
import logging
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from tests.fake_mlflow import (
    API,
    IRIS,
    ONNX_MLMODEL,
    RUN,
    SIGNED_MLMODEL,
    SKLEARN_MLMODEL,
    Registry,
    serving,
    url,
)
from tests.integration.aws.conftest import REGION
from tests.integration.conftest import run_cli
from tests.models import embed_model
from tests.support import forget_settings

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

pytestmark = pytest.mark.usefixtures("cli_home")

USER, PASSWORD = "sluice-bot", "pw-7f3c9e1b-never-shown"
SECRET = "mlflow/default"
BASIC = "Basic " + base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()


@pytest.fixture
def tracking(aws: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    """The fake tracking server on a free loopback port, admitted by `mlflow_tracking_servers`,
    with tenant `default`'s credentials in a Secrets Manager secret."""
    registry = Registry()
    boto3.client("secretsmanager", region_name=REGION).create_secret(
        Name=SECRET, SecretString=json.dumps({"MLFLOW_TRACKING_USERNAME": USER, "MLFLOW_TRACKING_PASSWORD": PASSWORD})
    )
    with serving(registry, authorization=BASIC) as server:
        uri = url(server)
        monkeypatch.setenv("SLUICE_MLFLOW_TRACKING_SERVERS", json.dumps([uri]))
        monkeypatch.setenv("SLUICE_MLFLOW_CREDENTIALS_SECRETS", json.dumps({"default": SECRET}))
        forget_settings()
        yield {"uri": uri, "registry": registry, "server": server}


def scheduled_poll() -> dict[str, str]:
    """What the schedule's invocation of the registry event function did, by binding."""
    from sluice.handlers.registry_events import follower, handler
    from tests.support import LambdaContext

    follower.cache_clear()  # built once per process, as a Lambda's: here once per poll
    return handler({"poll": "follows"}, LambdaContext(function_name="sluice-registry-events"))["bindings"]  # type: ignore[no-any-return]


def follow(capsys: pytest.CaptureFixture[str], tmp_path: Path, tracking_uri: str, *extra: str, names: list[str] | None = None) -> None:
    """Model `moving` version 1 (the same ONNX model as MLflow's version 1, with the feature
    `names` given) served by deployment `moving`, which follows `models:/moving@champion`."""
    model = tmp_path / "moving.onnx"
    model.write_bytes(embed_model())
    named = ["--feature-names", ",".join(names)] if names else []
    assert run_cli(capsys, "models", "push", "moving", str(model), *named)[0] == 0
    assert run_cli(capsys, "deployments", "create", "moving", "--model", "moving")[0] == 0
    code, _, err = run_cli(
        capsys, "deployments", "follow", "moving", "--registry", "models:/moving@champion", "--tracking-uri", tracking_uri,
        "--rollout", "1,50,100 every 1m gate error_rate<=0.01", *extra,
    )  # fmt: skip
    assert code == 0, err


def history(capsys: pytest.CaptureFixture[str]) -> list[dict[str, Any]]:
    code, out, err = run_cli(capsys, "deployments", "follow", "moving", "--show")
    assert code == 0, err
    return json.loads(out)["history"]  # type: ignore[no-any-return]


def test_a_moved_alias_is_pushed_once_with_its_signatures_columns_rolled_out_and_tagged_back_over_rest(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tracking: dict[str, Any]
) -> None:
    from sluice.cli import pieces

    registry: Registry = tracking["registry"]
    follow(capsys, tmp_path, tracking["uri"], "--tag-back", names=IRIS)  # a rollout's versions take the same inputs
    registry.versions[2] = SIGNED_MLMODEL
    registry.aliases["champion"] = 2
    assert scheduled_poll() == {"default/moving": "rolling_out"}
    version = pieces.registry().get_version("default", "moving", 2)
    assert version.source == {
        "registry": "mlflow", "uri": "models:/moving@champion", "tracking_uri": tracking["uri"], "name": "moving",
        "version": 2, "run_id": RUN, "alias": "champion", "flavor": "onnx",
    }  # fmt: skip
    # The MLmodel's signature names the features, as MLflow's client path names them.
    assert version.signature.inputs[0].feature_names == tuple(IRIS)
    dep = pieces.registry().get_deployment("default", "moving")
    assert dep.rollout is not None and (dep.rollout.model, dep.rollout.version) == ("moving", 2)
    assert registry.tags == [
        {"name": "moving", "version": "2", "key": "sluice.deployment", "value": "moving"},
        {"name": "moving", "version": "2", "key": "sluice.revision", "value": str(dep.revision)},
    ]
    last = history(capsys)[-1]
    assert last["outcome"] == "rolling_out" and "pushed as moving:2; rollout started" in last["reason"]
    assert "tagged moving version 2 in MLflow" in last["reason"]
    # Every call carried the tenant's credentials, read from its secret.
    assert registry.requests and all(auth == BASIC for _, _, auth in registry.requests)

    # The next scheduled poll: the alias has not moved, nothing is fetched or pushed again.
    before = len(registry.requests)
    assert scheduled_poll() == {"default/moving": "rolling_out"}
    assert [path for _, path, _ in registry.requests[before:]] == [f"{API}/registered-models/alias"]
    assert [v.version for v in pieces.registry().list_versions("default", "moving")] == [1, 2]


def test_a_flavor_that_needs_converting_is_recorded_with_what_to_do(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tracking: dict[str, Any]
) -> None:
    from sluice.cli import pieces

    registry: Registry = tracking["registry"]
    follow(capsys, tmp_path, tracking["uri"])
    registry.versions[2] = SKLEARN_MLMODEL
    registry.aliases["champion"] = 2
    assert scheduled_poll() == {"default/moving": "conversion_failed"}
    last = history(capsys)[-1]
    assert last["outcome"] == "conversion_failed" and last["version"] == "2"
    assert "has the flavors python_function, sklearn; on AWS sluice takes an onnx flavor" in last["reason"]
    assert "push it from a machine with sluice[convert]" in last["reason"]
    assert [v.version for v in pieces.registry().list_versions("default", "moving")] == [1]
    assert not any(path.endswith("model.pkl") for _, path, _ in registry.requests)  # nothing pickled fetched


def test_a_tracking_server_not_admitted_is_never_called(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tracking: dict[str, Any]
) -> None:
    from sluice.cli import pieces
    from sluice.domain.errors import Forbidden
    from sluice.services.follows import acting_for

    registry: Registry = tracking["registry"]
    other = tracking["uri"].replace("127.0.0.1", "localhost")  # the same server, by a name the list does not admit
    follow(capsys, tmp_path, other)  # made locally, where sluice calls MLflow with its own client
    registry.aliases["champion"] = 2
    (outcome,) = scheduled_poll().values()
    assert outcome.startswith("error: ") and "is not an allowed server" in outcome
    assert registry.requests == []

    # On AWS the binding is refused when made.
    service = pieces.follows()
    service.tracking_servers = pieces.settings().follows.mlflow_allowlist
    binding = service.registry.get_follow("default", "moving")
    with pytest.raises(Forbidden, match="is not an allowed server"):
        service.follow(acting_for(binding), "moving", source="models:/moving@champion", rollout="1,100 gate error_rate<=0.01", tracking_uri=other)


def test_credentials_are_sent_and_never_shown_in_a_message_or_a_log(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tracking: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    registry: Registry = tracking["registry"]
    follow(capsys, tmp_path, tracking["uri"])
    # A server that quotes what it was sent in its error (as a proxy's debug page might).
    registry.fail_with = (500, {"error_code": "INTERNAL_ERROR", "message": f"backend failed for {USER}:{PASSWORD} ({BASIC})"})
    caplog.set_level(logging.DEBUG)
    logging.getLogger("botocore").setLevel(logging.DEBUG)
    try:
        (outcome,) = scheduled_poll().values()
    finally:
        logging.getLogger("botocore").setLevel(logging.WARNING)
    assert outcome.startswith("error: MLflow at") and "answered /api/2.0/mlflow/registered-models/alias with 500" in outcome
    assert registry.requests[-1][2] == BASIC  # sent, in the header
    secret_parts = (PASSWORD, BASIC.split()[1])
    assert not any(s in outcome for s in secret_parts), outcome
    assert "GetSecretValue" in caplog.text or "secretsmanager" in caplog.text  # the debug log was on
    assert not any(s in caplog.text for s in secret_parts)


def test_a_secret_is_kept_briefly_and_a_bad_one_is_refused_without_quoting_it(aws: None) -> None:
    from sluice.convert.mlflow_credentials import SecretCredentials
    from sluice.domain.errors import SluiceError, Unprocessable
    from tests.support import Clock

    client = boto3.client("secretsmanager", region_name=REGION)
    client.create_secret(Name="mlflow/acme", SecretString=json.dumps({"MLFLOW_TRACKING_TOKEN": "tok-1"}))
    client.create_secret(Name="mlflow/broken", SecretString='{"password": "pw-in-a-bad-secret"')
    clock = Clock()
    read = SecretCredentials({"acme": "mlflow/acme", "beta": "mlflow/broken", "gamma": "mlflow/gone"}, lambda: client, clock=clock)
    assert read("acme").authorization() == "Bearer tok-1"  # type: ignore[union-attr]
    client.put_secret_value(SecretId="mlflow/acme", SecretString=json.dumps({"MLFLOW_TRACKING_TOKEN": "tok-2"}))
    clock.now += 60
    assert read("acme").authorization() == "Bearer tok-1"  # type: ignore[union-attr]
    clock.now += 300
    assert read("acme").authorization() == "Bearer tok-2"  # type: ignore[union-attr]  # rotated: read again
    assert read("nobody") is None
    with pytest.raises(Unprocessable) as bad:
        read("beta")
    assert "mlflow/broken is not a JSON object with MLFLOW_TRACKING_USERNAME" in bad.value.message
    assert "pw-in-a-bad-secret" not in bad.value.message
    with pytest.raises(SluiceError, match="cannot read the MLflow credentials secret mlflow/gone: ResourceNotFoundException"):
        read("gamma")


def binding(capsys: pytest.CaptureFixture[str]) -> dict[str, Any]:
    """`--show`'s binding (what the function logged before it, JSON on stdout as on Lambda, dropped)."""
    capsys.readouterr()
    code, out, err = run_cli(capsys, "deployments", "follow", "moving", "--show")
    assert code == 0, err
    return json.loads(out)  # type: ignore[no-any-return]


def test_a_failing_poll_is_kept_on_the_binding_without_credentials_until_one_succeeds(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tracking: dict[str, Any]
) -> None:
    registry: Registry = tracking["registry"]
    follow(capsys, tmp_path, tracking["uri"])
    assert binding(capsys)["error"] is None

    registry.fail_with = (503, {"error_code": "TEMPORARILY_UNAVAILABLE", "message": "database is locked"})
    scheduled_poll()
    error = binding(capsys)["error"]
    assert error["kind"] == "server_error" and error["since"] == error["at"]
    assert "answered /api/2.0/mlflow/registered-models/alias with 503: database is locked" in error["message"]

    # The tenant's secret now holds a password the server refuses: a 401, said without it.
    wrong = "pw-rotated-but-wrong-91c2"
    boto3.client("secretsmanager", region_name=REGION).put_secret_value(
        SecretId=SECRET, SecretString=json.dumps({"MLFLOW_TRACKING_USERNAME": USER, "MLFLOW_TRACKING_PASSWORD": wrong})
    )
    registry.fail_with = None
    scheduled_poll()
    shown = binding(capsys)
    assert shown["error"]["kind"] == "unauthorized" and "with 401" in shown["error"]["message"]
    assert "check the tenant's MLflow credentials secret" in shown["error"]["message"]
    code, listed, _ = run_cli(capsys, "deployments", "follow", "--list")
    assert code == 0 and "unauthorized: MLflow at" in listed
    for said in (json.dumps(shown), listed):
        assert wrong not in said and PASSWORD not in said and "Basic " not in said

    # Put right, the next poll succeeds and the error is gone.
    boto3.client("secretsmanager", region_name=REGION).put_secret_value(
        SecretId=SECRET, SecretString=json.dumps({"MLFLOW_TRACKING_USERNAME": USER, "MLFLOW_TRACKING_PASSWORD": PASSWORD})
    )
    (outcome,) = scheduled_poll().values()
    assert not outcome.startswith("error") and binding(capsys)["error"] is None

    # The server gone: nothing answers at its address.
    tracking["server"].shutdown()
    tracking["server"].server_close()
    (outcome,) = scheduled_poll().values()
    error = binding(capsys)["error"]
    assert error["kind"] == "unreachable" and error["message"] in outcome and "cannot reach MLflow at" in error["message"]


def test_a_claim_whose_poller_died_is_finished_once_by_the_first_poll_after_its_lease(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tracking: dict[str, Any]
) -> None:
    from sluice.cli import pieces
    from sluice.services.follows import FollowService

    registry: Registry = tracking["registry"]
    follow(capsys, tmp_path, tracking["uri"])
    registry.versions[2] = ONNX_MLMODEL
    registry.aliases["champion"] = 2
    # A poller claims version 2, then dies before pulling it.
    follows = pieces.follows()
    dead = FollowService(follows.registry, follows.rollouts, poller="host-that-died:4242")
    dead.claim(follows.registry.get_follow("default", "moving"), "2")

    # Its claim is fresh: the next poll leaves it alone.
    assert scheduled_poll() == {"default/moving": "pushing"}
    assert [v.version for v in pieces.registry().list_versions("default", "moving")] == [1]
    claimed = binding(capsys)
    assert (claimed["state"], claimed["seen"], claimed["claimed_by"]) == ("pushing", "2", "host-that-died:4242")

    # Once the claim is older than the lease (10 minutes by default), the next poll takes it over.
    stored = follows.registry.get_follow("default", "moving")
    assert stored.claimed_at is not None
    follows.registry.update_follow(replace(stored, claimed_at=stored.claimed_at - 601), expected_revision=stored.revision)
    assert scheduled_poll() == {"default/moving": "rolling_out"}
    history = binding(capsys)["history"]
    assert [e["outcome"] for e in history] == ["rolling_out"]
    assert history[-1]["reason"].startswith("taken over from host-that-died:4242, whose claim of ")
    assert "s ago outlived the lease (600 s); pushed as moving:2; rollout started" in history[-1]["reason"]
    dep = pieces.registry().get_deployment("default", "moving")
    assert dep.rollout is not None and (dep.rollout.model, dep.rollout.version) == ("moving", 2)

    # Finished once: the polls after it push nothing and start nothing.
    for _ in range(2):
        assert scheduled_poll() == {"default/moving": "rolling_out"}
    assert [v.version for v in pieces.registry().list_versions("default", "moving")] == [1, 2]
    assert pieces.registry().get_deployment("default", "moving").revision == dep.revision


def test_a_tenants_versions_in_s3_are_read_only_under_its_model_data_locations(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tracking: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """MLflow says where a version's artifacts are, and a tenant's MLflow can say anything: an
    `s3://` location in another tenant's prefix of a bucket the function may read is refused
    (recorded on the binding, nothing fetched), one under the tenant's own locations is read."""
    from sluice.cli import pieces
    from sluice.domain import Principal

    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket="shared-ml", CreateBucketConfiguration={"LocationConstraint": REGION})
    for prefix in ("globex/m2", "default/m3"):
        s3.put_object(Bucket="shared-ml", Key=f"{prefix}/MLmodel", Body=ONNX_MLMODEL.encode())
        s3.put_object(Bucket="shared-ml", Key=f"{prefix}/model.onnx", Body=embed_model())
    locations = {"default": ["s3://shared-ml/default/"], "globex": ["s3://shared-ml/globex/"]}
    monkeypatch.setenv("SLUICE_MODEL_DATA_LOCATIONS", json.dumps(locations))
    forget_settings()
    model = tmp_path / "moving.onnx"
    model.write_bytes(embed_model())
    assert run_cli(capsys, "models", "push", "moving", str(model))[0] == 0
    assert run_cli(capsys, "deployments", "create", "moving", "--model", "moving")[0] == 0
    tenant = Principal("default", frozenset({"admin"}), "key-of-default")  # a binding made through the API
    pieces.follows().follow(
        tenant, "moving", source="models:/moving@champion", rollout="1,50,100 every 1m gate error_rate<=0.01",
        tracking_uri=tracking["uri"],
    )  # fmt: skip
    registry: Registry = tracking["registry"]
    registry.versions[2] = registry.versions[3] = ONNX_MLMODEL
    registry.artifact_uris.update({2: "s3://shared-ml/globex/m2", 3: "s3://shared-ml/default/m3"})

    registry.aliases["champion"] = 2
    assert scheduled_poll() == {"default/moving": "conversion_failed"}
    last = history(capsys)[-1]
    assert "the model data s3://shared-ml/globex/m2/MLmodel is not read for tenant 'default'" in last["reason"]
    assert [v.version for v in pieces.registry().list_versions("default", "moving")] == [1]

    registry.aliases["champion"] = 3
    assert scheduled_poll() == {"default/moving": "rolling_out"}
    assert [v.version for v in pieces.registry().list_versions("default", "moving")] == [1, 2]


def test_a_moved_alias_whose_claim_meets_another_write_is_taken_by_that_poll(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, tracking: dict[str, Any]
) -> None:
    """Another process writes the binding (its own poll's error kept) between this poll's read
    and its claim of version 2: the claim is made on the binding as it is now, not given up as
    taken elsewhere, and version 2 is pushed once."""
    from sluice.cli import pieces
    from sluice.domain.errors import Unavailable
    from sluice.handlers.registry_events import follower, handler
    from tests.support import LambdaContext

    registry: Registry = tracking["registry"]
    follow(capsys, tmp_path, tracking["uri"])
    registry.versions[2] = ONNX_MLMODEL
    registry.aliases["champion"] = 2
    follows = pieces.follows()
    follower.cache_clear()
    store = follower().follows.registry
    update, pending = store.update_follow, [True]

    def racing(written: Any, **kw: Any) -> Any:
        if written.state == "pushing" and pending:
            pending.clear()
            follows.note_error("default", "moving", Unavailable("the tracking server answered 503"))
        return update(written, **kw)

    store.update_follow = racing  # type: ignore[method-assign]
    done = handler({"poll": "follows"}, LambdaContext(function_name="sluice-registry-events"))["bindings"]
    assert done == {"default/moving": "rolling_out"}
    shown = binding(capsys)
    assert (shown["seen"], [e["outcome"] for e in shown["history"]]) == ("2", ["rolling_out"])
    assert [v.version for v in pieces.registry().list_versions("default", "moving")] == [1, 2]
