"""The groups of answering requests: the data plane's limits and caches, ONNX Runtime,
uploads and `sluice serve`'s connections (who may ask how much: admission.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar, Self

from pydantic import BeforeValidator, Field, model_validator

from sluice.settings.process import C_INT_MAX, Group, MiB, Seconds, unset_if_empty


class LimitSettings(Group):
    """Read by the HTTP edge and the gRPC server (bodies) and by whatever presents an answer
    (the routes, results of asynchronous predictions, the gRPC service)."""

    title: ClassVar[str] = "Request and answer sizes"

    max_request_bytes: int = Field(
        default=6 * MiB - 64 * 1024,
        gt=0,
        le=C_INT_MAX,  # gRPC's message limit too
        description="Largest request body served synchronously (Lambda's 6 MB limit, less envelope).",
    )
    body_timeout_s: Seconds = Field(
        default=20.0,
        gt=0,
        description="`sluice serve`: seconds a prediction's body has to arrive once its headers have, plus one "
        "more for every 16 KiB received; a client that stalls or trickles is answered 408 and cut off, so it "
        "holds no slot for long. A body already there when read costs no timer.",
    )
    max_response_bytes: int = Field(
        default=6 * MiB - 64 * 1024,
        gt=0,
        le=C_INT_MAX,  # gRPC's message limit too
        description="Largest answer sent in line (Lambda's 6 MB response limit, less envelope), counted as "
        "Lambda's result carries it (JSON escaped, binary base64-encoded): a prediction from an upload whose "
        "answer is larger is kept as a result (303 to it); on AWS another prediction's is a 413 (send it as an "
        "upload); and a result whose answer is larger is answered with the answer itself (a 303 to a presigned "
        "S3 GET on AWS, its bytes locally).",
    )


class PredictionSettings(Group):
    """Read by the prediction service (the one call) and, for their timeouts and connections,
    the Triton and SageMaker runtimes."""

    title: ClassVar[str] = "Predictions"

    request_timeout_s: Seconds = Field(
        default=25.0, gt=0, description="Budget for one prediction, below API Gateway's 29 s."
    )
    max_tensor_elements: int = Field(
        default=4_000_000, gt=0, description="Largest number of elements across one request's inputs."
    )
    deployment_cache_ttl_s: Seconds = Field(
        default=1.0, ge=0, description="How long a container trusts a deployment it has read, and the model versions it names."
    )
    stats_flush_s: Seconds = Field(
        default=2.0,
        ge=0,
        description="How often a process merges the statistics it counted (requests, errors, latency, "
        "shadow comparisons: what rollout gates and `promote` decide on) into the registry: after a "
        "request that finds them due, on a timer in a process that has gone idle (not in Lambda), and "
        "at shutdown. A write the registry refuses is tried again at the next flush. In Lambda, counts "
        "made since the last flush are lost if Lambda retires the environment before another "
        "invocation: 0 flushes after every request (a registry write each).",
    )
    runtime_connections: int = Field(
        default=64,
        ge=1,
        description="Connections one process keeps to each server the `triton` runtime calls over HTTP, and "
        "the `sagemaker` runtime's calls in flight at once (its connection pool and its threads); past it a "
        "call waits for one to come free. The default is twice `sluice serve`'s predictions in flight per "
        "process, so every admitted prediction has its connection with room for what calls a backend besides "
        "(shadow mirrors, ensembles' members, batch scoring). Triton over gRPC multiplexes its calls on one "
        "connection.",
    )


class PredictionCacheSettings(Group):
    """Read by the wiring, which builds the prediction cache of deployments that turn it on."""

    title: ClassVar[str] = "Prediction cache"

    prediction_cache_shared: bool = Field(
        default=False,
        description="Share the prediction cache of deployments that turn it on between containers and "
        "processes, through the registry (a SQLite table locally, DynamoDB items with a time to live on AWS). "
        "Off: each container keeps its own answers only.",
    )
    prediction_cache_max_entry_bytes: int = Field(
        default=1 << 20, ge=0, description="The largest answer (its outputs' bytes, a string output's strings counted in full) the prediction cache keeps."
    )
    prediction_cache_max_bytes: int = Field(
        default=128 << 20,
        ge=0,
        description="The outputs' bytes the prediction cache keeps in one process, all deployments together "
        "(each deployment also at most its `max_entries` answers).",
    )


class OnnxSettings(Group):
    """Read by the ONNX Runtime adapter, which loads and runs versions in process, and by
    `sluice optimize`."""

    title: ClassVar[str] = "ONNX Runtime"

    ort_intra_op_threads: int = Field(
        default=1, ge=0, le=1024, description="ONNX Runtime intra-op threads per session (0: ORT decides; at most 1024)."
    )
    ort_inter_op_threads: int = Field(
        default=1, ge=0, le=1024, description="ONNX Runtime inter-op threads per session (0: ORT decides; at most 1024)."
    )
    ort_tuned_sessions: bool = Field(
        default=True,
        description=(
            "Load a version with the session options `sluice optimize` tuned for it (threads and execution mode for "
            "this machine's vCPUs) instead of the two settings above."
        ),
    )
    ort_vcpus: int | None = Field(
        default=None,
        ge=1,
        le=1024,
        description=(
            "The vCPUs a tuned version is loaded for. Default: from the Lambda function's memory (1 vCPU per 1769 MB, "
            "6 at most), or the machine's CPU count off Lambda."
        ),
    )
    model_cache_bytes: int = Field(
        default=1024 * MiB,
        gt=0,
        description="Upper bound on the artifact bytes of ONNX sessions kept loaded (LRU).",
    )
    inline_infer_elements: int = Field(
        default=4096,
        ge=0,
        description="Inputs up to this many elements run on the event loop where the model's calls so far took at most 5 ms "
        "(the first call of a model loaded, and every call of a slow one, run on a thread: the loop serves every other "
        "request of the worker); larger ones on a thread, unless quick (SLUICE_INLINE_INFER_US).",
    )
    inline_infer_us: float = Field(
        default=200.0,
        ge=0,
        description=(
            "Larger inputs run on the event loop too where the model's calls so far say this one takes at most this many "
            "microseconds (a thread hop costs more); 0: by their size alone."
        ),
    )


class SnapStartSettings(Group):
    """Read by the SnapStart hooks of the request functions, before their snapshot."""

    title: ClassVar[str] = "SnapStart"

    preload: list[str] = Field(
        default_factory=list,
        description=(
            "Deployments (`tenant/name`) a Lambda with SnapStart loads before its snapshot, so a "
            "restored container answers them without loading a model; JSON list in the environment."
        ),
    )
    preload_max_bytes: int = Field(
        default=256 * MiB,
        ge=0,
        description="Upper bound on the artifact bytes `preload` loads; versions beyond it load on first use.",
    )


SIGNER_FORM_TTL_S = 3600 - 60  # the signer role's session (its longest, as the CDK app makes it), less a minute


class UploadSettings(Group):
    """Read by the upload service, the route an upload's form is posted to and the wiring
    (the signer role)."""

    title: ClassVar[str] = "Uploads"

    upload_max_bytes: int = Field(
        default=1_000_000_000,
        gt=0,
        description="Largest upload (`POST /api/v1/uploads`): SageMaker asynchronous inference takes inputs of up to 1 GB.",
    )
    upload_inline_max_bytes: int = Field(
        default=64 * MiB,
        gt=0,
        description="Largest upload the API reads to score itself (a deployment that is not on an asynchronous "
        "SageMaker endpoint); a larger one is refused with 413: send a batch job.",
    )
    upload_form_ttl_s: int = Field(
        default=900,
        ge=60,
        le=7 * 24 * 3600,
        description="How long the form an upload answers (an S3 presigned POST on AWS) may be posted; at most 3540 "
        "where forms are signed with `SLUICE_UPLOAD_SIGNER_ROLE_ARN` (its session's hour, less a minute).",
    )
    upload_body_timeout_s: Seconds = Field(
        default=20.0,
        gt=0,
        description="`sluice serve`: seconds an upload's form (`POST /api/v1/uploads/{id}/body`, posted without "
        "an API key) has to arrive, plus one more for every `SLUICE_UPLOAD_BODY_MIN_RATE` bytes received; a slower "
        "client (one trickling its body) is answered 408 and cut off, and nothing of its body is kept. On AWS, S3 "
        "takes the form.",
    )
    upload_body_min_rate: int = Field(
        default=16 * 1024,
        gt=0,
        description="`sluice serve`: the rate an upload's form must keep up, in bytes a second: each that many "
        "bytes received give it one more second beyond `SLUICE_UPLOAD_BODY_TIMEOUT_S`, so a client at least this "
        "fast is never cut off.",
    )
    upload_ttl_s: int = Field(
        default=3600,
        ge=60,
        description="How long an upload may be predicted from after it is made (as often as wanted); the "
        "store's lifecycle deletes it a day or more later (the CDK app's `storage.upload_expiry_days`).",
    )
    upload_signer_role_arn: str | None = Field(
        default=None,
        description="The role upload forms are signed with on AWS, assumed per tenant (session tag `tenant`): "
        "it may put objects under that tenant's uploads prefix only. Unset: signed with the function's own role.",
    )

    @model_validator(mode="after")
    def _forms_outlive_no_signer_session(self) -> Self:
        """A form signed with the signer role's session is refused by S3 once the session ends
        (an hour: the role's longest): none may say it lasts longer."""
        if self.upload_signer_role_arn and self.upload_form_ttl_s > SIGNER_FORM_TTL_S:
            raise ValueError(
                f"SLUICE_UPLOAD_FORM_TTL_S is {self.upload_form_ttl_s}: forms signed with the upload signer role "
                f"(SLUICE_UPLOAD_SIGNER_ROLE_ARN) last at most {SIGNER_FORM_TTL_S} seconds, the role's one-hour session "
                "less a minute"
            )
        return self


class ServeSettings(Group):
    """Read by `sluice serve`: its HTTP connections, its gRPC server and the batch work it
    runs in the background (the local inbox, schedules, stopping)."""

    title: ClassVar[str] = "`sluice serve`"

    header_timeout_s: Seconds = Field(
        default=10.0,
        gt=0,
        description="`sluice serve`: seconds a client has to send a request's line and headers, counted "
        "from the connection's opening or the request's first byte; a slower client (slowloris) is "
        "answered 408 and cut off. On AWS, API Gateway ends slow clients itself.",
    )
    max_header_bytes: int = Field(
        default=16 * 1024,
        ge=1024,
        description="`sluice serve`: largest request line plus headers; past it the connection is answered 431 and closed.",
    )
    keepalive_timeout_s: Seconds = Field(
        default=5.0, gt=0, description="`sluice serve`: seconds an idle connection stays open between requests."
    )
    drain_timeout_s: Seconds = Field(
        default=25.0,
        gt=0,
        description="`sluice serve`, told to stop (SIGTERM, SIGINT): it stops listening at once (a new "
        "connection is refused, for the client to retry elsewhere), then the requests and gRPC calls it had "
        "accepted have this long to be answered (25 s, the default prediction budget `request_timeout_s`: "
        "raise it with that budget, which it does not follow); past "
        "it they are answered 503 `unavailable`. It then writes out its statistics, captured requests and shadow comparisons and "
        "exits: within this plus 10 s, or, while local batch jobs run, plus `batch_stop_grace_s` too; a worker "
        "still running then is killed. See docs/operations.md.",
    )
    grpc_port: int = Field(
        default=0,
        ge=0,
        le=65535,
        description="`sluice serve`: the port of the Open Inference Protocol over gRPC (`--grpc-port`), served by "
        "every HTTP worker; 0: off. Not on AWS: API Gateway cannot carry gRPC.",
    )
    grpc_max_concurrent_rpcs: int = Field(
        default=32,
        ge=0,
        le=C_INT_MAX,
        description="`sluice serve --grpc-port`: calls one worker's gRPC server runs at once, every key together "
        "(an open stream is one; a call counts from when it opens, and waits at most `body_timeout_s` for its "
        "message), a tenant at most `tenant_share` of them while another tenant wants one; past it a call is refused "
        "with RESOURCE_EXHAUSTED at once. Each call may hold a "
        "message of up to `max_request_bytes` and its decoding (one larger, up to twice it and at least 16 MiB, is held "
        "unread while it is refused as its request's error), so this bounds what gRPC adds to a worker's memory. "
        "0: no bound.",
    )
    batch_inbox: Annotated[Path | None, BeforeValidator(unset_if_empty)] = Field(
        default=None,
        description="The folder `sluice serve` watches for batch inputs "
        "(`<folder>/<deployment>/<file>`); empty: `inbox/` under home.",
    )
    batch_inbox_poll_s: Seconds = Field(
        default=2.0, gt=0, description="How often `sluice serve` looks in the local inbox."
    )
    batch_schedule_poll_s: Seconds = Field(
        default=5.0, gt=0, description="How often `sluice serve` looks for batch schedules that are due."
    )
    batch_stop_grace_s: Seconds = Field(
        default=30.0,
        ge=0,
        description="How long `sluice serve`, once told to stop, waits for a running local batch job to finish "
        "the chunks it is scoring; the job is then recorded FAILED (the service stopped) either way.",
    )
