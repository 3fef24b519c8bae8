"""Running `function` steps (`sluice.domain.functions`): a tenant's Lambda function, invoked
with the step's rows, or locally a Python callable from the operator's folder.

Who may call what is one rule, `FunctionSteps.refusal`, asked when a policy is saved (a 422
naming the field) and again on every call (settings may have changed since): a Lambda ARN
must be on the tenant's allowlist (`function_arns`); a `module:callable` is refused in aws mode
(sluice never runs a tenant's code in its own process there), and locally must be a module
file inside the functions folder (`functions_dir`, `{tenant}` filled in), symbolic links and
all. Local mode accepts both kinds: a local service may call a Lambda function it is allowed.

Every call runs in its tenant's own threads (`function_threads` of them), never in the event
loop's shared executor, which checks keys and runs models: a call that never returns outlives
its step's timeout in a thread, and so takes one of its own tenant's. A module is loaded under
a lock of its own path, so a slow import holds up no other module.

Every answer is checked against the step's declared outputs (`check_answer`), a module's in
its tenant's thread (reading the tenant's objects runs its code); failures map as
a runtime's do: a timeout 504, a function that fails or answers wrongly 502, throttling 503,
an event over Lambda's limit 413.
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import importlib.util
import json
import logging
import re
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from sluice.clients import lazy_client
from sluice.codecs.casts import cast_exact
from sluice.codecs.datatypes import V2_TO_NUMPY
from sluice.codecs.function_payloads import decode_answer, encode_event
from sluice.domain.errors import (
    BackendError,
    DeadlineExceeded,
    Forbidden,
    PayloadTooLarge,
    SluiceError,
    Unavailable,
)
from sluice.domain.functions import FOR_MIRROR, MAX_TIMEOUT_S, MODULE_PATTERN
from sluice.domain.results import rows_of
from sluice.inline import timeout

if TYPE_CHECKING:
    from typing import Unpack

    from sluice.clients import AwsArgs, LazyClient
    from sluice.domain.functions import Function
    from sluice.settings import FunctionSettings

log = logging.getLogger(__name__)


class FunctionSteps:
    """`client`: a Lambda client to use for every region (a test's); else one per region of
    the ARNs called, from `clients`."""

    def __init__(self, settings: FunctionSettings, *, mode: str, **aws: Unpack[AwsArgs]) -> None:
        self.settings = settings
        self.mode = mode
        self._aws = aws
        self._lambdas: dict[str | None, LazyClient] = {}
        self._loaded: dict[str, tuple[int, Any]] = {}  # by path: (the file's mtime, the module)
        self._loading: dict[str, threading.Lock] = {}  # by path: held while the module loads
        self._pools: dict[tuple[str, bool], ThreadPoolExecutor] = {}  # by tenant, and whether for its mirrors
        self._lock = threading.Lock()  # over `_loading` and `_pools`; never held while a module loads

    # Who may call what --------------------------------------------------------------------
    def refusal(self, node: Function, tenant: str) -> str | None:
        """Why `tenant` may not run `node`, or None when it may."""
        if node.on_lambda:
            if node.function not in self.settings.function_arns.get(tenant, ()):
                return f"Lambda function {node.function} is not on tenant '{tenant}''s allowlist of functions (the operator's function_arns)"
            return None
        if self.mode == "aws":
            return "on AWS sluice runs no tenant code in its own process: a function step names a Lambda function ARN"
        if not self.settings.functions_dir:
            return "module functions are off here: the operator names a folder of them (SLUICE_FUNCTIONS_DIR)"
        return None if self._module_path(node, tenant) is not None else f"there is no module '{node.function.partition(':')[0]}' in the functions folder"

    def unknown_callable(self, node: Function, tenant: str) -> str | None:
        """Why a module step's callable is none its module defines, where its source tells
        without running it (`defined_at_top`: Python's own `__loader__` or `__spec__` are not in
        it, a `def __step__` is); None where it may be one. Asked where a policy
        is saved (a step naming no function was saved, and failed with a 502 on every call):
        the module's file may change later, so each call looks again (`_run_module`)."""
        if node.on_lambda:
            return None
        path = self._module_path(node, tenant)
        module, _, name = node.function.partition(":")
        if path is None:
            return None
        try:
            if path.stat().st_size > MAX_SOURCE_BYTES:
                return None
            defined = defined_at_top(path.read_bytes())
        except (OSError, SyntaxError, ValueError, RecursionError, MemoryError):
            return None  # a file that cannot be read or parsed: its load says so, with the module's own error
        if defined is None or name in defined:
            return None
        return f"module '{module}' defines no function '{name}' (a def, a class or a name assigned or imported at its top level)"

    def _module_path(self, node: Function, tenant: str) -> Path | None:
        """The module's file, inside the tenant's functions folder; None where it is not one."""
        folder = Path(self.settings.functions_dir.replace("{tenant}", tenant)).expanduser().resolve()
        module = MODULE_PATTERN.fullmatch(node.function)
        if module is None:
            return None
        path = folder.joinpath(*module["module"].split(".")).with_suffix(".py").resolve()
        return path if path.is_relative_to(folder) and path.is_file() else None

    # Calls ---------------------------------------------------------------------------------
    async def call(self, node: Function, tenant: str, arrays: dict[str, np.ndarray], *, timeout_s: float) -> dict[str, np.ndarray]:
        """The function's answer to these rows, checked against its declared outputs."""
        refused = self.refusal(node, tenant)
        if refused is not None:
            raise Forbidden(refused, field="policy")
        limit = min(node.timeout_s, timeout_s)
        try:
            async with timeout(max(limit, 0.0)):
                if node.on_lambda:
                    answer = await self._invoke(node, tenant, arrays)
                else:
                    return await asyncio.get_running_loop().run_in_executor(self._pool(tenant), self._run_module, node, tenant, arrays)
        except TimeoutError:
            raise DeadlineExceeded(f"function {node.function} gave no answer within {limit:g} s") from None
        return check_answer(node, answer, rows_of(arrays))  # sluice's own decoded JSON or Arrow: quick, and runs no tenant code

    def _pool(self, tenant: str) -> ThreadPoolExecutor:
        """The tenant's threads, or its shadow mirrors' own (`FOR_MIRROR`)."""
        lane = (tenant, FOR_MIRROR.get())
        pool = self._pools.get(lane)
        if pool is None:
            with self._lock:
                pool = self._pools.get(lane)
                if pool is None:
                    name = f"function-{tenant}{'-mirror' if lane[1] else ''}"
                    pool = self._pools[lane] = ThreadPoolExecutor(self.settings.function_threads, thread_name_prefix=name)
        return pool

    def _run_module(self, node: Function, tenant: str, arrays: dict[str, np.ndarray]) -> Any:
        path = self._module_path(node, tenant)
        if path is None:
            raise Forbidden(f"there is no module '{node.function.partition(':')[0]}' in the functions folder", field="policy")
        name = node.function.partition(":")[2]
        # BaseException: the tenant's code runs in a thread of ours, where its SystemExit,
        # KeyboardInterrupt or CancelledError means nothing but that it failed.
        try:
            function = getattr(self._module(path), name, None)
        except BaseException:
            log.exception("function step: module failed to load", extra={"function": node.function})
            raise BackendError(f"module of function {node.function} failed to load") from None
        if not callable(function):
            raise BackendError(f"module '{node.function.partition(':')[0]}' has no callable '{name}'")
        try:
            answer = function({k: v.copy() for k, v in arrays.items()})  # its own copies: it may write to them
        except BaseException as exc:
            log.warning("function step failed", exc_info=True, extra={"function": node.function})
            raise BackendError(f"function {node.function} failed ({type(exc).__name__})") from None
        # The answer is the tenant's own objects: reading them (a mapping's keys, an array's
        # `__array__`, a string's subclass) runs its code too, so here, in its thread and within
        # the step's timeout, never on the event loop; whatever that code raises is the
        # function's failure, a sluice error it raises too (its InvalidInput would blame the
        # caller): only the refusal `check_answer` itself makes goes out as it is.
        try:
            return _plain_text(check_answer(node, answer, rows_of(arrays)))
        except BackendError:
            raise
        except BaseException as exc:
            log.warning("function step: its answer could not be read", exc_info=True, extra={"function": node.function})
            raise BackendError(f"function {node.function} answered something that could not be read ({type(exc).__name__})") from None

    def _module(self, path: Path) -> Any:
        """The module at `path`, loaded again when the file changes (a local service picks up an edit)."""
        where, mtime = str(path), path.stat().st_mtime_ns
        found = self._loaded.get(where)
        if found is not None and found[0] == mtime:
            return found[1]
        with self._lock:
            loading = self._loading.setdefault(where, threading.Lock())
        with loading:
            found = self._loaded.get(where)
            if found is not None and found[0] == mtime:  # loaded while this call waited
                return found[1]
            name = f"sluice_function_{hashlib.sha256(where.encode()).hexdigest()[:16]}"
            spec = importlib.util.spec_from_file_location(name, path)
            assert spec is not None and spec.loader is not None
            module = importlib.util.module_from_spec(spec)
            sys.modules[name] = module
            try:
                spec.loader.exec_module(module)
            except BaseException:  # a module that fails to load is not left half made in sys.modules
                if sys.modules.get(name) is module:
                    del sys.modules[name]
                raise
            self._loaded[where] = (mtime, module)
        return module

    def _lambda(self, region: str | None) -> Any:
        lazy = self._lambdas.get(region)
        if lazy is None:
            where = region or self._aws.get("region")
            lazy = self._lambdas[region] = lazy_client("lambda", self._aws, region=where, read_timeout=MAX_TIMEOUT_S + 5, connect_timeout=5)
        return lazy()

    async def _invoke(self, node: Function, tenant: str, arrays: dict[str, np.ndarray]) -> Any:
        arrow = sum(a.nbytes for a in arrays.values()) >= self.settings.function_arrow_min_bytes
        event = encode_event(arrays, arrow=arrow)
        if len(event) > self.settings.function_max_payload_bytes:
            raise PayloadTooLarge(
                f"the rows for function {node.function} are {len(event)} bytes encoded, above Lambda's limit of "
                f"{self.settings.function_max_payload_bytes}: send fewer rows at once (a batch job splits them)",
                field="inputs",
            )
        client = self._lambda(node.region)
        try:
            invoke = functools.partial(client.invoke, FunctionName=node.function, InvocationType="RequestResponse", Payload=event)
            response = await asyncio.get_running_loop().run_in_executor(self._pool(tenant), invoke)
            raw = response["Payload"].read()
        except Exception as exc:
            raise _mapped(exc, node.function) from None
        if response.get("FunctionError"):
            raise _function_error(raw, node.function)
        # Decoded on the tenant's threads, within the step's timeout: an answer is the tenant's
        # bytes, and the event loop serves every tenant.
        decode = functools.partial(decode_answer, raw, what=f"function {node.function}", rows=rows_of(arrays))
        return await asyncio.get_running_loop().run_in_executor(self._pool(tenant), decode)


MAX_SOURCE_BYTES = 4 * 1024 * 1024  # a module's source read for the names it defines at save, at most


def defined_at_top(source: bytes) -> frozenset[str] | None:
    """The names a module's source may bind at its top level (functions, classes, names
    assigned or imported, in any branch of its statements: more rather than fewer), read with
    `ast` and never run; None where a name may come from elsewhere too (`from x import *`, a
    module `__getattr__`, a `global` statement, or `globals()`, `vars()`, `setattr`, `exec`,
    `eval` or `__import__` anywhere in it)."""
    import ast

    tree = ast.parse(source)
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Global) or (isinstance(node, ast.ImportFrom) and any(a.name == "*" for a in node.names)):
            return None
        if (isinstance(node, ast.Name) and node.id in _DYNAMIC) or (isinstance(node, ast.Attribute) and node.attr in _DYNAMIC):
            return None  # `sys.modules[__name__].f = ...`, `import_module(__name__).f = ...`, `module.__dict__[...]`
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(stmt.name)
            continue
        for node in ast.walk(stmt):  # an assignment, an import, or a block holding them
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Import | ast.ImportFrom):
                names.update(a.asname or a.name.partition(".")[0] for a in node.names)
            elif isinstance(node, ast.MatchAs | ast.MatchStar) and node.name:
                names.add(node.name)
            elif isinstance(node, ast.MatchMapping) and node.rest:
                names.add(node.rest)
            elif isinstance(node, ast.ExceptHandler) and node.name:
                names.add(node.name)
    return None if "__getattr__" in names else frozenset(names)


# Names through which a module's code may bind names of its own as it runs, read or called
# anywhere in it. `__name__` alone is not one (`logging.getLogger(__name__)`): the module is
# reached through it only by one of these (`sys.modules`, `import_module`).
_DYNAMIC = frozenset({
    "globals", "locals", "vars", "setattr", "exec", "eval", "__import__", "__dict__", "__builtins__",
    "import_module", "modules", "getmodule",  # the module reached by its name (`sys.modules[__name__]`), or a function's
    "f_globals", "f_locals", "__globals__", "_getframe", "currentframe",  # its namespace reached through a frame or a function
})  # fmt: skip


def _mapped(exc: Exception, arn: str) -> SluiceError:
    """Lambda's and the transport's failures as sluice errors; the raw text to the log only."""
    from sluice.runtimes.aws_failures import aws_failure

    if isinstance(exc, SluiceError):
        return exc
    match aws_failure(exc, "function step", function=arn):
        case ("timeout", _):
            return DeadlineExceeded(f"function {arn} did not answer in time")
        case ("unreachable", _):
            return Unavailable("Lambda is not reachable")
        case ("refused", "TooManyRequestsException" | "ThrottlingException" | "ResourceNotReadyException" | "ServiceException" | "EC2ThrottledException" as code):
            return Unavailable(f"function {arn} cannot be invoked right now ({code}); retry shortly")
        case ("refused", "RequestTooLargeException" | "InvalidRequestContentException" as code):
            return PayloadTooLarge(f"Lambda refused the event for function {arn} ({code})", field="inputs")
        case ("refused", "ResourceNotFoundException"):
            return BackendError(f"function {arn} does not exist")
        case ("refused", "AccessDeniedException"):
            return BackendError(f"sluice may not invoke function {arn}: the operator grants it (graphs.functions in the deployment's config)")
        case (_, code):
            return BackendError(f"invoking function {arn} failed ({code})")


def _function_error(raw: bytes, arn: str) -> SluiceError:
    """The function raised, or Lambda stopped it (its own timeout, its memory)."""
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError):
        body = {}
    body = body if isinstance(body, dict) else {}
    kind, message = str(body.get("errorType") or "error"), str(body.get("errorMessage") or "")
    log.warning("function step: the function failed", extra={"function": arn, "error_type": kind, "error": message[:500]})
    # Lambda's own timeout: its error type, or (older runtimes) its message with no error type.
    # The function's own errors say their type: whatever their message says, they are its.
    if kind == "Sandbox.Timedout" or (not body.get("errorType") and re.search(r"\bTask timed out after [\d.]+ seconds", message)):
        return DeadlineExceeded(f"function {arn} ran past its own Lambda timeout")
    return BackendError(f"function {arn} failed ({kind[:100]})")


def check_answer(node: Function, answer: Any, rows: int) -> dict[str, np.ndarray]:
    """The answer as the declared outputs say (names, datatypes, shapes, `rows` rows), or a
    BackendError saying how it differs. Values are cast to the declared datatype where no
    value changes (an integer to a float, a float64 to FP32, a whole float to an integer)."""
    what = f"function {node.function}"
    if not isinstance(answer, dict) or not all(isinstance(k, str) for k in answer):
        raise BackendError(f"{what} answered {type(answer).__name__}, not a mapping of output names to arrays")
    declared = [s.name for s in node.outputs]
    extra = sorted(set(answer) - set(declared))
    if extra:
        raise BackendError(f"{what} answered output '{extra[0]}', which it does not declare (it declares {declared})")
    out: dict[str, np.ndarray] = {}
    for spec in node.signature.outputs:
        if spec.name not in answer:
            raise BackendError(f"{what} answered no output '{spec.name}' (it answered {sorted(answer)})")
        try:
            array = np.asarray(answer[spec.name])
            dtype = V2_TO_NUMPY[spec.datatype]
            if array.dtype != dtype or spec.datatype == "BYTES":  # an object array's values are looked through too
                array = cast_exact(array, spec.datatype, dtype, answer=True)
        except (ValueError, TypeError, OverflowError):
            raise BackendError(f"{what} answered output '{spec.name}' with values that are not {spec.datatype}") from None
        fits = array.ndim == len(spec.shape) and all(w in (-1, g) for w, g in zip(spec.shape, array.shape, strict=False))
        if not fits:
            raise BackendError(f"{what} answered output '{spec.name}' in shape {list(array.shape)}; it declares {list(spec.shape)}")
        if array.shape[0] != rows:
            raise BackendError(f"{what} answered {array.shape[0]} rows of output '{spec.name}' for {rows} rows")
        out[spec.name] = array
    return out


def _plain_text(outputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """A text output's values as Python's own str and bytes: a subclass of either is copied
    (`str.__str__` and `bytes.__bytes__` copy one without calling its methods), so no code of
    the tenant's runs later, where the answer is encoded on the event loop."""
    for name, array in outputs.items():
        if array.dtype != object:
            continue
        values = array.ravel().tolist()
        if all(type(v) is str or type(v) is bytes for v in values):
            continue
        plain = np.empty(len(values), dtype=object)
        plain[:] = [str.__str__(v) if isinstance(v, str) else bytes.__bytes__(v) if isinstance(v, bytes) else v for v in values]
        outputs[name] = plain.reshape(array.shape)
    return outputs
