"""`sluice models push NAME models:/…` against a real MLflow: a SQLite tracking store and a file
artifact store, real scikit-learn and XGBoost models logged, registered and aliased here. The
version is converted, checked on the logged input example, answers like the original, and
remembers where it came from; what cannot be pushed is a message and a non-zero exit."""

from __future__ import annotations

import contextlib
import importlib.util
import json
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

from tests.integration.conftest import run_cli

if TYPE_CHECKING:
    from collections.abc import Iterator

    from fastapi.testclient import TestClient

    from sluice.domain import Principal
    from sluice.wiring import Container

# Found, not imported: every worker collects this module, and MLflow (with pandas) costs seconds
# to import; only the worker that runs these tests pays for it, in `tracking`.
needs_mlflow = pytest.mark.skipif(
    not all(importlib.util.find_spec(m) for m in ("mlflow", "skops", "skl2onnx", "xgboost")), reason="needs the mlflow and convert extras"
)
pytestmark = pytest.mark.usefixtures("cli_home")
NAMES = ["amount", "age", "hour", "merchant_risk"]


@pytest.fixture(scope="module")
def tracking(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """One tracking store for the module: `fraud` version 1 (scikit-learn), version 2 (XGBoost,
    alias `champion`), and `opaque` (a python_function model only)."""
    import mlflow
    import pandas as pd
    import xgboost
    from sklearn.linear_model import LogisticRegression

    root = tmp_path_factory.mktemp("mlflow")
    uri = f"sqlite:///{root}/mlruns.db"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_DISABLE_TELEMETRY", "true")
        mp.setenv("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
        mp.delenv("MLFLOW_TRACKING_URI", raising=False)
        mlflow.set_tracking_uri(uri)
        experiment = mlflow.create_experiment("fraud", artifact_location=(root / "artifacts").as_uri())
        rng = np.random.default_rng(0)
        x = pd.DataFrame(rng.normal(size=(300, 4)), columns=NAMES)
        y = (x["amount"] + 0.5 * x["merchant_risk"] > 0).astype(int)
        sk = LogisticRegression().fit(x, y)
        xg = xgboost.XGBRegressor(n_estimators=8, max_depth=3).fit(x, x["amount"] * 2 + x["age"])
        runs = {}
        with mlflow.start_run(experiment_id=experiment) as run:
            mlflow.sklearn.log_model(
                sk, name="model", input_example=x.head(5),  # in MLflow 3's default format, skops
                pip_requirements=["scikit-learn"], registered_model_name="fraud",
            )  # fmt: skip
            runs["sklearn"] = run.info.run_id
        with mlflow.start_run(experiment_id=experiment) as run:
            mlflow.xgboost.log_model(xg, name="model", input_example=x.head(5), pip_requirements=["xgboost"], registered_model_name="fraud")
            runs["xgboost"] = run.info.run_id

        class Opaque(mlflow.pyfunc.PythonModel):
            def predict(self, context: Any, model_input: Any, params: Any = None) -> Any:
                return model_input

        with mlflow.start_run(experiment_id=experiment):
            mlflow.pyfunc.log_model(name="model", python_model=Opaque(), pip_requirements=[], registered_model_name="opaque")
        with mlflow.start_run(experiment_id=experiment):
            import onnx
            from skl2onnx import to_onnx

            converted = to_onnx(sk, x.to_numpy(np.float32)[:2], target_opset={"": 17, "ai.onnx.ml": 3})
            mlflow.onnx.log_model(onnx.load_from_string(converted.SerializeToString()), name="model",
                                  signature=signature_of(sk, x), pip_requirements=[], registered_model_name="scorer")  # fmt: skip
        mlflow.MlflowClient().set_registered_model_alias("fraud", "champion", "2")
        mp.setenv("MLFLOW_TRACKING_URI", "")
        yield {"uri": uri, "runs": runs, "x": x, "sklearn": sk, "xgboost": xg}


def signature_of(model: Any, x: Any) -> Any:
    from mlflow.models import infer_signature

    return infer_signature(x.head(5), model.predict(x.head(5)))


def pushed(capsys: pytest.CaptureFixture[str], *args: str) -> str:
    """What `sluice models push ARGS...` printed, having succeeded."""
    code, out, err = run_cli(capsys, "models", "push", *args)
    assert code == 0, err
    return out


def shown(capsys: pytest.CaptureFixture[str], *args: str) -> dict[str, Any]:
    """What `sluice models show ARGS...` printed, read."""
    code, out, err = run_cli(capsys, "models", "show", *args)
    assert code == 0, err
    return json.loads(out)


def predictions(capsys: pytest.CaptureFixture[str], deployment: str, rows: np.ndarray) -> list[Any]:
    code, out, err = run_cli(capsys, "predict", deployment, "--inputs", json.dumps(rows.tolist()))
    assert code == 0, err
    return [p["prediction"] for p in json.loads(out)["predictions"]]


@needs_mlflow
def test_a_version_is_converted_checked_on_the_input_example_and_remembers_its_source(
    capsys: pytest.CaptureFixture[str], tracking: dict[str, Any]
) -> None:
    out = pushed(capsys, "fraud", "models:/fraud/1", "--tracking-uri", tracking["uri"])
    assert "converted models:/fraud/1's sklearn flavor, checked on 5 rows of the logged input example" in out
    assert "labels agree on 100.00%" in out
    version = shown(capsys, "fraud", "--version", "1")
    assert version["signature"]["inputs"][0]["feature_names"] == NAMES  # MLflow's column schema
    assert version["source"] == {
        "registry": "mlflow", "uri": "models:/fraud/1", "tracking_uri": tracking["uri"], "name": "fraud", "version": 1,
        "run_id": tracking["runs"]["sklearn"], "alias": None, "flavor": "sklearn",
    }  # fmt: skip
    assert run_cli(capsys, "deployments", "create", "fraud", "--model", "fraud")[0] == 0
    rows = tracking["x"].to_numpy()[:20]
    assert predictions(capsys, "fraud", rows) == [int(c) for c in tracking["sklearn"].predict(tracking["x"].head(20))]


@needs_mlflow
def test_an_alias_and_a_run_resolve_to_their_version_and_run(
    capsys: pytest.CaptureFixture[str], tracking: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MLFLOW_TRACKING_URI", tracking["uri"])  # the environment's, as MLflow's own tools read it
    assert "converted models:/fraud@champion's xgboost flavor" in pushed(capsys, "champ", "models:/fraud@champion")
    run = tracking["runs"]["xgboost"]
    pushed(capsys, "champ", f"runs:/{run}/model")
    lineage = shown(capsys, "champ")["lineage"]
    assert [entry["source"]["alias"] for entry in lineage] == ["champion", None]
    assert lineage[0]["source"]["version"] == 2
    assert [entry["source"]["run_id"] for entry in lineage] == [run, run]
    assert lineage[1]["source"]["artifact_path"] == "model"
    assert run_cli(capsys, "deployments", "create", "champ", "--model", "champ")[0] == 0
    rows = tracking["x"].to_numpy()[:10]
    want = tracking["xgboost"].predict(tracking["x"].head(10))
    assert np.allclose(np.asarray(predictions(capsys, "champ", rows), dtype=np.float64).ravel(), want, atol=1e-4)


@needs_mlflow
def test_an_onnx_flavor_is_pushed_as_it_is_with_the_signatures_columns(
    capsys: pytest.CaptureFixture[str], tracking: dict[str, Any]
) -> None:
    assert "took models:/scorer/1's onnx flavor as it is" in pushed(capsys, "scorer", "models:/scorer/1", "--tracking-uri", tracking["uri"])
    version = shown(capsys, "scorer", "--version", "1")
    assert version["signature"]["inputs"][0]["feature_names"] == NAMES
    assert version["source"]["flavor"] == "onnx" and version["source"]["version"] == 1


@needs_mlflow
def test_mlflow_signatures_map_to_feature_names_or_a_width_or_a_refusal() -> None:
    from mlflow.models import Model, ModelSignature
    from mlflow.types import ColSpec, Schema, TensorSpec

    from sluice.convert.mlflow_models import Fetched, signature_hint
    from sluice.domain.errors import Unprocessable

    def hint(inputs: Schema) -> Any:
        model = Model(signature=ModelSignature(inputs=inputs))
        return signature_hint(Fetched("models:/m/1", None, model, {}))  # type: ignore[arg-type]

    assert hint(Schema([ColSpec("double", "a"), ColSpec("long", "b"), ColSpec("boolean", "c")])) == (["a", "b", "c"], 3)
    assert hint(Schema([TensorSpec(np.dtype("float32"), (-1, 7))])) == (None, 7)
    with pytest.raises(Unprocessable, match="takes column 'city' of type string"):
        hint(Schema([ColSpec("double", "a"), ColSpec("string", "city")]))


@needs_mlflow
@pytest.mark.parametrize(
    ("uri", "message"),
    [
        ("models:/nosuch/1", "models:/nosuch/1 was not found in MLflow at"),
        ("models:/fraud/9", "models:/fraud/9 was not found in MLflow at"),
        ("models:/fraud@nobody", "models:/fraud@nobody was not found in MLflow at"),
        ("runs:/0123456789abcdef/model", "runs:/0123456789abcdef/model was not found in MLflow at"),
        ("models:/opaque/1", "has the flavors python_function; sluice takes a model with an onnx, sklearn, xgboost, lightgbm or pytorch flavor"),
        ("models:/fraud", "is not an MLflow model URI"),
        ("models:/fraud/Production", "models:/fraud/Production: a version is a number or latest (or use models:/fraud@ALIAS)"),
    ],
)
def test_what_cannot_be_pushed_is_a_message_and_a_non_zero_exit(
    capsys: pytest.CaptureFixture[str], tracking: dict[str, Any], uri: str, message: str
) -> None:
    code, _, err = run_cli(capsys, "models", "push", "bad", uri, "--tracking-uri", tracking["uri"])
    assert code == 2 and message in err and "Traceback" not in err, err
    assert run_cli(capsys, "models", "show", "bad")[0] == 2  # nothing was pushed


@needs_mlflow
def test_a_tracking_uri_mlflow_cannot_use_or_none_is_a_message(capsys: pytest.CaptureFixture[str], tracking: dict[str, Any]) -> None:
    code, _, err = run_cli(capsys, "models", "push", "bad", "models:/fraud/1", "--tracking-uri", "nosuch://alice:s3cret@host/x")
    assert code == 2 and "nosuch://host/x" in err and "Traceback" not in err, err
    assert "s3cret" not in err  # MLflow's own message quotes the URI: sluice's does not pass its password on
    code, _, err = run_cli(capsys, "models", "push", "bad", "models:/fraud/1")
    assert code == 2 and "give --tracking-uri or set MLFLOW_TRACKING_URI" in err, err


def test_a_tracking_uri_is_kept_without_its_credentials() -> None:
    from sluice.convert.mlflow_models import without_credentials

    assert without_credentials("https://alice:s3cret@mlflow.example.com:5000/api?token=abc#x") == "https://mlflow.example.com:5000/api"
    assert without_credentials("databricks://profile") == "databricks://profile"


def test_the_api_returns_a_versions_source(client: TestClient, keys: dict[str, str], demo: Container, acme: Principal) -> None:
    from tests.models import embed_model

    source = {"registry": "mlflow", "uri": "models:/fraud@champion", "name": "fraud", "version": 2, "alias": "champion"}
    demo.models.push(acme, "pushed", embed_model(), source=source)
    got = client.get("/api/v1/models/pushed/versions/1", headers={"Authorization": f"Bearer {keys['acme']}"}).json()
    assert got["source"] == source
    assert client.get("/api/v1/models/iris/versions/1", headers={"Authorization": f"Bearer {keys['acme']}"}).json()["source"] is None


# Follow bindings ------------------------------------------------------------------------
def register(tracking: dict[str, Any], name: str, like: str = "fraud/1") -> int:
    """A new version of registered model `name`, made from the artifacts of `like`."""
    import mlflow

    client = mlflow.MlflowClient(tracking_uri=tracking["uri"], registry_uri=tracking["uri"])
    model, number = like.split("/")
    original = client.get_model_version(model, number)
    with contextlib.suppress(mlflow.exceptions.MlflowException):  # made by an earlier call
        client.create_registered_model(name)
    return int(client.create_model_version(name, original.source, run_id=original.run_id).version)


def polled(capsys: pytest.CaptureFixture[str]) -> str:
    code, out, err = run_cli(capsys, "registries", "poll")
    assert code == 0, out + err
    return out


def binding(capsys: pytest.CaptureFixture[str], deployment: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, "deployments", "follow", deployment, "--show")
    assert code == 0, err
    return json.loads(out)


@needs_mlflow
def test_a_followed_alias_that_moves_is_pushed_once_rolled_out_and_tagged_back(
    capsys: pytest.CaptureFixture[str], tracking: dict[str, Any]
) -> None:
    import mlflow

    from sluice.cli import pieces

    client = mlflow.MlflowClient(tracking_uri=tracking["uri"], registry_uri=tracking["uri"])
    first = register(tracking, "moving")
    client.set_registered_model_alias("moving", "champion", str(first))
    pushed(capsys, "moving", f"models:/moving/{first}", "--tracking-uri", tracking["uri"])
    assert run_cli(capsys, "deployments", "create", "moving", "--model", "moving")[0] == 0
    code, _, err = run_cli(
        capsys, "deployments", "follow", "moving", "--registry", "models:/moving@champion", "--tracking-uri", tracking["uri"],
        "--rollout", "1,50,100 every 1s gate error_rate<=0.01 min 100", "--tag-back",
    )  # fmt: skip
    assert code == 0, err
    # The alias points at what the deployment serves already: nothing is pushed again.
    assert polled(capsys) == "default/moving: completed\n"
    assert binding(capsys, "moving")["history"][-1]["reason"] == "already pushed as moving:1, which the deployment serves already"

    second = register(tracking, "moving")
    client.set_registered_model_alias("moving", "champion", str(second))
    stale = pieces.follows().registry.get_follow("default", "moving")  # what a second poller read
    assert polled(capsys) == "default/moving: rolling_out\n"
    shown_now = binding(capsys, "moving")
    assert (shown_now["state"], shown_now["seen"]) == ("rolling_out", str(second))
    last = shown_now["history"][-1]
    assert last["model_version"] == 2 and "pushed as moving:2; rollout started" in last["reason"]
    version = shown(capsys, "moving", "--version", "2")["source"]
    assert (version["uri"], version["alias"], version["version"]) == ("models:/moving@champion", "champion", second)
    dep = pieces.registry().get_deployment("default", "moving")
    assert dep.rollout is not None and (dep.rollout.model, dep.rollout.version) == ("moving", 2)
    tags = client.get_model_version("moving", str(second)).tags
    assert tags == {"sluice.deployment": "moving", "sluice.revision": str(dep.revision)}

    # A poller that read the binding before the claim is refused: the version is not pushed twice.
    assert pieces.follower().take(stale, str(second), lambda _: pytest.fail("pulled twice"), {"registry": "none"}) == "taken elsewhere"
    assert polled(capsys) == "default/moving: rolling_out\n"
    assert [v["version"] for v in shown(capsys, "moving")["versions"]] == [1, 2]

    # A gate that fails rolls the deployment back; the next poll records it on the binding.
    for _ in range(2):
        pieces.predictions().stats.request(("default", "moving", dep.revision, "variant:candidate"), 0.0, ok=False)
    pieces.rollouts().tick("default", "moving")
    assert polled(capsys) == "default/moving: failed\n"
    last = binding(capsys, "moving")["history"][-1]
    assert last["outcome"] == "rolled_back" and "gate error_rate<=0.01 fails" in last["reason"], last


@needs_mlflow
def test_a_version_that_cannot_be_converted_is_recorded_with_its_reason(
    capsys: pytest.CaptureFixture[str], tracking: dict[str, Any]
) -> None:
    pushed(capsys, "scored", "models:/fraud/1", "--tracking-uri", tracking["uri"])
    assert run_cli(capsys, "deployments", "create", "scored", "--model", "scored")[0] == 0
    code, _, err = run_cli(
        capsys, "deployments", "follow", "scored", "--registry", "models:/opaque/latest", "--tracking-uri", tracking["uri"],
        "--rollout", "1,100 gate error_rate<=0.01",
    )  # fmt: skip
    assert code == 0, err
    assert polled(capsys) == "default/scored: conversion_failed\n"
    last = binding(capsys, "scored")["history"][-1]
    assert last["outcome"] == "conversion_failed" and "has the flavors python_function" in last["reason"]
    assert [v["version"] for v in shown(capsys, "scored")["versions"]] == [1]  # nothing pushed
    assert polled(capsys) == "default/scored: failed\n"  # the same version is not tried again
    code, out, _ = run_cli(capsys, "deployments", "follow", "--list")
    assert "scored" in out and "conversion_failed" in out
    assert run_cli(capsys, "deployments", "unfollow", "scored")[0] == 0
    assert polled(capsys) == "no deployment follows a registry\n"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--registry", "models:/fraud/3", "--rollout", "1,100 gate error_rate<=0.01"], "is not something to follow"),
        (["--registry", "models:/fraud@champion", "--rollout", "1,100 every soon gate error_rate<=0.01"], "is not a duration"),
        (["--registry", "models:/fraud@champion", "--rollout", "1,100"], "is not a rollout plan"),
        (["--registry", "models:/fraud@champion", "--rollout", "1,100 gate x>1", "--tracking-uri", "http://a:b@h"], "unknown gate metric"),
        (["--registry", "models:/fraud@champion", "--rollout", "1,100 gate error_rate<=0.01", "--tracking-uri", "http://alice:s3cret@h"], "without credentials"),
        (["--registry", "models:/fraud@champion", "--rollout", "1,100 gate error_rate<=0.01", "--tracking-uri", "sqlite:///x.db"], "deployment 'bound' not found"),
        (["--show"], "deployment 'bound' follows no registry"),
    ],
)
def test_a_binding_that_cannot_be_made_is_a_message(capsys: pytest.CaptureFixture[str], args: list[str], message: str) -> None:
    code, _, err = run_cli(capsys, "deployments", "follow", "bound", *args)
    assert code == 2 and message in err and "Traceback" not in err and "s3cret" not in err, err
