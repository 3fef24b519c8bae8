"""Dollars per million predictions, for each way a deployment could run. Pure arithmetic.

Every option pays the API's front door per request (API Gateway's REST request price, Lambda's
request price and the API function's GB-seconds while it works or waits); then:

- `onnx`: nothing else; the function's time is the model's (measured) latency.
- `sagemaker`: a real-time endpoint, instance-hours at the utilization the traffic gives: as
  many instances as keep each below `target_utilization` of its capacity (at least
  `min_instances`), the function waiting on the endpoint for the measured latency.
- `sagemaker-async`: an asynchronous endpoint that scales to zero: two requests through the
  front door (submit, then one poll), S3 requests (sluice writes the input and the record,
  SageMaker reads the input and writes the answer, the poll reads the record and the
  answer), and instance-hours: at steady traffic an instance stays up for `keepalive_s` after
  each request (alarm, scale-in cooldown), so at one request every `keepalive_s` or more it is
  up all the time; below that, for that share of the hour.
- `batch`: a Step Functions job per million rows (`transitions` state transitions per job,
  plus per chunk) and the Score functions' GB-seconds per row. Not interactive: no p99.

Latencies come from the deployment's statistics or a benchmark (`Measured`); prices from a
dated file (`sluice.cost.prices`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

MILLION = 1_000_000


@dataclass(frozen=True, slots=True)
class Measured:
    """A runtime's latency: p50 stands for the mean duration billed, p99 for the target."""

    p50_ms: float
    p99_ms: float
    source: str  # "statistics", "given", "assumed: …"


@dataclass(frozen=True, slots=True)
class Workload:
    rps: float  # mean predictions per second
    memory_mb: int = 2048  # the API function's
    architecture: str = "x86_64"
    instance_type: str = "ml.g5.xlarge"
    instance_rps: float | None = None  # one instance's capacity; None: in_flight / p50
    in_flight_per_instance: int = 4  # requests an instance works on at once (Triton batches them)
    target_utilization: float = 0.7
    min_instances: int = 1
    keepalive_s: float = 900.0  # how long an asynchronous endpoint stays up after a request
    submit_ms: float = 50.0  # the API function's time to write the input and call InvokeEndpointAsync
    poll_ms: float = 20.0  # … and to answer one poll
    batch_memory_mb: int = 3008
    batch_chunk_rows: int = 250_000
    batch_row_ms: float | None = None  # Score's time per row; None: the measured p50 (an upper bound)


@dataclass(frozen=True, slots=True)
class Option:
    runtime: str
    how: str
    usd_per_million: float | None
    p99_ms: float | None
    interactive: bool
    breakdown: dict[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    utilization: float | None = None
    instances: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "runtime": self.runtime,
            "how": self.how,
            "usd_per_million": _round(self.usd_per_million),
            "p99_ms": self.p99_ms,
            "interactive": self.interactive,
            "breakdown": {k: _round(v) for k, v in self.breakdown.items()},
            "notes": list(self.notes),
        }
        if self.instances is not None:
            out["instances"] = round(self.instances, 4)
            out["utilization"] = None if self.utilization is None else round(self.utilization, 4)
        return out


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)


def front_door(prices: dict[str, Any], work: Workload, duration_ms: float) -> dict[str, float]:
    """API Gateway + the API function, per million requests, for a function busy `duration_ms`."""
    fn = prices["lambda"][work.architecture]
    billed_s = math.ceil(max(duration_ms, 1.0)) / 1000  # Lambda bills whole milliseconds
    return {
        "api_gateway": prices["api_gateway"]["rest_requests_per_million"],
        "lambda_requests": fn["requests_per_million"],
        "lambda_duration": work.memory_mb / 1024 * billed_s * MILLION * fn["gb_second"],
    }


def instance_price(prices: dict[str, Any], instance_type: str) -> float:
    table = prices["sagemaker_instance_hour"]
    if instance_type not in table:
        from sluice.domain.errors import BadRequest

        raise BadRequest(
            f"no price for {instance_type} in the {prices['region']} price file; it has {sorted(table)} "
            "(add it to the file, or pass --prices)",
            field="instance_type",
        )
    return float(table[instance_type])


def capacity(work: Workload, latency: Measured) -> float:
    """Requests per second one instance serves."""
    if work.instance_rps is not None:
        return work.instance_rps
    return work.in_flight_per_instance * 1000.0 / max(latency.p50_ms, 0.001)


def onnx(prices: dict[str, Any], work: Workload, latency: Measured) -> Option:
    parts = front_door(prices, work, latency.p50_ms)
    return Option("onnx", "ONNX Runtime in the API function", sum(parts.values()), latency.p99_ms, True, parts,
                  notes=(f"latency: {latency.source}",))  # fmt: skip


def realtime(prices: dict[str, Any], work: Workload, latency: Measured) -> Option:
    per_instance = capacity(work, latency)
    instances = max(work.min_instances, math.ceil(work.rps / (per_instance * work.target_utilization)))
    hourly = instance_price(prices, work.instance_type) * instances
    parts = front_door(prices, work, latency.p50_ms)
    parts["instances"] = hourly / (work.rps * 3600) * MILLION if work.rps > 0 else math.inf
    return Option(
        "sagemaker", f"SageMaker real-time endpoint, {work.instance_type}", sum(parts.values()), latency.p99_ms, True, parts,
        notes=(f"latency: {latency.source}", f"one instance serves {per_instance:.0f} req/s"),
        utilization=work.rps / (instances * per_instance), instances=instances,
    )  # fmt: skip


def asynchronous(prices: dict[str, Any], work: Workload, latency: Measured) -> Option:
    per_instance = capacity(work, latency)
    if work.rps * work.keepalive_s >= 1:  # a request at least every keep-alive: always up
        instances: float = max(1, math.ceil(work.rps / (per_instance * work.target_utilization)))
    else:
        instances = work.rps * work.keepalive_s  # up for that share of the time
    hourly = instance_price(prices, work.instance_type) * instances
    submit = front_door(prices, work, work.submit_ms)
    poll = front_door(prices, work, work.poll_ms)
    s3 = prices["s3"]
    parts = {key: submit[key] + poll[key] for key in submit}
    parts["s3_requests"] = (3 * s3["put_per_thousand"] + 3 * s3["get_per_thousand"]) * 1000
    parts["instances"] = hourly / (work.rps * 3600) * MILLION if work.rps > 0 else math.inf
    # A request waits in the queue, then for the poll: the answer is seconds away, at best.
    queue_ms = latency.p99_ms + 1000.0
    return Option(
        "sagemaker-async", f"SageMaker asynchronous endpoint, {work.instance_type}, scaling to zero",
        sum(parts.values()), queue_ms, True, parts,
        notes=(f"latency: {latency.source}; p99 adds a 1 s poll interval",
               f"an instance stays up {work.keepalive_s:.0f} s after a request; the first request after zero waits minutes"),
        utilization=(work.rps / (instances * per_instance)) if instances else 0.0, instances=instances,
    )  # fmt: skip


def batch(prices: dict[str, Any], work: Workload, latency: Measured) -> Option:
    row_ms = work.batch_row_ms if work.batch_row_ms is not None else latency.p50_ms
    chunks = math.ceil(MILLION / work.batch_chunk_rows)
    transitions = 6 + 4 * chunks  # plan, map, finalize and their choices; per chunk: score and its retry state
    fn = prices["lambda"][work.architecture]
    parts = {
        "step_functions": transitions * prices["step_functions"]["standard_transitions_per_thousand"] / 1000,
        "lambda_requests": (2 + chunks) * fn["requests_per_million"] / MILLION,
        "lambda_duration": work.batch_memory_mb / 1024 * row_ms / 1000 * MILLION * fn["gb_second"],
        "s3_requests": (2 + 2 * chunks) * (prices["s3"]["put_per_thousand"] + prices["s3"]["get_per_thousand"]) / 1000,
    }
    note = (
        f"Score at {row_ms:g} ms a row" + (" (the measured per-request p50: an upper bound; pass a batch benchmark's figure)"
                                            if work.batch_row_ms is None else "")
    )
    return Option("batch", "batch job on Step Functions (files in S3)", sum(parts.values()), None, False, parts,
                  notes=(note, f"one job of a million rows in {chunks} chunks"))  # fmt: skip


RUNTIMES = {"onnx": onnx, "sagemaker": realtime, "sagemaker-async": asynchronous, "batch": batch}
LATENCY_OF = {"onnx": "onnx", "sagemaker": "sagemaker", "sagemaker-async": "sagemaker", "batch": "onnx"}


def options(prices: dict[str, Any], work: Workload, latencies: dict[str, Measured]) -> list[Option]:
    """Each runtime priced with its own latency (`latencies` by runtime kind: onnx, sagemaker)."""
    return [price(prices, work, latencies[LATENCY_OF[name]]) for name, price in RUNTIMES.items()]


def recommend(found: list[Option], p99_ms: float | None) -> Option | None:
    """The cheapest interactive option whose p99 meets the target (any p99 without one)."""
    fitting = [
        o for o in found
        if o.interactive and o.usd_per_million is not None and (p99_ms is None or (o.p99_ms is not None and o.p99_ms <= p99_ms))
    ]  # fmt: skip
    return min(fitting, key=lambda o: o.usd_per_million or math.inf, default=None)


def curves(prices: dict[str, Any], work: Workload, latencies: dict[str, Measured], rates: list[float]) -> dict[str, list[float]]:
    """$ per million predictions of each runtime at each traffic rate (req/s)."""
    from dataclasses import replace

    out: dict[str, list[float]] = {name: [] for name in RUNTIMES}
    for rate in rates:
        for option in options(prices, replace(work, rps=rate), latencies):
            out[option.runtime].append(option.usd_per_million or math.inf)
    return out
