"""`GRPCInferenceService`: the Open Inference Protocol's RPCs on the same core as the REST API.

Every RPC that names a model (and Triton's configuration, statistics and repository RPCs)
authenticates first (`authorization: Bearer <key>` or
`x-api-key` metadata, the HTTP edge's rules), counts as one of its key's requests in flight
while it runs (`SLUICE_MAX_IN_FLIGHT_PER_KEY`), binds the tenant for the registry, and then
makes the same call the REST route makes. Each inference (a unary call, a stream's message)
is also one of the process's predictions in flight (`SLUICE_MAX_PREDICTIONS_IN_FLIGHT`, with
its tenant's share): past it, UNAVAILABLE (or RESOURCE_EXHAUSTED past the tenant's share)
with a `retry-after` trailer. Server liveness, readiness and metadata need no key, as
their REST twins need none. Errors are gRPC status codes with the REST API's messages.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

from google.protobuf import json_format
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pb_grpc

from sluice import __version__
from sluice.api.deps import MISSING_KEY, authenticate, request_id
from sluice.codecs.classification import asked
from sluice.codecs.plain import who_answered
from sluice.domain.errors import (
    BadRequest,
    PayloadTooLarge,
    SluiceError,
    Unauthenticated,
    UnknownDeployment,
    UnknownVersion,
)
from sluice.domain.requests import PredictionRequest, TensorInputs, routing_key_of
from sluice.domain.values import parse_version
from sluice.grpc_service.calls import (
    CALLER,
    GRPC_MISSING_KEY,
    Code,
    call_metadata,
    status_of,
)
from sluice.grpc_service.tensors import response_of, tensors_of
from sluice.inference.metadata import EXTENSIONS, metadata_of, ready_to_answer
from sluice.inference.outcomes import counted_already
from sluice.registry.scope import bind_tenant, unbind_tenant, use_tenant
from sluice.services.health import registry_answers
from sluice.services.keys import HeldKey
from sluice.services.triton_ext import TritonExtensions, control_refused
from sluice.types.base import check_parameters

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Iterator

    from grpc.aio import ServicerContext

    from sluice.domain import Principal
    from sluice.wiring import Container

FINAL_RESPONSE = "triton_final_response"  # a stream's answer that is its request's last: Triton's parameter


def _version(text: str) -> int | None:
    """A request's version: empty is the deployment's own; else as every door reads one."""
    return parse_version(text, field="model_version") if text else None


def _stream_error(request: Any, exc: Exception) -> Any:
    """A stream's answer to a request that failed: its error, and the request's id and model
    (as Triton's stream says which request failed), those of a request that did not parse
    left empty."""
    message = request.message
    said = pb.ModelInferResponse(model_name=message.model_name, model_version=message.model_version, id=message.id)
    said.parameters[FINAL_RESPONSE].bool_param = True  # the request's last answer, as Triton says of a failed one too
    return pb.ModelStreamInferResponse(error_message=status_of(exc)[1], infer_response=said)


def _parameter(param: Any) -> Any:
    kind = param.WhichOneof("parameter_choice")
    return getattr(param, kind) if kind else None


class InferenceService(pb_grpc.GRPCInferenceServiceServicer):
    def __init__(self, container: Container) -> None:
        self.container = container
        self.rate_limit = container.rate_limit  # the one the HTTP edge counts against: one count a key

    async def _authenticated(self, context: ServicerContext) -> tuple[Principal, dict[str, str]]:
        """The authenticated caller and its metadata (keys lowercased, text values only): as
        the server found them as a unary call opened (`CALLER`), else read here."""
        caller = CALLER.get()
        if caller is not None:
            return caller
        metadata = call_metadata(context)
        try:
            principal = await authenticate({}, metadata, self.container)  # type: ignore[arg-type]
        except Unauthenticated as exc:
            if exc.message == MISSING_KEY:  # gRPC metadata keys are lowercase: said so
                raise Unauthenticated(GRPC_MISSING_KEY) from None
            raise
        return principal, metadata

    @contextlib.asynccontextmanager
    async def _caller(self, context: ServicerContext) -> AsyncIterator[tuple[Principal, dict[str, str]]]:
        """The authenticated caller and its metadata, its rate counted, and the call one of
        its key's requests in flight while the block runs (RESOURCE_EXHAUSTED past the cap)."""
        principal, metadata = await self._authenticated(context)
        async with self._admitted(principal):
            yield principal, metadata

    @contextlib.asynccontextmanager
    async def _admitted(self, principal: Principal) -> AsyncIterator[None]:
        """The call one of its key's requests in flight while the block runs (RESOURCE_EXHAUSTED
        past the cap), then the caller's rate counted: as the HTTP edge, a call refused for too
        many in flight takes no slot of its key's rate, one refused by its rate none in flight."""
        admission = self.container.admission
        with admission.held(principal, prediction=False) if admission is not None else contextlib.nullcontext():
            if self.rate_limit is not None:
                await self.rate_limit.check(principal.subject, principal.tenant)
            yield

    @contextlib.asynccontextmanager
    async def _tenant_call(self, context: ServicerContext) -> AsyncIterator[tuple[Principal, dict[str, str]]]:
        """`_caller`, in its tenant's scope; whatever fails, the call's status says why."""
        try:
            async with self._caller(context) as (principal, metadata):
                with use_tenant(principal.tenant):
                    yield principal, metadata
        except Exception as exc:
            await self._fail(context, exc)

    async def _fail(self, context: ServicerContext, exc: Exception) -> None:
        code, message, trailer = status_of(exc)
        await context.abort(code, message, trailing_metadata=trailer)

    def _extensions(self) -> TritonExtensions:
        c = self.container
        return TritonExtensions(c.predictions, c.deployments, c.runtimes)

    # Server: no key, as GET /v2, /v2/health/live and /v2/health/ready ---------------------
    async def ServerLive(self, request: Any, context: ServicerContext) -> Any:
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request: Any, context: ServicerContext) -> Any:
        return pb.ServerReadyResponse(ready=await asyncio.to_thread(registry_answers, self.container.registry))

    async def ServerMetadata(self, request: Any, context: ServicerContext) -> Any:
        return pb.ServerMetadataResponse(name="sluice", version=__version__, extensions=EXTENSIONS)

    # Models: a deployment is the protocol's model -----------------------------------------
    async def ModelMetadata(self, request: Any, context: ServicerContext) -> Any:
        async with self._tenant_call(context) as (principal, _):
            resolved = await self.container.predictions.resolve(principal, request.name, version=_version(request.version))
            meta = metadata_of(resolved)
        tensors = pb.ModelMetadataResponse.TensorMetadata
        return pb.ModelMetadataResponse(
            name=meta["name"],
            versions=meta["versions"],
            platform=meta["platform"],
            inputs=[tensors(**t) for t in meta["inputs"]],
            outputs=[tensors(**t) for t in meta["outputs"]],
        )

    async def ModelReady(self, request: Any, context: ServicerContext) -> Any:
        """A deployment or a version the tenant does not have is not ready (false, as Triton
        answers a model or a version it does not have), never NOT_FOUND."""
        async with self._tenant_call(context) as (principal, _):
            try:
                resolved = await self.container.predictions.resolve(principal, request.name, version=_version(request.version))
            except (UnknownDeployment, UnknownVersion):
                return pb.ModelReadyResponse(ready=False)
            ready = await ready_to_answer(self.container.runtimes, resolved.version)
        return pb.ModelReadyResponse(ready=ready)

    async def ModelInfer(self, request: Any, context: ServicerContext) -> Any:
        """`_tenant_call`'s rules written out, on the path every unary inference takes: the
        call is one of its key's requests in flight and one of the process's predictions,
        entered at once, then its key's rate counted (as the HTTP edge: a call refused for too
        many in flight takes no slot of the rate, one refused by its rate none in flight);
        refused there, it is counted as a request."""
        principal, admitted = None, False
        try:
            principal, metadata = await self._authenticated(context)
            admission = self.container.admission
            if admission is not None:
                admission.enter(principal)
            try:
                if self.rate_limit is not None:
                    await self.rate_limit.check(principal.subject, principal.tenant)
            except BaseException:
                if admission is not None:
                    admission.leave(principal)
                raise
            admitted = True
            token = bind_tenant(principal.tenant)
            try:
                return await self._infer(principal, metadata, request)
            finally:
                unbind_tenant(token)
                if admission is not None:
                    admission.leave(principal)
        except Exception as exc:
            if principal is not None and not admitted and isinstance(exc, SluiceError):
                self.container.predictions.outcomes.refused(principal.tenant, request.model_name, exc)
            await self._fail(context, exc)

    async def ModelStreamInfer(self, request_iterator: Any, context: ServicerContext) -> AsyncIterator[Any]:
        """Each request answered in turn; a failed one is an `error_message`, as Triton streams.
        The stream is one of its key's requests in flight for as long as it is open, and its key
        is checked again before each request: once revoked, the stream ends UNAUTHENTICATED.
        Each request counts against the key's rate (`SLUICE_RATE_LIMIT`) as a unary call does
        (the first with the stream's opening): one past it is answered with its error."""
        outcomes = self.container.predictions.outcomes
        async with contextlib.AsyncExitStack() as open_call:
            checked_at = self.container.keys.generation()  # before the key is read
            try:
                principal, metadata = await self._authenticated(context)
            except Exception as exc:
                await self._fail(context, exc)
            try:
                await open_call.enter_async_context(self._admitted(principal))
            except Exception as exc:  # refused as it opens (its rate, its key's calls): a request, counted
                outcomes.refused(principal.tenant, None, exc)  # no message read: no deployment at hand
                await self._fail(context, exc)
            key = HeldKey(self.container.keys, principal.subject, checked_at)
            counted = True  # the first request's rate was counted with the stream's opening
            async for request in request_iterator:
                try:
                    await key.check()
                except Exception as exc:  # revoked: UNAUTHENTICATED; the registry down: UNAVAILABLE, said as any call's failure
                    await self._fail(context, exc)
                try:
                    with self._predicting(principal, request.model_name):  # then its rate, as a unary call's
                        if not counted and self.rate_limit is not None:
                            try:
                                await self.rate_limit.check(principal.subject, principal.tenant)
                            except SluiceError as exc:  # a request refused by its rate: counted as a unary one is
                                outcomes.refused(principal.tenant, request.model_name, exc)
                                raise
                        counted = False
                        with use_tenant(principal.tenant):
                            answer = await self._infer(principal, metadata, request, streamed=True)  # wire.write_stream_response
                except Exception as exc:
                    answer = _stream_error(request, exc)
                # Yielded outside the tenant's scope: a stream the client cancels is closed
                # wherever its generator is finalized (another task, another context), and the
                # scope's variable can only be reset in the context that set it.
                yield answer

    @contextlib.contextmanager
    def _predicting(self, principal: Principal, deployment: str) -> Iterator[None]:
        """One of the process's predictions in flight while the block runs (a stream's request:
        its key's slot is the stream's); refused (503), counted as a refused request."""
        admission = self.container.admission
        if admission is None:
            yield
            return
        try:
            admission.enter(principal, key=False)
        except SluiceError as exc:
            self.container.predictions.outcomes.refused(principal.tenant, deployment, exc)
            raise
        try:
            yield
        finally:
            admission.leave(principal, key=False)

    async def _infer(self, principal: Principal, metadata: dict[str, str], request: Any, *, streamed: bool = False) -> Any:
        """One inference, already one of the process's predictions in flight; whatever fails
        in it is counted once (`sluice.inference.outcomes`)."""
        try:
            return await self._infer_counted(principal, metadata, request, streamed)
        except Exception as exc:
            await self.container.predictions.outcomes.failed(principal.tenant, request.model_name, exc)
            raise

    async def _infer_counted(self, principal: Principal, metadata: dict[str, str], request: Any, streamed: bool = False) -> Any:
        """`streamed`: a stream's request, whose answer says it is the request's last
        (`triton_final_response`, as Triton's stream says it: every model here answers a request once)."""
        if getattr(request, "malformed", None):
            raise request.malformed
        message = request.message  # its fields; the raw contents are the request's (wire.InferRequest)
        rid = request_id({}, metadata, message.id, field="id")  # type: ignore[arg-type]
        params = check_parameters({k: _parameter(v) for k, v in message.parameters.items()})  # REST's rule for them
        if params.get("upload_id") is not None:  # never read here: refused, as a WebSocket message's is, not ignored
            raise BadRequest("upload_id: uploads are for the HTTP API; over gRPC, send the inputs in the message", field="upload_id")
        wanted = tuple(out.name for out in message.outputs) or None
        classify = asked((out.name, {k: _parameter(v) for k, v in out.parameters.items()}) for out in message.outputs)
        core = PredictionRequest(
            deployment=message.model_name,
            inputs=TensorInputs(tensors_of(request)),
            version=_version(message.model_version),
            outputs=wanted,
            classify=classify,
            variant=params.get("variant"),  # as REST's: of any type, refused unless text (`_check_variant`)
            routing_key=routing_key_of(params),
            headers=metadata,
            request_id=rid,
            log_fields={"request_id": rid, "tenant": principal.tenant},
            parameters=params,
        )
        service = self.container.predictions
        prediction = await service.predict(principal, core)
        who = who_answered(prediction) if not streamed else {**who_answered(prediction), FINAL_RESPONSE: True}
        response = response_of(pb, prediction, request_id=message.id, wanted=wanted, who=who, classify=classify)
        if service.stats_due():  # flushed beside the answer, as HTTP flushes after it
            asyncio.get_running_loop().run_in_executor(None, service.flush_stats_if_due)
        size, limit = response.byte_size(), self.container.settings.limits.max_response_bytes
        if size > limit:  # gRPC would refuse to send it, saying less
            # Counted once already, as the answer the model gave: not counted again.
            raise counted_already(PayloadTooLarge(
                f"the answer is {size} bytes, over the {limit} an answer may be: ask for fewer rows or outputs, or send a batch job",
                field="outputs",
            ))
        return response


    # Triton's extensions: the REST routes' service, its JSON read into the protobuf messages.
    # Fields a Triton server's own config has and this proto lacks are dropped, not an error.
    async def ModelConfig(self, request: Any, context: ServicerContext) -> Any:
        async with self._tenant_call(context) as (principal, _):
            config = await self._extensions().config(principal, request.name, _version(request.version))
            return json_format.ParseDict({"config": config}, pb.ModelConfigResponse(), ignore_unknown_fields=True)

    async def ModelStatistics(self, request: Any, context: ServicerContext) -> Any:
        """No name: every deployment of the tenant, as `GET /v2/models/stats`."""
        async with self._tenant_call(context) as (principal, _):
            version = _version(request.version) if request.name else None
            stats = await self._extensions().stats(principal, request.name or None, version)
            return json_format.ParseDict(stats, pb.ModelStatisticsResponse(), ignore_unknown_fields=True)

    async def RepositoryIndex(self, request: Any, context: ServicerContext) -> Any:
        async with self._tenant_call(context) as (principal, _):
            entries = await self._extensions().index(principal, ready=request.ready)
            return json_format.ParseDict({"models": entries}, pb.RepositoryIndexResponse())

    async def RepositoryModelLoad(self, request: Any, context: ServicerContext) -> Any:
        await self._refuse_control(request, context)

    async def RepositoryModelUnload(self, request: Any, context: ServicerContext) -> Any:
        await self._refuse_control(request, context)

    async def _refuse_control(self, request: Any, context: ServicerContext) -> None:
        """As REST: another tenant's name, or none, is NOT_FOUND; any other is UNAVAILABLE,
        as a Triton without explicit model control answers."""
        async with self._tenant_call(context) as (principal, _):
            self.container.deployments.get(principal, request.model_name)
            raise control_refused()


# Triton's other extensions: not served here, each said plainly.
UNSUPPORTED = {
    "SystemSharedMemoryStatus": "the system shared-memory extension",
    "SystemSharedMemoryRegister": "the system shared-memory extension",
    "SystemSharedMemoryUnregister": "the system shared-memory extension",
    "CudaSharedMemoryStatus": "the CUDA shared-memory extension",
    "CudaSharedMemoryRegister": "the CUDA shared-memory extension",
    "CudaSharedMemoryUnregister": "the CUDA shared-memory extension",
    "TraceSetting": "the trace extension",
    "LogSettings": "the logging extension",
}


def _unsupported(rpc: str, extension: str) -> Any:
    async def answer(self: InferenceService, request: Any, context: ServicerContext) -> Any:
        await context.abort(Code.UNIMPLEMENTED, f"{rpc}: sluice does not support {extension} over gRPC")

    answer.__name__ = rpc
    return answer


for _rpc, _extension in UNSUPPORTED.items():
    setattr(InferenceService, _rpc, _unsupported(_rpc, _extension))
