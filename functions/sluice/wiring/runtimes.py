"""The runtimes by kind, each built the first time something asks for it: ONNX Runtime in
process (a command that predicts nothing never imports NumPy for it), Triton and SageMaker."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable

    from sluice.runtimes import Runtime
    from sluice.settings import OnnxSettings, Settings
    from sluice.storage import ArtifactStore


class Runtimes(dict):  # type: ignore[type-arg]
    """The runtimes by kind, each built the first time a version needs it (a Lambda that only
    serves ONNX never imports the Triton or SageMaker clients)."""

    def __init__(self, factories: dict[str, Callable[[], Runtime]], **ready: Runtime) -> None:
        super().__init__(ready)
        self._factories = factories

    def __missing__(self, kind: str) -> Runtime:
        factory = self._factories.get(kind)
        if factory is None:
            raise KeyError(kind)
        runtime = self[kind] = factory()
        return runtime

    def get(self, kind: str, default: Any = None) -> Any:  # type: ignore[override]
        try:
            return self[kind]
        except KeyError:
            return default

    def __contains__(self, kind: object) -> bool:
        return dict.__contains__(self, kind) or kind in self._factories

    def replacing(self, kind: str, runtime: Runtime) -> Runtimes:
        """These runtimes with one kind replaced; the others still built once, here."""
        delegates = {k: (lambda k=k: self[k]) for k in self._factories if k != kind}
        return Runtimes(delegates, **{**{k: v for k, v in self.items() if k != kind}, kind: runtime})


def build_runtimes(settings: Settings, store: ArtifactStore) -> dict[str, Runtime]:
    timeout_s = settings.predictions.request_timeout_s
    connections = settings.predictions.runtime_connections

    def triton() -> Runtime:
        from sluice.runtimes.triton import TritonRuntime

        return TritonRuntime(timeout_s=timeout_s, connections=connections, allowed=settings.sources.triton_allowlist)

    def sagemaker() -> Runtime:
        from sluice.clients import aws_for
        from sluice.runtimes.sagemaker import SageMakerRuntime
        from sluice.storage.results import results_for

        return SageMakerRuntime(
            **aws_for(settings.adapters.region),
            endpoint_url=settings.endpoint_control.sagemaker_endpoint_url,
            local_servers=settings.sources.triton_url_prefixes,
            started_servers=_started_servers(settings) if settings.endpoints_kind == "local" else None,
            timeout_s=timeout_s,
            concurrency=connections,
            results=results_for(store),  # asynchronous inference: inputs, records, answers
            fallback=lambda: runtimes["onnx"],  # inference components scaled to zero
        )

    def onnx() -> Runtime:
        from sluice.runtimes.onnx import OnnxRuntime

        return OnnxRuntime(store, settings.onnx)

    runtimes = Runtimes({"onnx": onnx, "triton": triton, "sagemaker": sagemaker})
    return runtimes


def _started_servers(settings: Settings) -> Callable[[], list[str]]:
    """The local endpoints twin's running servers under this home (see `sagemaker`'s `client_for`)."""

    def servers() -> list[str]:
        from sluice.endpoints.local_endpoints import started_servers

        return started_servers(settings.home_path)

    return servers


def inline_runtimes(runtimes: dict[str, Runtime], store: ArtifactStore, onnx: OnnxSettings) -> dict[str, Runtime]:
    """These runtimes with ONNX run inline, on the very sessions `runtimes` has loaded: for
    callers off any request loop (batch scoring threads, stream invocations), where a hop
    to yet another thread per call costs more than it frees."""
    from sluice.runtimes.onnx import OnnxRuntime

    online = runtimes.get("onnx")
    if not isinstance(online, OnnxRuntime):
        return runtimes
    inline = OnnxRuntime(store, onnx.model_copy(update={"inline_infer_elements": 2**62}))
    inline.cache = online.cache
    if isinstance(runtimes, Runtimes):
        return runtimes.replacing("onnx", inline)
    return {**runtimes, "onnx": inline}
