"""The sagemaker runtime's three paths against the local Triton: 1 KiB (v2 JSON), 1 MiB
(binary+JSON) and 8 MiB (asynchronous inference: the body to S3, `InvokeEndpointAsync`, the
answer read back from S3, with S3 in moto), and what each costs per request above the floor.

The model is a narrow ONNX MLP (256 floats a row in, 16 wide, 10 out) so that the model's own
time does not hide the paths'; its Triton repository (local flavour: python backend, ONNX
Runtime, CPU) takes up to 8,192 rows. Per size:

- **floor**: the body sluice would send, already encoded, POSTed to the container's
  `/invocations` with one HTTP client (what any caller must pay: transport and the model);
- **sluice**: `SageMakerRuntime.infer` on numpy inputs through boto3 (`endpoint_url` the local
  SageMaker port), decoding the answer; for 8 MiB, `infer` raises `Accepted` after writing
  the input and the record to S3 and calling `InvokeEndpointAsync`; a stand-in for SageMaker's
  queue (in process, no queueing delay) reads the input from S3, calls the same container and
  writes the answer to S3, then `ResultService.get` reads and decodes it. The 8 MiB figure is
  submit + queue stand-in + fetch; its parts are reported too.
- **8 MiB via upload** (a body over Lambda's 6 MB, as it arrives on AWS): `POST
  /api/v1/uploads`'s work (the record and the presigned POST), the client's POST of the body
  to S3 (moto, through `requests`), then the prediction's hand-off (the upload found: its record
  and a HEAD; the binary header's ranged GET; the result's record; `InvokeEndpointAsync` with
  the upload as `InputLocation`), the queue stand-in, and the fetch. Its floor is what the path
  costs whoever runs it (the body's POST to S3 and the queue), so its overhead is sluice's own
  work on the path: create + submit + fetch.

Concurrency 1, every figure the median (min-max) of its repeats; subjects alternate.

    .venv/bin/python -m benchmarks.bench_async [--quick] [--out results.json]
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from benchmarks.common import REPO, machine_info

if TYPE_CHECKING:
    from collections.abc import Iterator

SIZES = {"1 KiB": 1, "1 MiB": 1024, "8 MiB": 8192}  # rows of 256 float32
TENANT = "bench"


def _model() -> bytes:
    sys.path.insert(0, str(REPO / "scripts"))
    from make_demo_models import large_mlp

    return large_mlp(width=16, depth=1)


class QueueStandIn:
    """SageMaker's asynchronous queue, in process: InvokeEndpointAsync reads the input from S3,
    invokes the container synchronously and writes the answer where the endpoint's output path
    says (the tenant's results prefix), then answers with SageMaker's response shape."""

    def __init__(self, s3: Any, container: Any, bucket: str, output_prefix: str) -> None:
        self.s3, self.container, self.bucket, self.prefix = s3, container, bucket, output_prefix
        self.spent: list[float] = []

    def invoke_endpoint_async(self, **params: Any) -> dict[str, Any]:
        began = time.perf_counter()
        key = params["InputLocation"].split(f"s3://{self.bucket}/", 1)[1]
        body = self.s3.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        answer = self.container.invoke_endpoint(
            EndpointName="local",
            Body=body,
            ContentType=params["ContentType"],
            Accept=params["Accept"],
        )
        out = f"{self.prefix}{params['InferenceId']}.out"
        self.s3.put_object(
            Bucket=self.bucket,
            Key=out,
            Body=answer["Body"].read(),
            ContentType=answer["ContentType"],
        )
        self.spent.append(time.perf_counter() - began)
        return {
            "InferenceId": params["InferenceId"],
            "OutputLocation": f"s3://{self.bucket}/{out}",
            "FailureLocation": f"s3://{self.bucket}/{self.prefix}{params['InferenceId']}-error.out",
        }


def _timed_results() -> type:
    from sluice.storage.results import S3Results

    class TimedResults(S3Results):
        """The S3 result store, counting the seconds sluice spends in S3 (moto here)."""

        spent = 0.0

        @contextlib.contextmanager
        def _counted(self) -> Iterator[None]:
            began = time.perf_counter()
            try:
                yield
            finally:
                self.spent += time.perf_counter() - began

        def put(self, *args: Any, **kwargs: Any) -> str:
            with self._counted():
                return super().put(*args, **kwargs)

        def read(self, *args: Any, **kwargs: Any) -> Any:
            with self._counted():
                return super().read(*args, **kwargs)

        def take(self) -> float:
            spent, self.spent = self.spent, 0.0
            return spent

    return TimedResults


def _timed(call: Any, n: int) -> list[float]:
    samples = []
    for _ in range(n):
        began = time.perf_counter()
        call()
        samples.append((time.perf_counter() - began) * 1000)
    return samples


def _summary(runs: list[float]) -> dict[str, Any]:
    return {
        "median": round(statistics.median(runs), 3),
        "min": round(min(runs), 3),
        "max": round(max(runs), 3),
    }


def _upload_path(
    container: Any,
    principal: Any,
    s3: Any,
    results: Any,
    runtime: Any,
    queue: QueueStandIn,
    version: Any,
    rows: np.ndarray,
    repeats: int,
    n: int,
) -> dict[str, Any]:
    """The 8 MiB request as it travels on AWS: uploaded to S3, then named by its id."""
    import requests

    from sluice.codecs.triton import encode_request
    from sluice.domain.errors import Accepted
    from sluice.inference.results import ResultService
    from sluice.inference.uploads import UploadService
    from sluice.storage.uploads import S3Uploads

    body = encode_request({"input": rows}, binary_inputs=True)
    container.deployments.create(principal, "wide", {"kind": "single", "model": "wide", "version": 1})
    uploads = UploadService(container.registry, S3Uploads(results.store), container.settings.uploads)
    service = ResultService(results)
    parts: dict[str, list[float]] = {k: [] for k in ("create", "post", "submit", "queue", "fetch", "s3_in_sluice")}
    loop = asyncio.new_event_loop()

    def once() -> None:
        results.take()
        began = time.perf_counter()
        made = uploads.create(
            principal, deployment="wide", content_type="application/octet-stream",
            size=len(body.body), header_size=body.header_size,
        )  # fmt: skip
        created = time.perf_counter()
        posted = requests.post(made["url"], data=made["fields"], files={"file": ("body", body.body)}, timeout=60)
        assert posted.status_code == 204, posted.text
        sent = time.perf_counter()
        found = uploads.find(principal, made["upload_id"])
        try:
            loop.run_until_complete(runtime.submit_upload(version, found))
        except Accepted as accepted:
            submitted = time.perf_counter()
            result = service.get(principal, accepted.result_id)
            assert isinstance(result, dict) and result["status"] == "succeeded", result
        fetched = time.perf_counter()
        queued = queue.spent[-1]
        parts["create"].append((created - began) * 1000)
        parts["post"].append((sent - created) * 1000)
        parts["submit"].append((submitted - sent - queued) * 1000)
        parts["queue"].append(queued * 1000)
        parts["fetch"].append((fetched - submitted) * 1000)
        parts["s3_in_sluice"].append(results.take() * 1000)

    once()  # warm
    for values in parts.values():
        values.clear()
    totals, floors = [], []
    for _ in range(repeats):
        start = len(parts["create"])
        for _ in range(n):
            once()
        window = {k: v[start:] for k, v in parts.items()}
        totals.append(statistics.median([sum(window[k][i] for k in ("create", "post", "submit", "queue", "fetch")) for i in range(n)]))
        floors.append(statistics.median([window["post"][i] + window["queue"][i] for i in range(n)]))
    loop.close()
    return {
        "path": "upload",
        "floor_ms": _summary(floors),
        "sluice_ms": _summary(totals),
        "overhead_ms": round(statistics.median(totals) - statistics.median(floors), 3),
        "parts_ms": {k: round(statistics.median(v), 3) for k, v in parts.items()},
    }


def run(quick: bool) -> dict[str, Any]:
    import boto3
    import httpx
    from moto import mock_aws

    from sluice.codecs.triton import encode_request
    from sluice.domain import Principal
    from sluice.domain.errors import Accepted
    from sluice.endpoints import local_triton
    from sluice.endpoints.repository import TritonOptions, build_repository
    from sluice.inference.results import ResultService
    from sluice.runtimes.sagemaker import SageMakerRuntime
    from sluice.runtimes.sagemaker_client import build_client
    from sluice.settings import Settings
    from sluice.storage.s3 import S3Store
    from sluice.wiring import Container

    TimedResults = _timed_results()

    from sluice.domain.errors import SluiceError

    try:
        triton_env = local_triton.find_env()
    except SluiceError as exc:  # without `make triton-env` there is nothing to measure against
        return {
            "title": "SageMaker runtime paths",
            "figures": [],
            "notes": [f"skipped: {exc.message}"],
        }
    repeats, n = (2, 5) if quick else (3, 20)
    principal = Principal(TENANT, frozenset({"admin", "predict"}), "bench")
    rng = np.random.default_rng(0)
    inputs = {
        size: rng.standard_normal((rows, 256)).astype(np.float32) for size, rows in SIZES.items()
    }
    with tempfile.TemporaryDirectory() as tmp, mock_aws():
        work = Path(tmp)
        container = Container.from_settings(
            Settings(mode="local", home=work / "home", log_level="WARNING")
        )
        source = container.models.push(principal, "wide", _model())
        root = work / "models"
        build_repository(
            root,
            source,
            container.store,
            flavour="local",
            options=TritonOptions(max_batch_size=8192),
            name="wide",
        )
        home = work / "triton"
        started = local_triton.start(
            root, home=home, port=local_triton.free_base_port(), env=triton_env
        )
        try:
            url = started.sagemaker_url
            s3 = boto3.client("s3", region_name="us-east-1")
            s3.create_bucket(Bucket="artifacts")
            results = TimedResults(
                S3Store("artifacts", "artifacts", client=s3, server_side_encryption="AES256")
            )
            local = build_client(endpoint_url=url)
            queue = QueueStandIn(
                s3, local, "artifacts", f"artifacts/results/tenants/{TENANT}/sagemaker/"
            )
            sync = SageMakerRuntime(endpoint_url=url)
            deferred = SageMakerRuntime(queue, results=results)
            config = {"endpoint_name": "wide-ep", "max_batch_size": 8192}
            sync_version = replace(source, runtime="sagemaker", config=config)
            async_version = replace(
                source, runtime="sagemaker", config={**config, "async_endpoint_name": "wide-async"}
            )
            service = ResultService(results)
            http = httpx.Client(timeout=60)
            loop = asyncio.new_event_loop()
            out: dict[str, Any] = {}
            parts: dict[str, list[float]] = {
                "submit": [],
                "queue": [],
                "fetch": [],
                "s3_in_sluice": [],
            }

            def floor(size: str) -> Any:
                if size == "8 MiB":  # what the asynchronous path writes to S3
                    encoded = encode_request({"input": inputs[size]}, binary_inputs=True)
                    body, content_type = encoded.body, encoded.content_type
                else:
                    body, content_type = sync.encode(sync_version, {"input": inputs[size]})
                return lambda: http.post(
                    f"{url}/invocations", content=body, headers={"content-type": content_type}
                ).raise_for_status()

            def ours(size: str) -> Any:
                if size != "8 MiB":
                    return lambda: loop.run_until_complete(
                        sync.infer(sync_version, {"input": inputs[size]})
                    )

                def through_s3() -> None:
                    began = time.perf_counter()
                    try:
                        loop.run_until_complete(
                            deferred.infer(async_version, {"input": inputs[size]})
                        )
                    except Accepted as accepted:
                        submitted = time.perf_counter()
                        result = service.get(principal, accepted.result_id)
                        assert result["status"] == "succeeded", result
                        fetched = time.perf_counter()
                    queued = queue.spent[-1]
                    parts["s3_in_sluice"].append(results.take() * 1000)
                    parts["submit"].append((submitted - began - queued) * 1000)
                    parts["queue"].append(queued * 1000)
                    parts["fetch"].append((fetched - submitted) * 1000)

                return through_s3

            for size in SIZES:
                paths = {"json": "1 KiB", "binary+json": "1 MiB", "async": "8 MiB"}
                assert sync.path_for(async_version, {"input": inputs[size]}) == next(
                    p for p, s in paths.items() if s == size
                )
                floor_runs, our_runs = [], []
                f, o = floor(size), ours(size)
                f(), o()  # warm
                for _ in range(repeats):
                    floor_runs.append(statistics.median(_timed(f, n)))
                    our_runs.append(statistics.median(_timed(o, n)))
                out[size] = {
                    "path": next(p for p, s in paths.items() if s == size),
                    "floor_ms": _summary(floor_runs),
                    "sluice_ms": _summary(our_runs),
                    "overhead_ms": round(
                        statistics.median(our_runs) - statistics.median(floor_runs), 3
                    ),
                }
            out["8 MiB"]["parts_ms"] = {k: round(statistics.median(v), 3) for k, v in parts.items()}
            out["8 MiB via upload"] = _upload_path(
                container, principal, s3, results, deferred, queue, async_version, inputs["8 MiB"], repeats, n
            )
            loop.close()
            http.close()
        finally:
            local_triton.stop(home)
    return {
        "benchmark": "sagemaker_paths",
        "date": time.strftime("%Y-%m-%d", time.gmtime()),
        "machine": machine_info(),
        "model": "ONNX MLP 256 -> 16 -> 10 in the local Triton (python backend, ONNX Runtime, CPU), max_batch_size 8192",
        "repeats": repeats,
        "requests_per_repeat": n,
        "sizes": out,
        "notes": [
            "floor: the encoded body POSTed to the container's /invocations (httpx), answer unread beyond the body",
            "8 MiB: S3 is moto in process; the queue stand-in has no queueing delay; parts: submit (encode, "
            "input and record to S3, InvokeEndpointAsync), queue (read input, container, write answer), "
            "fetch (record, answer, decode); s3_in_sluice: of submit and fetch, the time in S3 calls (moto)",
            "8 MiB via upload: floor = the client's POST of the body to S3 (moto, requests) + the queue stand-in; "
            "parts: create (record + presigned POST), post, submit (record + HEAD, the header's ranged GET, the "
            "result's record, InvokeEndpointAsync with the upload as InputLocation), queue, fetch; s3_in_sluice: "
            "of create, submit and fetch, the time in S3 calls of the result store (record writes and reads)",
        ],
    }


if __name__ == "__main__":
    report = run(quick="--quick" in sys.argv)
    text = json.dumps(report, indent=2)
    print(text)
    if "--out" in sys.argv:
        Path(sys.argv[sys.argv.index("--out") + 1]).write_text(text + "\n")
