"""`sluice models push NAME arn:aws:sagemaker:…:model-package/GROUP/VERSION` against moto's
SageMaker Model Registry and S3: an Approved package's ONNX model (in a Triton repository
tarball) is pushed with its lineage; a package pending approval is refused unless allowed;
an unknown package, a bad ARN or model data without a model is a message and exit status 2."""

from __future__ import annotations

import functools
import io
import json
import tarfile
import time
from typing import TYPE_CHECKING, Any

import boto3
import pytest

from sluice.domain.errors import InvalidRequest
from tests.integration.aws.conftest import REGION
from tests.integration.conftest import run_cli
from tests.models import embed_model

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

BUCKET = "models-of-record"
pytestmark = pytest.mark.usefixtures("cli_home")


def tarball(files: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:gz") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@functools.cache
def sklearn_model() -> bytes:
    joblib = pytest.importorskip("joblib")
    pytest.importorskip("skl2onnx")
    from sklearn.datasets import load_iris
    from sklearn.linear_model import LogisticRegression

    x, y = load_iris(return_X_y=True)
    out = io.BytesIO()
    joblib.dump(LogisticRegression(max_iter=300).fit(x, y), out)
    return out.getvalue()


@pytest.fixture
def packages(aws: None) -> Iterator[dict[str, Any]]:
    """Group `fraud`: version 1 Approved, version 2 PendingManualApproval (both the same Triton
    repository tarball), version 3 Approved with model data that holds no model."""
    s3 = boto3.client("s3", region_name=REGION)
    s3.create_bucket(Bucket=BUCKET, CreateBucketConfiguration={"LocationConstraint": REGION})
    repository = tarball({"fraud/config.pbtxt": b'name: "fraud"\nbackend: "onnxruntime"\n', "fraud/1/model.onnx": embed_model()})
    s3.put_object(Bucket=BUCKET, Key="fraud/model.tar.gz", Body=repository)
    s3.put_object(Bucket=BUCKET, Key="empty/model.tar.gz", Body=tarball({"README.txt": b"no model here"}))
    s3.put_object(Bucket=BUCKET, Key="sklearn/model.tar.gz", Body=tarball({"model.joblib": sklearn_model()}))
    sagemaker = boto3.client("sagemaker", region_name=REGION)
    sagemaker.create_model_package_group(ModelPackageGroupName="fraud")
    arns = []
    for status, key in (("Approved", "fraud"), ("PendingManualApproval", "fraud"), ("Approved", "empty"), ("Approved", "sklearn")):
        arns.append(
            sagemaker.create_model_package(
                ModelPackageGroupName="fraud",
                ModelApprovalStatus=status,
                InferenceSpecification={
                    "Containers": [
                        {
                            "Image": "763104351884.dkr.ecr.eu-west-1.amazonaws.com/tritonserver:24.09-py3",
                            "ModelDataUrl": f"s3://{BUCKET}/{key}/model.tar.gz",
                            "Framework": "SKLEARN" if key == "sklearn" else "ONNX",
                        }
                    ],
                    "SupportedContentTypes": ["application/json"],
                    "SupportedResponseMIMETypes": ["application/json"],
                },
            )["ModelPackageArn"]
        )
    yield {"arns": arns}


def test_an_approved_package_is_pushed_with_its_lineage(capsys: pytest.CaptureFixture[str], packages: dict[str, Any]) -> None:
    arn = packages["arns"][0]
    assert arn.endswith(":model-package/fraud/1")
    code, out, err = run_cli(capsys, "models", "push", "fraud", arn)
    assert code == 0, err
    assert "took the ONNX model of fraud version 1 (Approved) as it is" in out
    code, out, _ = run_cli(capsys, "models", "show", "fraud", "--version", "1")
    version = json.loads(out)
    assert version["source"] == {
        "registry": "sagemaker", "arn": arn, "group": "fraud", "version": 1, "approval_status": "Approved",
        "framework": "ONNX", "model_data_url": f"s3://{BUCKET}/fraud/model.tar.gz",
    }  # fmt: skip
    assert version["signature"]["inputs"][0]["name"] == "input"  # read from the repository's model.onnx
    assert run_cli(capsys, "deployments", "create", "fraud", "--model", "fraud")[0] == 0
    code, out, err = run_cli(capsys, "predict", "fraud", "--inputs", json.dumps([[5.1, 3.5, 1.4, 0.2]]))
    assert code == 0, err


def test_a_package_pending_approval_is_refused_unless_allowed(capsys: pytest.CaptureFixture[str], packages: dict[str, Any]) -> None:
    arn = packages["arns"][1]
    code, _, err = run_cli(capsys, "models", "push", "fraud", arn)
    assert code == 2 and "is PendingManualApproval in SageMaker Model Registry" in err and "--allow-unapproved" in err, err
    assert run_cli(capsys, "models", "show", "fraud")[0] == 2  # nothing was pushed
    code, _, err = run_cli(capsys, "models", "push", "fraud", arn, "--allow-unapproved")
    assert code == 0, err
    code, out, _ = run_cli(capsys, "models", "show", "fraud")
    assert json.loads(out)["lineage"][0]["source"]["approval_status"] == "PendingManualApproval"


@pytest.mark.parametrize(
    ("which", "message"),
    [
        ("arn:aws:sagemaker:eu-west-1:123456789012:model-package/fraud/9", "no model package arn:aws:sagemaker:eu-west-1:123456789012:model-package/fraud/9"),
        ("arn:aws:sagemaker:eu-west-1:123456789012:model/fraud", "is not a model package version's ARN"),
        (2, "holds no single model file sluice reads: README.txt"),
    ],
)
def test_what_cannot_be_pushed_is_a_message(capsys: pytest.CaptureFixture[str], packages: dict[str, Any], which: Any, message: str) -> None:
    arn = packages["arns"][which] if isinstance(which, int) else which
    code, _, err = run_cli(capsys, "models", "push", "fraud", arn)
    assert code == 2 and message in err and "Traceback" not in err, err


def test_a_scikit_learn_model_in_a_package_is_converted_and_checked(capsys: pytest.CaptureFixture[str], packages: dict[str, Any]) -> None:
    code, out, err = run_cli(capsys, "models", "push", "iris", packages["arns"][3])
    assert code == 0, err
    assert "converted fraud version 4 (Approved)'s sklearn model, checked on 256 generated rows" in out
    code, out, _ = run_cli(capsys, "models", "show", "iris", "--version", "1")
    assert json.loads(out)["source"]["framework"] == "SKLEARN"


# Follow bindings: approvals that start rollouts -------------------------------------------
GROUP_ARN = f"arn:aws:sagemaker:{REGION}:123456789012:model-package-group/fraud"


def package_event(version: int, status: str = "Approved") -> dict[str, Any]:
    """The approval event in events/, for package `version` of group `fraud` with `status`."""
    from tests.conftest import EVENTS

    event = json.loads((EVENTS / "sagemaker_model_package_approved.json").read_text())
    arn = f"arn:aws:sagemaker:{REGION}:123456789012:model-package/fraud/{version}"
    event["resources"] = [arn]
    event["detail"].update(ModelPackageArn=arn, ModelPackageVersion=version, ModelApprovalStatus=status)
    return event


def delivered(event: dict[str, Any]) -> dict[str, str]:
    from sluice.handlers.registry_events import follower, handler
    from tests.support import LambdaContext

    follower.cache_clear()  # built once per process, as a Lambda's: here once per test's home
    return handler(event, LambdaContext(function_name="sluice-registry-events"))["bindings"]  # type: ignore[no-any-return]


def test_an_approval_pushes_and_rolls_out_once_and_a_rejection_aborts_it(capsys: pytest.CaptureFixture[str], packages: dict[str, Any]) -> None:
    from sluice.cli import pieces

    assert run_cli(capsys, "models", "push", "fraud", packages["arns"][1], "--allow-unapproved")[0] == 0
    assert run_cli(capsys, "deployments", "create", "fraud", "--model", "fraud")[0] == 0
    code, _, err = run_cli(capsys, "deployments", "follow", "fraud", "--registry", GROUP_ARN, "--rollout", "5,100 every 1m gate error_rate<=0.01")
    assert code == 0, err
    assert delivered(package_event(1)) == {"default/fraud": "rolling_out"}
    dep = pieces.registry().get_deployment("default", "fraud")
    assert dep.rollout is not None and (dep.rollout.version, dep.rollout.steps) == (2, (5.0, 100.0))
    assert pieces.registry().get_version("default", "fraud", 2).source["arn"] == packages["arns"][0]  # type: ignore[index]
    assert delivered(package_event(1)) == {"default/fraud": "rolling_out"}  # delivered twice: pushed once
    assert [v.version for v in pieces.registry().list_versions("default", "fraud")] == [1, 2]

    assert delivered(package_event(1, "Rejected")) == {"default/fraud": "rejected"}
    dep = pieces.registry().get_deployment("default", "fraud")
    assert dep.rollout is not None and dep.rollout.state == "aborted" and dep.policy == {"kind": "single", "model": "fraud", "version": 1}
    code, out, _ = run_cli(capsys, "deployments", "follow", "fraud", "--show")
    last = json.loads(out)["history"][-1]
    assert (last["outcome"], last["version"], last["model_version"]) == ("rejected", "1", 2)
    assert "is Rejected in SageMaker Model Registry; its rollout was aborted" in last["reason"]


def test_a_package_without_a_model_or_still_pending_is_recorded_or_left(capsys: pytest.CaptureFixture[str], packages: dict[str, Any]) -> None:
    assert run_cli(capsys, "models", "push", "fraud", packages["arns"][0])[0] == 0
    assert run_cli(capsys, "deployments", "create", "fraud", "--model", "fraud")[0] == 0
    assert run_cli(capsys, "deployments", "follow", "fraud", "--registry", GROUP_ARN, "--rollout", "5,100 gate error_rate<=0.01")[0] == 0
    assert delivered(package_event(2, "PendingManualApproval")) == {"default/fraud": "waiting"}
    assert delivered(package_event(3)) == {"default/fraud": "conversion_failed"}
    code, out, _ = run_cli(capsys, "deployments", "follow", "fraud", "--show")
    assert code == 0
    last = json.loads(out)["history"][-1]
    assert last["outcome"] == "conversion_failed" and "holds no single model file sluice reads" in last["reason"]
    other = package_event(1)
    other["detail"].update(ModelPackageGroupName="churn", ModelPackageArn=other["detail"]["ModelPackageArn"].replace("/fraud/", "/churn/"))
    assert delivered(other) == {}  # no binding follows that group
    with pytest.raises(InvalidRequest, match="not a SageMaker Model Package State Change event"):
        delivered({"detail-type": "SageMaker Endpoint State Change", "detail": {}})


def test_a_package_claim_whose_poller_died_is_finished_once_by_the_scheduled_poll(capsys: pytest.CaptureFixture[str], packages: dict[str, Any]) -> None:
    from sluice.cli import pieces
    from sluice.services.follows import FollowService

    assert run_cli(capsys, "models", "push", "fraud", packages["arns"][1], "--allow-unapproved")[0] == 0
    assert run_cli(capsys, "deployments", "create", "fraud", "--model", "fraud")[0] == 0
    assert run_cli(capsys, "deployments", "follow", "fraud", "--registry", GROUP_ARN, "--rollout", "5,100 gate error_rate<=0.01")[0] == 0
    # The approval of version 1 was claimed 601 s ago by a function that then timed out.
    follows = pieces.follows()
    dead = FollowService(follows.registry, follows.rollouts, clock=lambda: time.time() - 601)
    dead.claim(follows.registry.get_follow("default", "fraud"), "1")
    assert delivered({"poll": "follows"}) == {"default/fraud": "rolling_out"}
    dep = pieces.registry().get_deployment("default", "fraud")
    assert dep.rollout is not None and dep.rollout.version == 2
    assert pieces.registry().get_version("default", "fraud", 2).source["arn"] == packages["arns"][0]  # type: ignore[index]
    assert delivered({"poll": "follows"}) == {"default/fraud": "rolling_out"}  # finished once
    assert [v.version for v in pieces.registry().list_versions("default", "fraud")] == [1, 2]


def test_a_tenants_binding_follows_only_its_groups_and_reads_only_its_model_data(
    capsys: pytest.CaptureFixture[str], packages: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A binding a tenant makes (the API's) is held to what the operator lists for that tenant:
    the groups it may follow, and where its versions' model data may lie. The function's role
    may read every tenant's locations (IAM cannot tell them apart), so the check is sluice's:
    a package whose model data lies elsewhere (another tenant's prefix of a shared bucket) is
    recorded and never read; an approval in a group no longer listed pulls nothing."""
    from sluice.cli import pieces
    from sluice.domain import Principal
    from sluice.domain.errors import Forbidden
    from tests.support import forget_settings

    monkeypatch.setenv("SLUICE_FOLLOW_PACKAGE_GROUPS", json.dumps({"default": ["FRAUD"]}))  # names compare in any case
    monkeypatch.setenv("SLUICE_MODEL_DATA_LOCATIONS", json.dumps({"default": [f"s3://{BUCKET}/fraud/"], "globex": [f"s3://{BUCKET}/"]}))
    home = GROUP_ARN[: GROUP_ARN.index("model-package-group/")] + "model-package-group/"
    monkeypatch.setenv("SLUICE_FOLLOW_GROUP_ARN_PREFIX", home)  # the stack's account and region, as the CDK app sets it
    forget_settings()
    assert run_cli(capsys, "models", "push", "fraud", packages["arns"][1], "--allow-unapproved")[0] == 0
    assert run_cli(capsys, "deployments", "create", "fraud", "--model", "fraud")[0] == 0
    tenant = Principal("default", frozenset({"admin"}), "key-of-default")
    for elsewhere in (GROUP_ARN.replace(":123456789012:", ":210987654321:"), GROUP_ARN.replace(f":{REGION}:", ":us-west-2:")):
        with pytest.raises(InvalidRequest) as refused:  # a listed name in another account or region: its approvals never come
            pieces.follows().follow(tenant, "fraud", source=elsewhere, rollout="5,100 gate error_rate<=0.01")
        assert refused.value.field == "registry" and "another account or region" in refused.value.message
    with pytest.raises(Forbidden) as refused:
        pieces.follows().follow(tenant, "fraud", source=GROUP_ARN.replace("/fraud", "/churn"), rollout="5,100 gate error_rate<=0.01")
    assert refused.value.field == "registry" and "'churn' is not among the groups tenant 'default' may follow" in refused.value.message
    pieces.follows().follow(tenant, "fraud", source=GROUP_ARN, rollout="5,100 gate error_rate<=0.01")

    # Version 3's model data is s3://models-of-record/empty/…: outside default's locations.
    assert delivered(package_event(3)) == {"default/fraud": "conversion_failed"}
    last = pieces.follows().get(tenant, "fraud").history[-1]
    assert f"the model data s3://{BUCKET}/empty/model.tar.gz is not read for tenant 'default'" in last.reason
    assert f"may lie in s3://{BUCKET}/fraud/" in last.reason
    assert [v.version for v in pieces.registry().list_versions("default", "fraud")] == [1]
    assert delivered(package_event(1)) == {"default/fraud": "rolling_out"}  # under fraud/: read
    assert [v.version for v in pieces.registry().list_versions("default", "fraud")] == [1, 2]

    # The operator stops listing the group: the next approval pulls nothing, and says why.
    monkeypatch.setenv("SLUICE_FOLLOW_PACKAGE_GROUPS", json.dumps({"globex": ["fraud"]}))
    forget_settings()
    (outcome,) = delivered(package_event(4)).values()
    assert outcome.startswith("error: model package group 'fraud' is not among the groups tenant 'default' may follow")
    assert pieces.follows().get(tenant, "fraud").error is not None
    assert [v.version for v in pieces.registry().list_versions("default", "fraud")] == [1, 2]


def test_a_group_whose_name_has_capitals_is_followed(capsys: pytest.CaptureFixture[str], packages: dict[str, Any]) -> None:
    """SageMaker keeps a group's name as given in the group's ARN and in the event's
    `ModelPackageGroupName`, and spells it in lower case in its packages' ARNs (moto models it
    so): the binding to `…/FraudModels`, made with the ARN the group's creation returned, is
    found from the approval of `…/model-package/fraudmodels/1`, and its lapsed claim retaken."""
    from dataclasses import replace

    from sluice.cli import pieces
    from sluice.domain.follows import Follow
    from sluice.services.follows import FollowService

    sagemaker = boto3.client("sagemaker", region_name=REGION)
    group_arn = sagemaker.create_model_package_group(ModelPackageGroupName="FraudModels")["ModelPackageGroupArn"]
    def approved() -> str:
        return sagemaker.create_model_package(  # type: ignore[no-any-return]
            ModelPackageGroupName="FraudModels", ModelApprovalStatus="Approved",
            InferenceSpecification={
                "Containers": [{"Image": "tritonserver", "ModelDataUrl": f"s3://{BUCKET}/fraud/model.tar.gz"}],
                "SupportedContentTypes": ["application/json"], "SupportedResponseMIMETypes": ["application/json"],
            },
        )["ModelPackageArn"]  # fmt: skip

    arn = approved()
    assert group_arn.endswith("/FraudModels") and arn.endswith(":model-package/fraudmodels/1")
    assert run_cli(capsys, "models", "push", "fraud", packages["arns"][1], "--allow-unapproved")[0] == 0
    for name in ("fraud", "older"):
        assert run_cli(capsys, "deployments", "create", name, "--model", "fraud")[0] == 0
    code, _, err = run_cli(capsys, "deployments", "follow", "fraud", "--registry", group_arn, "--rollout", "5,100 gate error_rate<=0.01")
    assert code == 0, err
    # A binding stored before watches were spelled in lower case carries the group's name as given.
    registry = pieces.registry()
    made = registry.get_follow("default", "fraud")
    registry.create_follow(replace(made, deployment="older", watch=f"sagemaker:{group_arn}", revision=1))
    assert isinstance(made, Follow) and made.watch.endswith("/fraudmodels")

    event = package_event(1)
    event["resources"] = [arn]
    event["detail"].update(ModelPackageArn=arn, ModelPackageGroupName="FraudModels")
    assert delivered(event) == {"default/fraud": "rolling_out", "default/older": "rolling_out"}

    # A claim of version 2 whose poller died: the scheduled poll describes the package by the ARN SageMaker gives it.
    second = approved()
    follows = pieces.follows()
    dead = FollowService(follows.registry, follows.rollouts, clock=lambda: time.time() - 601)
    dead.claim(follows.registry.get_follow("default", "fraud"), "2")
    delivered({"poll": "follows"})  # its rollout is refused: version 1's still runs
    last = registry.get_follow("default", "fraud").history[-1]
    assert last.version == "2" and "pushed as fraud:3" in last.reason, last
    assert registry.get_version("default", "fraud", 3).source["arn"] == second  # type: ignore[index]


def test_an_approval_delivered_after_a_later_one_is_superseded(capsys: pytest.CaptureFixture[str], packages: dict[str, Any]) -> None:
    """EventBridge keeps no order and retries a failed delivery for up to an hour: version 1's
    approval (09:00) arriving after version 3's (09:05) is not rolled out over it. Version 1
    approved again later (a deliberate return to it) is taken."""
    from sluice.cli import pieces

    assert run_cli(capsys, "models", "push", "fraud", packages["arns"][1], "--allow-unapproved")[0] == 0
    assert run_cli(capsys, "deployments", "create", "fraud", "--model", "fraud")[0] == 0
    assert run_cli(capsys, "deployments", "follow", "fraud", "--registry", GROUP_ARN, "--rollout", "5,100 gate error_rate<=0.01")[0] == 0

    def at(version: int, time: str) -> dict[str, Any]:
        return {**package_event(version), "time": time}

    assert delivered(at(3, "2026-03-02T09:05:00Z")) == {"default/fraud": "conversion_failed"}  # taken: its model data holds no model
    assert delivered(at(1, "2026-03-02T09:00:00Z")) == {"default/fraud": "superseded by version 3"}
    assert [v.version for v in pieces.registry().list_versions("default", "fraud")] == [1]
    shown = pieces.follows().registry.get_follow("default", "fraud")
    assert (shown.seen, shown.history[-1].version) == ("3", "3")
    assert delivered(at(1, "2026-03-02T10:30:00Z")) == {"default/fraud": "rolling_out"}
    assert [v.version for v in pieces.registry().list_versions("default", "fraud")] == [1, 2]


def test_a_rejection_undone_by_a_new_approval_rolls_the_version_out_again(capsys: pytest.CaptureFixture[str], packages: dict[str, Any]) -> None:
    """Approved (09:00), rejected by mistake (09:10: its rollout aborted), approved again
    (09:20): the version is rolled out again. The 09:10 rejection delivered again after that
    aborts nothing; a new rejection (09:30) does. The first approval delivered again is no
    approval again."""
    from sluice.cli import pieces

    assert run_cli(capsys, "models", "push", "fraud", packages["arns"][1], "--allow-unapproved")[0] == 0
    assert run_cli(capsys, "deployments", "create", "fraud", "--model", "fraud")[0] == 0
    assert run_cli(capsys, "deployments", "follow", "fraud", "--registry", GROUP_ARN, "--rollout", "5,100 gate error_rate<=0.01")[0] == 0

    def at(status: str, time: str) -> dict[str, Any]:
        return {**package_event(1, status), "time": time}

    def rollout() -> str | None:
        running = pieces.registry().get_deployment("default", "fraud").rollout
        return None if running is None else running.state

    assert delivered(at("Approved", "2026-03-02T09:00:00Z")) == {"default/fraud": "rolling_out"}
    assert delivered(at("Rejected", "2026-03-02T09:10:00Z")) == {"default/fraud": "rejected"}
    assert rollout() == "aborted"
    assert delivered(at("Approved", "2026-03-02T09:00:00Z")) == {"default/fraud": "failed"}  # the first approval, again
    assert delivered(at("Approved", "2026-03-02T09:20:00Z")) == {"default/fraud": "rolling_out"}
    assert rollout() == "running"
    last = pieces.follows().registry.get_follow("default", "fraud").history[-1]
    assert (last.version, last.outcome) == ("1", "rolling_out") and "already pushed as fraud:2" in last.reason
    assert [v.version for v in pieces.registry().list_versions("default", "fraud")] == [1, 2]  # pushed once
    assert delivered(at("Rejected", "2026-03-02T09:10:00Z")) == {"default/fraud": "rolling_out"}  # undone already
    assert rollout() == "running"
    assert delivered(at("Rejected", "2026-03-02T09:30:00Z")) == {"default/fraud": "rejected"}
    assert rollout() == "aborted"


def at(version: int, status: str, time: str) -> dict[str, Any]:
    return {**package_event(version, status), "time": f"2026-03-02T{time}:00Z"}


def completed() -> None:
    """The running rollout reaches its last step, as the controller finishes it; the binding shown after."""
    from sluice.cli import pieces
    from sluice.domain import Principal

    admin = Principal("default", frozenset({"admin"}), "test")
    dep = pieces.registry().get_deployment("default", "fraud")
    assert dep.rollout is not None
    pieces.container().rollouts.finish(admin, dep, dep.rollout, "completed", "gates pass: complete", {})
    pieces.follows().get(admin, "fraud")


def following(capsys: pytest.CaptureFixture[str], packages: dict[str, Any]) -> None:
    """fraud:1 serves (package 2, pushed by hand); the deployment follows the group."""
    assert run_cli(capsys, "models", "push", "fraud", packages["arns"][1], "--allow-unapproved")[0] == 0
    assert run_cli(capsys, "deployments", "create", "fraud", "--model", "fraud")[0] == 0
    assert run_cli(capsys, "deployments", "follow", "fraud", "--registry", GROUP_ARN, "--rollout", "5,100 gate error_rate<=0.01")[0] == 0


def test_an_update_of_an_older_package_still_approved_rolls_nothing_back(capsys: pytest.CaptureFixture[str], packages: dict[str, Any]) -> None:
    """Packages 1 then 2 approved and rolled out; SageMaker then tells of a change to package 1
    that leaves it Approved (its description, its metadata): nothing starts, while 2's rollout
    runs or after it completed. Package 1 back to pending and approved again (a deliberate
    return to it) is rolled out again."""
    from sluice.cli import pieces

    following(capsys, packages)
    boto3.client("sagemaker", region_name=REGION).update_model_package(ModelPackageArn=packages["arns"][1], ModelApprovalStatus="Approved")

    def serving() -> tuple[dict[str, Any], str | None]:
        dep = pieces.registry().get_deployment("default", "fraud")
        return dep.policy, None if dep.rollout is None else f"{dep.rollout.model}:{dep.rollout.version} {dep.rollout.state}"

    assert delivered(at(1, "Approved", "09:00")) == {"default/fraud": "rolling_out"}
    completed()
    assert delivered(at(2, "Approved", "09:10")) == {"default/fraud": "rolling_out"}  # pushed as fraud:1 already
    assert delivered(at(1, "Approved", "09:15")) == {"default/fraud": "rolling_out"}  # an update while 2's rollout runs
    assert serving()[1] == "fraud:1 running"
    completed()
    assert pieces.registry().get_follow("default", "fraud").state == "completed"  # 2's end recorded
    assert delivered(at(1, "Approved", "09:20")) == {"default/fraud": "completed"}
    assert serving() == ({"kind": "single", "model": "fraud", "version": 1}, "fraud:1 completed")

    assert delivered(at(1, "PendingManualApproval", "09:30")) == {"default/fraud": "withdrawn"}
    assert delivered(at(1, "Approved", "09:40")) == {"default/fraud": "rolling_out"}
    assert serving()[1] == "fraud:2 running"
    last = pieces.registry().get_follow("default", "fraud").history[-1]
    assert (last.version, last.outcome) == ("1", "rolling_out") and "already pushed as fraud:2" in last.reason


def test_a_rejection_of_another_package_leaves_the_running_rollouts_end_to_be_recorded(
    capsys: pytest.CaptureFixture[str], packages: dict[str, Any]
) -> None:
    """Package 2, never approved, is rejected while package 1's rollout runs: the rejection is
    noted, and the rollout's end is still recorded on the binding."""
    from sluice.cli import pieces

    following(capsys, packages)
    assert delivered(at(1, "Approved", "09:00")) == {"default/fraud": "rolling_out"}
    assert delivered(at(2, "Rejected", "09:05")) == {"default/fraud": "rejected"}
    assert pieces.registry().get_deployment("default", "fraud").rollout.state == "running"  # type: ignore[union-attr]
    completed()
    shown = pieces.registry().get_follow("default", "fraud")
    assert shown.state == "completed"
    assert [(e.version, e.outcome) for e in shown.history] == [("2", "rejected"), ("1", "completed")]


def test_a_package_rejected_while_its_approval_is_pushed_is_not_rolled_out(capsys: pytest.CaptureFixture[str], packages: dict[str, Any]) -> None:
    """Two deliveries run at once (two invocations of the function): package 1's rejection
    (09:01) is recorded while its approval (09:00) is still being pulled. The push goes on, and
    no rollout of the rejected package starts."""
    from sluice.cli import pieces
    from sluice.handlers.registry_events import follower, handler
    from tests.support import LambdaContext

    following(capsys, packages)
    follower.cache_clear()
    rejections: list[dict[str, str]] = []

    def reject_meanwhile(**_: Any) -> None:
        if not rejections:
            boto3.client("sagemaker", region_name=REGION).update_model_package(ModelPackageArn=packages["arns"][0], ModelApprovalStatus="Rejected")
            rejections.append(handler(at(1, "Rejected", "09:01"), LambdaContext(function_name="sluice-registry-events"))["bindings"])

    follower().clients.client("s3", region=REGION).meta.events.register("before-call.s3.HeadObject", reject_meanwhile)
    assert handler(at(1, "Approved", "09:00"), LambdaContext(function_name="sluice-registry-events"))["bindings"] == {"default/fraud": "rejected"}
    assert rejections == [{"default/fraud": "rejected"}]
    dep = pieces.registry().get_deployment("default", "fraud")
    assert dep.rollout is None and dep.policy == {"kind": "single", "model": "fraud", "version": 1}
    shown = pieces.registry().get_follow("default", "fraud")
    assert shown.state == "failed" and [(e.version, e.outcome) for e in shown.history] == [("1", "rejected")]
    assert delivered(at(1, "Rejected", "09:01")) == {"default/fraud": "failed"}  # delivered again


def test_a_late_approval_never_rolls_out_a_package_rejected_since(capsys: pytest.CaptureFixture[str], packages: dict[str, Any]) -> None:
    """Package 1: approved 09:00, rejected 09:10, approved 09:20, rejected 09:30 (Rejected in
    SageMaker now). The 09:30 rejection is a new one, not the 09:10 one again; the 09:20 approval,
    delivered last, is older than it and rolls nothing out. And before a version pushed already
    is rolled out again, the registry is asked: an approval whose rejection has not come yet
    finds the package Rejected."""
    from sluice.cli import pieces

    following(capsys, packages)
    sagemaker = boto3.client("sagemaker", region_name=REGION)

    def rollout() -> str | None:
        running = pieces.registry().get_deployment("default", "fraud").rollout
        return None if running is None else running.state

    assert delivered(at(1, "Approved", "09:00")) == {"default/fraud": "rolling_out"}
    assert delivered(at(1, "Rejected", "09:10")) == {"default/fraud": "rejected"}
    sagemaker.update_model_package(ModelPackageArn=packages["arns"][0], ModelApprovalStatus="Rejected")
    assert delivered(at(1, "Rejected", "09:30")) == {"default/fraud": "rejected"}
    assert delivered(at(1, "Approved", "09:20")) == {"default/fraud": "failed"}
    assert rollout() == "aborted"

    assert delivered(at(1, "Approved", "09:40")) == {"default/fraud": "rejected"}  # its 09:50 rejection still on its way
    assert rollout() == "aborted"
    last = pieces.registry().get_follow("default", "fraud").history[-1]
    assert (last.version, last.outcome) == ("1", "rejected") and "is Rejected in SageMaker Model Registry" in last.reason
    assert [v.version for v in pieces.registry().list_versions("default", "fraud")] == [1, 2]


def _written_meanwhile(meanwhile: Callable[[], None]) -> Callable[[dict[str, Any]], dict[str, str]]:
    """The handler, whose first claim of a version finds `meanwhile` written on the binding
    since it was read (another invocation's write, landing between the read and the claim)."""
    from sluice.handlers.registry_events import follower, handler
    from tests.support import LambdaContext

    follower.cache_clear()
    registry = follower().follows.registry
    update = registry.update_follow
    pending = [meanwhile]

    def racing(follow: Any, **kw: Any) -> Any:
        if follow.state == "pushing" and pending:
            pending.pop()()
        return update(follow, **kw)

    registry.update_follow = racing  # type: ignore[method-assign]
    return lambda event: handler(event, LambdaContext(function_name="sluice-registry-events"))["bindings"]  # type: ignore[no-any-return]


def test_an_approval_whose_claim_meets_the_polls_write_is_taken_not_dropped(capsys: pytest.CaptureFixture[str], packages: dict[str, Any]) -> None:
    """The scheduled poll keeps an error on the binding between the event's read and its claim:
    the claim is made again on the binding as it is now (the approval was not taken elsewhere;
    answering so would lose it, since EventBridge does not deliver a success again)."""
    from sluice.cli import pieces
    from sluice.domain.errors import NotFound

    following(capsys, packages)
    follows = pieces.follows()
    handle = _written_meanwhile(lambda: follows.note_error("default", "fraud", NotFound("model package fraud/9 was not found")))
    assert handle(at(1, "Approved", "09:00")) == {"default/fraud": "rolling_out"}
    shown = pieces.registry().get_follow("default", "fraud")
    assert (shown.seen, [(e.version, e.outcome) for e in shown.history]) == ("1", [("1", "rolling_out")])
    dep = pieces.registry().get_deployment("default", "fraud")
    assert dep.rollout is not None and dep.rollout.version == 2
    assert pieces.registry().get_version("default", "fraud", 2).source["arn"] == packages["arns"][0]  # type: ignore[index]


def test_an_approval_whose_claim_meets_another_packages_event_is_decided_again(capsys: pytest.CaptureFixture[str], packages: dict[str, Any]) -> None:
    """Package 3's rejection (another invocation) is recorded between package 1's read and its
    claim: package 1's approval is weighed again on the binding as it is now, and taken."""
    from sluice.cli import pieces

    following(capsys, packages)
    other: list[dict[str, str]] = []
    handle = _written_meanwhile(lambda: other.append(delivered(at(3, "Rejected", "09:01"))))
    assert handle(at(1, "Approved", "09:00")) == {"default/fraud": "rolling_out"}
    assert other == [{"default/fraud": "rejected"}]
    shown = pieces.registry().get_follow("default", "fraud")
    assert (shown.seen, [(e.version, e.outcome) for e in shown.history]) == ("1", [("3", "rejected"), ("1", "rolling_out")])
    assert pieces.registry().get_deployment("default", "fraud").rollout.version == 2  # type: ignore[union-attr]


def test_an_approval_overtaken_between_its_read_and_its_claim_by_a_later_one_is_superseded(
    capsys: pytest.CaptureFixture[str], packages: dict[str, Any]
) -> None:
    """Package 3's approval (09:05) is taken between the read and the claim of package 1's
    (09:00): weighed again, package 1's is superseded, never claimed over package 3."""
    from sluice.cli import pieces

    following(capsys, packages)
    other: list[dict[str, str]] = []
    handle = _written_meanwhile(lambda: other.append(delivered(at(3, "Approved", "09:05"))))  # model data without a model
    assert handle(at(1, "Approved", "09:00")) == {"default/fraud": "superseded by version 3"}
    assert other == [{"default/fraud": "conversion_failed"}]
    shown = pieces.registry().get_follow("default", "fraud")
    assert (shown.seen, [(e.version, e.outcome) for e in shown.history]) == ("3", [("3", "conversion_failed")])
    assert [v.version for v in pieces.registry().list_versions("default", "fraud")] == [1]


def test_an_approval_whose_claim_meets_other_writes_at_every_try_fails_to_be_delivered_again(
    capsys: pytest.CaptureFixture[str], packages: dict[str, Any]
) -> None:
    """Other invocations write the binding (rejections of other packages) between each read and
    claim of package 1's approval: after 5 tries nothing is taken, and the invocation fails,
    since EventBridge and Lambda deliver a success never again. Delivered again (Lambda's retry
    of the failed invocation), the approval is taken and rolled out; the poll meanwhile takes nothing."""
    from sluice.cli import pieces
    from sluice.convert.follow import CLAIM_TRIES, DeliverAgain
    from sluice.domain.follows import FollowEvent
    from sluice.handlers.registry_events import follower, handler
    from tests.support import LambdaContext

    following(capsys, packages)
    follower.cache_clear()
    follows = follower().follows
    registry = follows.registry
    update, met = registry.update_follow, [0]

    def racing(follow: Any, **kw: Any) -> Any:
        if follow.state == "pushing":  # another invocation's write lands first, at every claim
            met[0] += 1
            follows.record("default", "fraud", FollowEvent(str(100 + met[0]), "rejected", follows.clock(), "another package rejected"))
        return update(follow, **kw)

    registry.update_follow = racing  # type: ignore[method-assign]
    context = LambdaContext(function_name="sluice-registry-events")
    with pytest.raises(DeliverAgain) as failed:
        handler(at(1, "Approved", "09:00"), context)
    registry.update_follow = update  # type: ignore[method-assign]
    [answer] = failed.value.done.values()
    assert met[0] >= CLAIM_TRIES and "nothing was taken; the event's invocation fails, so that Lambda delivers it again" in answer
    shown = pieces.registry().get_follow("default", "fraud")
    assert shown.seen != "1" and shown.error is not None and "delivers it again" in shown.error.message
    assert handler({"poll": "follows"}, context) == {"bindings": {"default/fraud": shown.state}}
    assert handler(at(1, "Approved", "09:00"), context) == {"bindings": {"default/fraud": "rolling_out"}}  # delivered again
    shown = pieces.registry().get_follow("default", "fraud")
    assert shown.seen == "1" and shown.last_of("1").outcome == "rolling_out"  # type: ignore[union-attr]
    assert pieces.registry().get_deployment("default", "fraud").rollout.version == 2  # type: ignore[union-attr]
