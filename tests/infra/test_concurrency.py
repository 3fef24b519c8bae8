"""Reserved concurrency: every sluice function has its own share, batch cannot starve the API,
and a config that would leave Lambda less than its unreserved minimum is refused."""

from __future__ import annotations

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from infra.config import UNRESERVED_MINIMUM, ConcurrencyConfig, SluiceConfig, load_config
from pydantic import ValidationError

from tests.infra.synth import Synthesized, function_by_handler

HANDLERS = {
    "api": ("api", "sluice.handlers.api.handler"),
    "authorizer": ("api", "sluice.handlers.authorizer.handler"),
    "shadow": ("api", "sluice.handlers.shadow.handler"),
    "batch_create_job": ("batch", "sluice.handlers.batch.create_job"),
    "batch_plan": ("batch", "sluice.handlers.batch.plan"),
    "batch_score": ("batch", "sluice.handlers.batch.score"),
    "batch_finalize": ("batch", "sluice.handlers.batch.finalize"),
    "batch_mark_failed": ("batch", "sluice.handlers.batch.mark_failed"),
    "batch_execution_ended": ("batch", "sluice.handlers.batch.execution_ended"),
    "batch_on_upload": ("batch", "sluice.handlers.batch.on_upload"),
    "rollouts": ("api", "sluice.handlers.rollouts.handler"),
    "monitor": ("api", "sluice.handlers.monitor.handler"),
    "registry_events": ("api", "sluice.handlers.registry_events.handler"),
}


def test_every_function_reserves_its_configured_concurrency(default_app: Synthesized) -> None:
    concurrency = default_app.config.concurrency
    for setting, (component, handler) in HANDLERS.items():
        _, props = function_by_handler(default_app.template(component), handler)
        assert props["ReservedConcurrentExecutions"] == getattr(concurrency, setting), setting


def test_the_shipped_config_leaves_the_api_the_larger_share() -> None:
    concurrency = load_config().concurrency
    assert concurrency.batch_total < concurrency.api
    assert concurrency.total <= concurrency.account_limit - UNRESERVED_MINIMUM


def _config(**concurrency: object) -> SluiceConfig:
    return SluiceConfig.model_validate({"concurrency": concurrency})


def test_reservations_must_leave_the_unreserved_minimum() -> None:
    with pytest.raises(ValidationError, match="at most 400 may be reserved"):
        _config(account_limit=500, api=300, authorizer=100)
    # Exactly the account limit less the minimum is allowed.
    assert _config(account_limit=1000, api=701).concurrency.total == 900
    with pytest.raises(ValidationError, match="adds up to 901"):
        _config(account_limit=1000, api=702)


def test_batch_must_reserve_less_than_the_api() -> None:
    with pytest.raises(ValidationError, match="must stay below the API's 50"):
        _config(api=50, batch_score=40, batch_on_upload=10)


def test_batch_score_must_cover_the_map_concurrency() -> None:
    with pytest.raises(ValidationError, match=r"exceeds concurrency\.batch_score"):
        SluiceConfig.model_validate({"batch": {"max_concurrency": 60}})


def test_null_leaves_a_function_in_the_shared_pool(tmp_path) -> None:
    path = tmp_path / "sluice.yaml"
    path.write_text(
        "concurrency:\n  account_limit: 100\n" + "".join(f"  {name}: null\n" for name in HANDLERS)
    )
    config = load_config(path)
    assert config.concurrency.total == 0
    assert config.concurrency.reserved("batch-score") is None


def _stream(**fields: object) -> dict[str, object]:
    stream = {"name": "orders", "tenant": "acme", "deployment": "fraud", "destination": {"kind": "s3"}}
    return {**stream, "source": {"kind": "sqs", "create": True}, **fields}


def test_an_sqs_mapping_invokes_at_most_the_stream_function_s_reserved_concurrency() -> None:
    # Unset, the mapping would scale its pollers past the reservation; the messages it could
    # not hand over would be throttled, each such receive counting toward the dead-letter queue.
    (stream,) = SluiceConfig.model_validate({"streams": [_stream()]}).streams
    assert (stream.reserved_concurrency, stream.max_concurrency, stream.mapping_concurrency) == (10, None, 10)
    (stream,) = SluiceConfig.model_validate({"streams": [_stream(max_concurrency=4)]}).streams
    assert stream.mapping_concurrency == 4
    (stream,) = SluiceConfig.model_validate({"streams": [_stream(reserved_concurrency=None)]}).streams
    assert stream.mapping_concurrency is None  # the shared pool: nothing to be throttled against
    with pytest.raises(ValidationError, match=r"max_concurrency \(20\) exceeds reserved_concurrency \(10\)"):
        SluiceConfig.model_validate({"streams": [_stream(max_concurrency=20)]})


@given(
    reserved=st.none() | st.integers(1, 40),
    max_concurrency=st.none() | st.integers(2, 40),
    kind=st.sampled_from(["sqs", "kinesis"]),
)
@example(reserved=1, max_concurrency=None, kind="sqs")
@settings(max_examples=60, deadline=None)
def test_an_sqs_mapping_never_runs_more_than_its_function_reserves(
    reserved: int | None, max_concurrency: int | None, kind: str
) -> None:
    # SQS's mapping runs at least 2 at once: a stream reserving 1 would have every other
    # message throttled, and each throttled receive counts toward the dead-letter queue.
    fields = {"source": {"kind": kind, "create": True}, "reserved_concurrency": reserved}
    if max_concurrency is not None and kind == "sqs":
        fields["max_concurrency"] = max_concurrency
    try:
        (stream,) = SluiceConfig.model_validate({"streams": [_stream(**fields)]}).streams
    except ValidationError as refused:
        assert kind == "sqs" and reserved is not None
        assert "reserved_concurrency" in str(refused)
        assert reserved < 2 or (max_concurrency or 0) > reserved
        return
    if kind == "sqs" and reserved is not None:
        assert 2 <= stream.mapping_concurrency <= reserved
    assert kind == "sqs" or stream.mapping_concurrency is None


@given(
    websocket=st.none() | st.integers(1, 500),
    streams=st.lists(st.none() | st.integers(2, 400), max_size=3),
)
@example(websocket=50, streams=[400])  # each fits alone; together 949 > 900
@settings(max_examples=60, deadline=None)
def test_the_websocket_and_stream_reservations_add_up_with_the_concurrency_section(
    websocket: int | None, streams: list[int | None]
) -> None:
    # One account holds them all: each share fitting on its own is not enough, Lambda refuses
    # the reservation that takes the total past account_limit - 100 at deploy.
    raw: dict[str, object] = {
        "streams": [_stream(name=f"s{i}", reserved_concurrency=n) for i, n in enumerate(streams)]
    }
    if websocket is not None:
        raw["websocket"] = {"enabled": True, "reserved_concurrency": websocket}
    reserved = ConcurrencyConfig().total + (websocket or 0) + sum(n or 0 for n in streams)
    room = ConcurrencyConfig().account_limit - UNRESERVED_MINIMUM
    if reserved <= room:
        assert SluiceConfig.model_validate(raw)
        return
    with pytest.raises(ValidationError, match=f"adds up to {reserved} .*at most {room} may be reserved"):
        SluiceConfig.model_validate(raw)


def test_a_kinesis_stream_s_shards_times_parallelization_must_fit_its_reservation() -> None:
    source = {"kind": "kinesis", "create": True, "shards": 4}
    with pytest.raises(ValidationError, match="invoke 12 at once, over reserved_concurrency"):
        SluiceConfig.model_validate({"streams": [_stream(source=source, parallelization_factor=3)]})
    (stream,) = SluiceConfig.model_validate({"streams": [_stream(source=source, parallelization_factor=2)]}).streams
    assert stream.mapping_concurrency is None
