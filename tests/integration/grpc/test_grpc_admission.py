"""Admission over gRPC, against an in-process server: each inference (a unary call, a stream's
message) is one of the process's predictions in flight; past `SLUICE_MAX_PREDICTIONS_IN_FLIGHT`
a unary call is UNAVAILABLE at once and a stream's message an error message, the stream staying
open; the slot comes back with the answer."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.integration.grpc.conftest import auth, fails, run_server
from tests.integration.test_admission import GatedRuntime
from tests.integration.traffic_fakes import add_fake

if TYPE_CHECKING:
    from sluice.domain import Principal
    from sluice.wiring import Container

grpcclient = pytest.importorskip("tritonclient.grpc")


def _silent(stop: Any) -> Any:
    """A call's requests: none, until `stop` (a call opened whose message never comes)."""
    stop.wait()
    return
    yield


def _opener(channel: Any, method: str = "ModelInfer") -> Any:
    """`method` of the channel as a call of raw request messages (sent as they come)."""
    return channel.stream_unary(f"/inference.GRPCInferenceService/{method}", request_serializer=lambda b: b, response_deserializer=lambda b: b)


def _row() -> Any:
    tensor = grpcclient.InferInput("input", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.array([[0.1, 0.2, 0.3, 0.4]], dtype=np.float32))
    return tensor


def test_an_inference_past_the_limit_is_unavailable_at_once(served: Container, acme: Principal, keys: dict[str, str]) -> None:
    runtime = GatedRuntime()
    served.runtimes["sagemaker"] = runtime
    add_fake(served.registry, "acme", "slow", gated=True)
    served.deployments.create(acme, "slow", {"kind": "single", "model": "slow", "version": 1})
    served.settings.admission.max_predictions_in_flight = 1
    headers = auth(keys["acme"])
    with run_server(served) as url, ThreadPoolExecutor(1) as pool:
        client = grpcclient.InferenceServerClient(url)
        held = pool.submit(client.infer, "slow", [_row()], headers=headers)
        deadline = time.monotonic() + 20
        while runtime.waiting < 1 and time.monotonic() < deadline:
            time.sleep(0.01)
        refused = fails(client.infer, "iris", [_iris()], headers=headers)
        assert refused.status() == "StatusCode.UNAVAILABLE"
        assert "at capacity" in refused.message()
        answers: list[Any] = []
        stream = grpcclient.InferenceServerClient(url)
        stream.start_stream(callback=lambda result, error: answers.append(error or result), headers=headers)
        try:
            stream.async_stream_infer("iris", [_iris()])
            while not answers and time.monotonic() < deadline:
                time.sleep(0.01)
            assert answers and "at capacity" in str(answers[0])  # an error message; the stream stays open
            runtime.gate.set()
            assert held.result(timeout=30).as_numpy("y").tolist() == [[1.0]]
            stream.async_stream_infer("iris", [_iris()])
            while len(answers) < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert answers[1].as_numpy("output_label").tolist() == [b"setosa"]
        finally:
            stream.stop_stream()
        assert client.infer("iris", [_iris()], headers=headers).as_numpy("output_label").tolist() == [b"setosa"]


def _iris() -> Any:
    tensor = grpcclient.InferInput("input", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.array([[5.1, 3.5, 1.4, 0.2]], dtype=np.float32))
    return tensor


def _features(count: int) -> Any:
    tensor = grpcclient.InferInput("input", [1, count], "FP32")
    tensor.set_data_from_numpy(np.ones((1, count), dtype=np.float32))
    return tensor


# Each kind of unary call: the model, its input, and the status it ends with (None: answered).
CALLS: dict[str, tuple[str, Any, str | None]] = {
    "answered": ("iris", _iris, None),
    "bad shape": ("iris", lambda: _features(3), "StatusCode.INVALID_ARGUMENT"),
    "unknown model": ("nope", _iris, "StatusCode.NOT_FOUND"),
    "unknown version": ("iris", _iris, "StatusCode.NOT_FOUND"),
}


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(st.lists(st.sampled_from(sorted(CALLS)), min_size=1, max_size=10))
def test_every_unary_call_gives_back_its_slots_and_is_counted_once(served: Container, acme: Principal, keys: dict[str, str], mix: list[str]) -> None:
    """One slot for the key and one for the process: whatever a call ends with, the next one
    is admitted (a slot kept by an earlier call would refuse it), and each is one request."""
    from sluice.metrics import PrometheusMetrics
    from tests.integration.test_metrics import value

    served.settings.admission.max_in_flight_per_key = 1
    served.settings.admission.max_predictions_in_flight = 1
    served.telemetry.sink = sink = PrometheusMetrics()  # type: ignore[union-attr]
    assert served.admission.per_key.limit == served.admission.capacity.limit == 1  # type: ignore[union-attr]
    with run_server(served) as url:
        client = grpcclient.InferenceServerClient(url)
        for kind in mix:
            model, tensor, status = CALLS[kind]
            version = "99" if kind == "unknown version" else ""
            if status is None:
                assert client.infer(model, [tensor()], headers=auth(keys["acme"])).as_numpy("output_label").tolist() == [b"setosa"]
            else:
                assert fails(client.infer, model, [tensor()], model_version=version, headers=auth(keys["acme"])).status() == status
    text = sink.exposition("acme").decode()
    assert value(text, "ml_inference_requests_total") == len(mix)
    assert value(text, "ml_inference_errors_total") == sum(1 for kind in mix if CALLS[kind][2] is not None)
    assert value(text, "ml_inference_refused_total") == 0


def test_calls_without_a_working_key_hold_no_slot_while_they_wait_for_their_message(served: Container, keys: dict[str, str]) -> None:
    """Calls opened with no key (or a wrong one) and no message ever sent are refused as they
    open, so they hold none of the worker's concurrent calls: a caller with a key is answered."""
    import threading

    import grpc

    served.settings.serve.grpc_max_concurrent_rpcs = 4
    stop = threading.Event()

    with run_server(served) as url, grpc.insecure_channel(url) as channel:
        hold = _opener(channel)
        held = [hold.future(_silent(stop), metadata=m) for m in [()] * 4 + [(("authorization", "Bearer sk_no_such_key"),)] * 4]
        try:
            for call in held:
                assert call.exception(timeout=10).code() == grpc.StatusCode.UNAUTHENTICATED  # type: ignore[union-attr]
            client = grpcclient.InferenceServerClient(url)
            tensor = grpcclient.InferInput("input", [1, 4], "FP32")
            tensor.set_data_from_numpy(np.asarray([[6.7, 3.0, 5.2, 2.3]], dtype=np.float32))
            answer = client.infer("iris", [tensor], headers={"authorization": f"Bearer {keys['acme']}"})
            assert answer.as_numpy("output_label").tolist() == [b"virginica"]
        finally:
            stop.set()



def _hold(url: str, key: str | None, n: int, stop: Any, method: str = "ModelInfer") -> Any:
    """A thread keeping `n` calls of `key` (None: no key) open, their message never sent, each
    one ended opened again at once, until `stop`."""
    import threading

    import grpc

    def run() -> None:
        with grpc.insecure_channel(url) as channel:
            hold = _opener(channel, method)
            metadata = (("authorization", f"Bearer {key}"),) if key else ()
            calls: list[Any] = []
            while not stop.is_set():
                calls = [c for c in calls if not c.done()]
                calls += [hold.future(_silent(stop), metadata=metadata) for _ in range(n - len(calls))]
                stop.wait(0.02)
            for call in calls:
                call.cancel()

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread


def _infer_iris(url: str, key: str) -> Any:
    client = grpcclient.InferenceServerClient(url)
    tensor = grpcclient.InferInput("input", [1, 4], "FP32")
    tensor.set_data_from_numpy(np.asarray([[6.7, 3.0, 5.2, 2.3]], dtype=np.float32))
    return client.infer("iris", [tensor], headers=auth(key))


def test_a_call_whose_message_does_not_arrive_in_time_is_cut_off(served: Container, keys: dict[str, str]) -> None:
    """A call opened with a working key waits `SLUICE_BODY_TIMEOUT_S` for its message, as an
    HTTP body does, then ends DEADLINE_EXCEEDED: the slot it held is free again."""
    import threading

    import grpc

    served.settings.limits.body_timeout_s = 0.5
    stop = threading.Event()

    with run_server(served) as url, grpc.insecure_channel(url) as channel:
        hold = _opener(channel)
        try:
            started = time.monotonic()
            failed = hold.future(_silent(stop), metadata=(("authorization", f"Bearer {keys['acme_predict']}"),)).exception(timeout=10)
            assert failed.code() == grpc.StatusCode.DEADLINE_EXCEEDED, failed  # type: ignore[union-attr]
            assert "did not arrive within 0.5 s" in failed.details()  # type: ignore[union-attr]
            assert time.monotonic() - started < 5
            assert _infer_iris(url, keys["acme_predict"]).as_numpy("output_label").tolist() == [b"virginica"]  # the unary path answers
        finally:
            stop.set()


def test_a_call_whose_key_is_revoked_while_its_message_comes_is_refused(served: Container, acme: Principal) -> None:
    """A unary call opened with a working key, whose key is revoked before its message has
    come, is refused (UNAUTHENTICATED) as a call opened after the revocation is."""
    import threading

    import grpc
    from tritonclient.grpc import service_pb2 as pb

    from sluice.services.keys import split_key

    _, key = served.keys.create("acme", ["predict"])
    request = pb.ModelInferRequest(model_name="iris")
    request.inputs.add(name="input", datatype="FP32", shape=[1, 4])
    request.raw_input_contents.append(np.asarray([[6.7, 3.0, 5.2, 2.3]], dtype=np.float32).tobytes())
    revoked = threading.Event()

    def late() -> Any:  # the call opens now; its message comes once the key is revoked
        revoked.wait()
        yield request.SerializeToString()

    with run_server(served) as url, grpc.insecure_channel(url) as channel:
        assert _infer_iris(url, key).as_numpy("output_label").tolist() == [b"virginica"]  # the key works, and is in memory
        call = _opener(channel).future(late(), metadata=tuple(auth(key).items()))
        time.sleep(0.3)  # the call is open, waiting for its message
        served.keys.revoke(acme, split_key(key) or "")
        revoked.set()
        failed = call.exception(timeout=10)
        assert failed is not None and failed.code() == grpc.StatusCode.UNAUTHENTICATED, failed  # type: ignore[union-attr]


def test_public_calls_held_open_without_a_key_take_none_of_the_workers_calls(served: Container, keys: dict[str, str]) -> None:
    """ServerLive, ServerReady and ServerMetadata need no key: held open in any number, their
    message never sent, they leave every call of the worker to the tenants with keys."""
    import threading

    served.settings.serve.grpc_max_concurrent_rpcs = 4
    served.settings.limits.body_timeout_s = 5.0
    stop = threading.Event()
    with run_server(served) as url:
        holders = [_hold(url, None, 4, stop, method) for method in ("ServerLive", "ServerReady", "ServerMetadata")]
        try:
            time.sleep(0.5)
            answered = fails(_infer_iris, url, keys["globex"])  # globex has no iris: its own NOT_FOUND, never RESOURCE_EXHAUSTED
            assert answered.status() == "StatusCode.NOT_FOUND", answered
        finally:
            stop.set()
            for holder in holders:
                holder.join(10)


def test_one_tenant_holding_every_call_open_cannot_keep_another_tenant_out(served: Container, keys: dict[str, str]) -> None:
    """One key keeps every call a worker runs open without its message, reopening each as it
    ends: another tenant retrying as told is served within a few seconds, because a waiting
    call is cut off after `SLUICE_BODY_TIMEOUT_S` and, while another tenant asks, a tenant
    gets no call above its share."""
    import threading

    served.settings.serve.grpc_max_concurrent_rpcs = 4
    served.settings.limits.body_timeout_s = 1.0
    stop = threading.Event()
    with run_server(served) as url:
        holder = _hold(url, keys["acme_predict"], 4, stop)
        try:
            time.sleep(0.5)
            refused = fails(_infer_iris, url, keys["globex"])  # every call is acme's
            assert refused.status() == "StatusCode.RESOURCE_EXHAUSTED", refused
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                answered = fails(_infer_iris, url, keys["globex"])  # globex has no iris: its own NOT_FOUND once served
                if answered.status() != "StatusCode.RESOURCE_EXHAUSTED":
                    break
                time.sleep(0.2)
            assert answered.status() == "StatusCode.NOT_FOUND", answered
        finally:
            stop.set()
            holder.join(10)


def test_a_call_its_client_gives_up_on_is_counted_once_as_cancelled(served: Container, acme: Principal, keys: dict[str, str]) -> None:
    """A call cancelled by its client's deadline while the backend works is a request counted
    once, as `cancelled` (499) under its deployment, as over HTTP (it was counted nowhere), and
    its backend call cancelled."""
    from sluice.metrics import PrometheusMetrics
    from tests.integration.test_metrics import value

    runtime = GatedRuntime()
    served.runtimes["sagemaker"] = runtime
    served.telemetry.sink = PrometheusMetrics()
    add_fake(served.registry, "acme", "slow", gated=True)
    served.deployments.create(acme, "slow", {"kind": "single", "model": "slow", "version": 1})
    with run_server(served) as url:
        client = grpcclient.InferenceServerClient(url)
        for _ in range(3):
            assert fails(client.infer, "slow", [_row()], headers=auth(keys["acme"]), client_timeout=0.3).status() == "StatusCode.DEADLINE_EXCEEDED"
        deadline = time.monotonic() + 20
        while runtime.waiting and time.monotonic() < deadline:
            time.sleep(0.01)
        assert runtime.waiting == 0  # the gate still shut: each backend call was cancelled
        runtime.gate.set()
    text = served.telemetry.sink.exposition("acme").decode()  # type: ignore[union-attr]
    assert value(text, "ml_inference_errors_total", tenant="acme", deployment="slow", status="499", code="cancelled") == 3
    assert value(text, "ml_inference_requests_total", tenant="acme", deployment="slow") == 3


def test_an_inference_refused_at_the_workers_call_cap_is_counted_as_refused_and_failed(served: Container, keys: dict[str, str]) -> None:
    """A call refused because the worker's gRPC calls are all taken is counted as every door's
    refusals are (`ml_inference_refused_total`), and a prediction refused as a failed request."""
    import threading

    from sluice.metrics import PrometheusMetrics

    served.settings.serve.grpc_max_concurrent_rpcs = 1
    served.telemetry.sink = PrometheusMetrics()
    stop = threading.Event()
    with run_server(served) as url:
        holder = _hold(url, keys["acme_predict"], 1, stop)
        try:
            time.sleep(0.5)
            refused = [fails(_infer_iris, url, keys["acme_predict"]).status() for _ in range(3)]
        finally:
            stop.set()
            holder.join(10)
    assert refused == ["StatusCode.RESOURCE_EXHAUSTED"] * 3
    assert sum(served.telemetry.refusals.values()) >= 3
    text = served.telemetry.sink.exposition("acme").decode()  # type: ignore[union-attr]
    assert any(line.startswith("ml_inference_refused_total") for line in text.splitlines()), text


@pytest.mark.parametrize("how", ["unary", "stream", "streams"])
def test_requests_refused_by_their_rate_are_counted_on_every_door(tmp_path: Any, acme: Principal, how: str) -> None:
    """Six requests at three a minute: three answered, three 429s (RESOURCE_EXHAUSTED), and all
    six counted, whether they come as unary calls, as one stream's messages, or as streams of
    one message each (refused as they open, before any message is read)."""
    from tritonclient.utils import InferenceServerException

    from sluice.demo import install_demo
    from sluice.metrics import PrometheusMetrics
    from sluice.settings import Settings
    from sluice.wiring import Container
    from tests.conftest import MODELS
    from tests.integration.test_metrics import value

    container = Container.from_settings(Settings(mode="local", home=tmp_path / "home", rate_limit="3/minute"))
    install_demo(container, acme, MODELS)
    container.telemetry.sink = PrometheusMetrics()
    _, key = container.keys.create("acme", ["predict"])
    row = grpcclient.InferInput("input", [1, 4], "FP32")
    row.set_data_from_numpy(np.asarray([[5.1, 3.5, 1.4, 0.2]], dtype=np.float32))
    outcomes: list[str] = []

    def streamed(client: Any, messages: int) -> None:
        said: list[str] = []
        client.start_stream(callback=lambda result, error: said.append("ok" if error is None else "refused"), headers=auth(key))
        for _ in range(messages):
            try:
                client.async_stream_infer("iris", [row])
            except InferenceServerException:  # the stream already ended, refused as it opened (its callback said so)
                break
        deadline = time.monotonic() + 20
        while len(said) < messages and time.monotonic() < deadline:
            time.sleep(0.02)
        client.stop_stream()
        assert len(said) == messages, said
        outcomes.extend(said)

    with run_server(container) as url:
        client = grpcclient.InferenceServerClient(url)
        if how == "unary":
            for _ in range(6):
                try:
                    client.infer("iris", [row], headers=auth(key))
                    outcomes.append("ok")
                except Exception:
                    outcomes.append("refused")
        elif how == "stream":
            streamed(client, 6)
        else:
            for _ in range(6):
                streamed(client, 1)
        client.close()
    text = container.telemetry.sink.exposition("acme").decode()  # type: ignore[union-attr]
    assert outcomes.count("ok") == 3 and len(outcomes) == 6, outcomes
    assert value(text, "ml_inference_requests_total") == 6
    assert value(text, "ml_inference_errors_total", status="429") == 3
