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
- `lambda-managed`: the API function on Lambda Managed Instances: API Gateway and Lambda's
  request price, then EC2 instance-hours plus Lambda's management fee on them, no GB-seconds.
  The instances are paid for the CPU the requests use: as many as keep their vCPUs below
  `target_utilization` at `cpu_ms` of CPU a request (the measured p50 when none is given: an
  upper bound, the wait on the registry and the network counted as CPU), at least
  `managed_min_instances` (Lambda starts three, one per availability zone).
- `sagemaker-serverless`: a SageMaker serverless endpoint behind the API function: its memory's
  GB-seconds for the model's latency on a CPU (serverless endpoints have no GPU: the onnx
  figure), the API function waiting as long, and the payload in and out; it scales to zero, so
  the first request after an idle spell waits a cold start (not in the p99).
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
    cpu_ms: float | None = None  # CPU a request uses on managed instances; None: the measured p50
    managed_instance_type: str | None = None  # None: c7i.xlarge (x86_64) or c7g.xlarge (arm64)
    managed_min_instances: int = 3
    serverless_memory_mb: int = 2048
    payload_kb: float = 1.0  # request and answer, each (SageMaker serverless bills data processed)
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
    return hourly_price(prices, prices["sagemaker_instance_hour"], instance_type, field="instance_type")


def hourly_price(prices: dict[str, Any], table: dict[str, Any], instance_type: str, *, field: str) -> float:
    """An instance type's price an hour in `table` (a part of the price file), or a 400 naming
    `field` and the types the file has."""
    if instance_type not in table:
        from sluice.domain.errors import BadRequest

        raise BadRequest(
            f"no price for {instance_type} in the {prices['region']} price file; it has {sorted(table)} "
            "(add it to the file, or pass --prices)",
            field=field,
        )
    return float(table[instance_type])


MANAGED_DEFAULT = {"x86_64": "c7i.xlarge", "arm64": "c7g.xlarge"}


def instance_vcpus(instance_type: str) -> int:
    """vCPUs of an EC2 instance of the C, M and R families Lambda Managed Instances use, from its
    size (large: 2, xlarge: 4, 2xlarge: 8, ...)."""
    import re

    match = re.fullmatch(r"[a-z0-9-]+\.(?:(\d*)x)?(large)", instance_type)
    if match is None:
        from sluice.domain.errors import BadRequest

        raise BadRequest(f"{instance_type}: give a C, M or R instance type (c7g.xlarge)", field="managed_instance_type")
    return 2 if match[1] is None else 4 * int(match[1] or 1)


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
    # A request waits in the queue, then for the poll: the answer is seconds away, at best. Below
    # a request a keep-alive, steady requests each find it scaled to zero and wait an instance's
    # start (minutes): no p99 of the model's says that, and the option meets no target.
    always_up = work.rps * work.keepalive_s >= 1
    queue_ms = latency.p99_ms + 1000.0 if always_up else None
    return Option(
        "sagemaker-async", f"SageMaker asynchronous endpoint, {work.instance_type}, scaling to zero",
        sum(parts.values()), queue_ms, True, parts,
        notes=(f"latency: {latency.source}; p99 adds a 1 s poll interval" if always_up else
               f"no p99: at under one request every {work.keepalive_s:.0f} s each request finds the endpoint scaled to zero and waits an instance's start (minutes)",
               f"an instance stays up {work.keepalive_s:.0f} s after a request; the first request after zero waits minutes"),
        utilization=(work.rps / (instances * per_instance)) if instances else 0.0, instances=instances,
    )  # fmt: skip


def managed(prices: dict[str, Any], work: Workload, latency: Measured) -> Option:
    lmi = prices["lambda_managed_instances"]
    kind = work.managed_instance_type or MANAGED_DEFAULT[work.architecture]
    hourly = hourly_price(prices, lmi["ec2_instance_hour"], kind, field="managed_instance_type")
    cpu_ms = work.cpu_ms if work.cpu_ms is not None else latency.p50_ms
    vcpus = instance_vcpus(kind)
    per_instance = vcpus * work.target_utilization * 1000.0 / max(cpu_ms, 0.001)
    instances = max(work.managed_min_instances, math.ceil(work.rps / per_instance))
    ec2 = hourly * instances / (work.rps * 3600) * MILLION if work.rps > 0 else math.inf
    parts = {
        "api_gateway": prices["api_gateway"]["rest_requests_per_million"],
        "lambda_requests": lmi["requests_per_million"],
        "instances": ec2,
        "management_fee": ec2 * lmi["management_fee"],
    }
    source = "given" if work.cpu_ms is not None else "the p50: an upper bound"
    return Option(
        "lambda-managed", f"the API function on Lambda Managed Instances, {kind}", sum(parts.values()), latency.p99_ms, True,
        parts, utilization=work.rps / (instances * per_instance), instances=instances,
        notes=(f"latency: {latency.source}", f"{cpu_ms:g} ms of CPU a request ({source}): one {kind} ({vcpus} vCPUs) "
               f"serves {per_instance:.0f} req/s at {work.target_utilization:.0%} CPU",
               f"at least {work.managed_min_instances} instances (one per availability zone); no scale to zero"),
    )  # fmt: skip


def serverless(prices: dict[str, Any], work: Workload, latency: Measured) -> Option:
    sls = prices["sagemaker_serverless"]
    parts = front_door(prices, work, latency.p50_ms)
    parts["serverless_compute"] = work.serverless_memory_mb / 1024 * latency.p50_ms / 1000 * MILLION * sls["gb_second"]
    parts["data_processed"] = 2 * work.payload_kb / (1024 * 1024) * MILLION * sls["data_processed_per_gb"]
    return Option(
        "sagemaker-serverless", f"SageMaker serverless endpoint, {work.serverless_memory_mb} MB", sum(parts.values()),
        latency.p99_ms, True, parts,
        notes=(f"latency: {latency.source} (CPU: serverless endpoints have no GPU)",
               "scales to zero: the first request after an idle spell waits a cold start (seconds)"),
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


RUNTIMES = {
    "onnx": onnx, "lambda-managed": managed, "sagemaker": realtime, "sagemaker-serverless": serverless,
    "sagemaker-async": asynchronous, "batch": batch,
}  # fmt: skip
LATENCY_OF = {
    "onnx": "onnx", "lambda-managed": "onnx", "sagemaker": "sagemaker", "sagemaker-serverless": "onnx",
    "sagemaker-async": "sagemaker", "batch": "onnx",
}  # fmt: skip


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
