"""Reserved concurrency: every sluice function has its own share, batch cannot starve the API,
and a config that would leave Lambda less than its unreserved minimum is refused."""

from __future__ import annotations

import pytest
from infra.config import UNRESERVED_MINIMUM, SluiceConfig, load_config
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


def test_a_kinesis_stream_s_shards_times_parallelization_must_fit_its_reservation() -> None:
    source = {"kind": "kinesis", "create": True, "shards": 4}
    with pytest.raises(ValidationError, match="invoke 12 at once, over reserved_concurrency"):
        SluiceConfig.model_validate({"streams": [_stream(source=source, parallelization_factor=3)]})
    (stream,) = SluiceConfig.model_validate({"streams": [_stream(source=source, parallelization_factor=2)]}).streams
    assert stream.mapping_concurrency is None
