"""Profile sluice's request path in process and measure what candidate fixes would save.

    python -m benchmarks.profile_hot_path [--model iris] [--batch 1] [--seconds 3]

1. pyinstrument over a loop of `sluice.handlers.api.handler` calls (REST event with an
   authorizer context, metrics on): the costliest frames by self time, and sluice's own frames
   by inclusive time, each with file:line.
2. What-ifs, measured in this process without editing sluice: p50 of the same event with one
   change applied at a time (swapping a dependency's callable, logger levels, or by
   calling the event adapter without the Lambda-context decorator), next to the hand-written
   handler's p50. Run it after `python -m benchmarks.run` (it uses the prepared home).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from collections import defaultdict
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

from benchmarks.common import REPO, percentile


def _short(path: str) -> str:
    for marker in ("site-packages/", "functions/", "lib/python3"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def _walk(frame: Any, self_times: dict[str, float], totals: dict[str, float], seen: frozenset[str]) -> None:
    key = f"{frame.function}  {_short(frame.file_path or '?')}:{frame.line_no}"
    if key not in seen:  # recursion counts once
        totals[key] += frame.time
    self_times[key] += frame.total_self_time
    for child in frame.children:
        _walk(child, self_times, totals, seen | {key})


def p50_us(call: Callable[[], Any], seconds: float) -> float:
    samples = []
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        t0 = time.perf_counter_ns()
        call()
        samples.append(time.perf_counter_ns() - t0)
    return percentile([s / 1000 for s in samples], 50)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="iris")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()

    from benchmarks.common import LAMBDA_SETTINGS
    from benchmarks.prepare import HOME, MODELS, MODELS_DIR, handwritten_body, sluice_body

    os.environ.update(LAMBDA_SETTINGS, SLUICE_HOME=str(HOME), BENCH_MODELS_DIR=str(MODELS_DIR), BENCH_MODEL=args.model)
    sys.path.insert(0, str(REPO / "functions"))
    # Logs and EMF go to stdout, as in Lambda; keep them out of the report.
    real_stdout = sys.stdout
    sys.stdout = open(os.devnull, "w")  # noqa: SIM115 - for the process's life
    report = real_stdout

    from pyinstrument import Profiler

    from benchmarks.inprocess import LambdaContext, rest_event
    from benchmarks.peers import handwritten
    from sluice.handlers import api

    model = MODELS[args.model]
    context = LambdaContext()
    ours = rest_event("/api/v1/predictions", sluice_body(model, args.batch), tenant="default")
    theirs = rest_event(f"/models/{args.model}/predict", handwritten_body(model, args.batch))
    assert api.handler(ours, context)["statusCode"] == 200
    assert handwritten.handler(theirs, context)["statusCode"] == 200
    for _ in range(200):
        api.handler(ours, context)
        handwritten.handler(theirs, context)

    profiler = Profiler(interval=0.0001)
    profiler.start()
    deadline = time.perf_counter() + args.seconds
    calls = 0
    while time.perf_counter() < deadline:
        api.handler(ours, context)
        calls += 1
    session = profiler.stop()
    root = profiler.last_session.root_frame() if hasattr(profiler, "last_session") else session.root_frame()
    self_times: dict[str, float] = defaultdict(float)
    totals: dict[str, float] = defaultdict(float)
    _walk(root, self_times, totals, frozenset())
    per_call = 1e6 / calls

    print(f"# sluice handler, {args.model} batch {args.batch}: {calls} calls in {args.seconds:g} s under pyinstrument", file=report)
    print(f"\n## top {args.top} frames by self time (µs per request)", file=report)
    for key, value in sorted(self_times.items(), key=lambda kv: -kv[1])[: args.top]:
        print(f"{value * per_call:8.1f}  {key}", file=report)
    print("\n## sluice frames by inclusive time (µs per request)", file=report)
    ours_frames = [(k, v) for k, v in totals.items() if "sluice/" in k]
    for key, value in sorted(ours_frames, key=lambda kv: -kv[1])[: args.top]:
        print(f"{value * per_call:8.1f}  {key}", file=report)
    print("\n## FastAPI/Starlette/Mangum/powertools frames by inclusive time (µs per request)", file=report)
    lib_frames = [(k, v) for k, v in totals.items() if any(f"{lib}/" in k for lib in ("fastapi", "starlette", "mangum", "aws_lambda_powertools", "anyio", "logging"))]
    for key, value in sorted(lib_frames, key=lambda kv: -kv[1])[: args.top]:
        print(f"{value * per_call:8.1f}  {key}", file=report)

    what_ifs(api, handwritten, ours, theirs, context, report, seconds=max(1.0, args.seconds / 3))


def _dependants(app: Any) -> Iterator[Any]:
    """Every resolved dependency node alive in the process (routers included into the app keep
    their own copies, so walking `app.routes` alone would miss some)."""
    import gc

    from fastapi.dependencies.models import Dependant

    del app  # every app in the process: this one is the only one
    yield from (o for o in gc.get_objects() if isinstance(o, Dependant))


@contextlib.contextmanager
def _replace_dependency(app: Any, dependency: Any, replacement: Any) -> Iterator[None]:
    """Swap a dependency's callable in the routes' resolved trees, as if the source said so.
    (FastAPI's dependency_overrides would re-analyse the override's signature per request,
    which costs more than what is being measured.)"""
    patched = [d for d in _dependants(app) if d.call is dependency]
    for dependant in patched:
        dependant.call = replacement
    try:
        yield
    finally:
        for dependant in patched:
            dependant.call = dependency


def measure(call: Callable[[], Any], seconds: float) -> tuple[float, float]:
    """p50 wall µs and mean CPU µs (all threads of this process) per call."""
    samples = []
    cpu0 = time.process_time()
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        t0 = time.perf_counter_ns()
        call()
        samples.append(time.perf_counter_ns() - t0)
    cpu = (time.process_time() - cpu0) / len(samples) * 1e6
    return percentile([x / 1000 for x in samples], 50), cpu


def what_ifs(api: Any, handwritten: Any, ours: dict[str, Any], theirs: dict[str, Any], context: Any, report: Any, *, seconds: float) -> None:
    """A ladder of changes, each added to the ones above it, measured interleaved."""
    import logging

    from sluice.api import deps
    from sluice.observability import get_logger

    container = api.app.state.container
    logger = get_logger()

    async def get_container_async(request: Any) -> Any:  # what `async def get_container` would be
        return container

    def async_container() -> contextlib.AbstractContextManager[None]:
        return _replace_dependency(api.app, deps.get_container, get_container_async)

    @contextlib.contextmanager
    def no_log_line() -> Iterator[None]:
        level = logger.log_level
        logger.setLevel(logging.WARNING)
        try:
            yield
        finally:
            logger.setLevel(level)

    @contextlib.contextmanager
    def no_emf() -> Iterator[None]:
        before = container.telemetry.emit_metrics
        container.telemetry.emit_metrics = False
        try:
            yield
        finally:
            container.telemetry.emit_metrics = before

    import asyncio

    first = [] if asyncio.iscoroutinefunction(deps.get_container) else [async_container]
    ladder: list[tuple[str, list[Callable[[], contextlib.AbstractContextManager[None]]], bool]] = [
        ("sluice handler as is", [], True),
        *([("+ get_container as async def (no thread per request)", first, True)] if first else []),
        ("+ no prediction log line", [*first, no_log_line], True),
        ("+ no EMF metrics", [*first, no_log_line, no_emf], True),
        ("+ no Lambda-context decorator (the event adapter alone)", [*first, no_log_line, no_emf], False),
    ]
    print("\n## what-ifs, cumulative: p50 wall µs and CPU µs per request (median of 3 interleaved rounds)", file=report)
    results: dict[str, list[tuple[float, float]]] = defaultdict(list)
    reference = "hand-written Mangum handler (reference)"
    for _ in range(3):
        for _ in range(50):
            handwritten.handler(theirs, context)
        results[reference].append(measure(lambda: handwritten.handler(theirs, context), seconds))
        for label, changes, decorated in ladder:
            call = (lambda: api.handler(ours, context)) if decorated else (lambda: api._asgi(ours, context))
            with contextlib.ExitStack() as stack:
                for change in changes:
                    stack.enter_context(change())
                for _ in range(50):
                    call()
                results[label].append(measure(call, seconds))
    ref_wall = sorted(w for w, _ in results[reference])[1]
    for label in [reference, *(step[0] for step in ladder)]:
        wall = sorted(w for w, _ in results[label])[1]
        cpu = sorted(c for _, c in results[label])[1]
        print(f"{wall:8.1f} wall  {cpu:8.1f} cpu  ({wall / ref_wall:4.2f}x hand-written p50)  {label}", file=report)


if __name__ == "__main__":
    main()
