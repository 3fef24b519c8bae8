"""powertools' log line, written faster: the formatter sluice's logger uses (the same line for
a plain record at a fraction of the cost), orjson to serialize it, and the prediction line
written straight to powertools' handler where it is the only one (`log_info`)."""

from __future__ import annotations

import logging
import os
import sys
import time
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from sluice.caching import keep

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import CodeType, FrameType

    from aws_lambda_powertools import Logger

_NONE = type(None)
_MILLIS = tuple(f"{ms:03d}" for ms in range(1000))  # a timestamp's milliseconds as powertools writes them


@lru_cache(maxsize=1)
def formatter_class() -> type:
    """powertools' `LambdaPowertoolsFormatter`, with the same line for a plain record (a
    message that is a word, no arguments, no exception) at a fraction of the cost: the keys
    that stay the same from line to line (level, location, message, service, the Lambda
    context) are serialized once per key set and call site, the values that change from one
    Lambda invocation to the next (cold_start, function_request_id, the trace id) once per
    invocation and call site, the timestamp's seconds once per second, and only the record's
    own fields per line. Any other record, or a logger configured away from the defaults,
    takes powertools' own path."""
    import re

    from aws_lambda_powertools.logging import formatter as base
    from aws_lambda_powertools.shared.constants import XRAY_TRACE_ID_ENV

    reserved = frozenset(base.RESERVED_LOG_ATTRS)
    # A message starting with one of these may be JSON (powertools decodes it): its own path.
    maybe_json = frozenset('{["-0123456789tfnNI \t\r\n')
    # Keys powertools sets after a record's own fields: a record that brings one of them (or
    # one of the fixed keys) takes powertools' path, which knows what wins.
    late = frozenset({"message", "exception", "exception_name", "exception_notes", "stack_trace", "xray_trace_id"})
    # Keys whose values change from one Lambda invocation to the next (powertools' decorator
    # sets them): filled in per line, so that the rest is serialized once, not per invocation.
    volatile = frozenset({"cold_start", "function_request_id"})
    slot = re.compile(r'"@@sluice-(ts|\d+)@@"')
    stamp = "ts"

    class Formatter(base.LambdaPowertoolsFormatter):
        _second: int | None = None  # the second `_stamp` was made for (None: none yet)
        _stamp = ("", "")
        _version = 0
        _seen: tuple[int, int] | None = None  # (id, version) of the keys last looked at
        _shape: list[tuple[str, Any]] | None = None  # those keys, volatile values left out
        _volatile: tuple[tuple[int, int] | None, dict[str, str]] = (None, {})  # the volatile keys' values serialized, for `_seen`
        _trace: tuple[int, str] = (-1, "")  # the X-Ray trace id's member (or "") read when an invocation started, by version
        # What the last invocation's keys were made from, but for its volatile values: (version
        # after them, powertools' default keys, function name, memory, ARN, their shape), and
        # those keys.
        _steady: tuple[Any, ...] | None = None
        _raw_trace: tuple[str | None, str] = (None, "")  # the trace variable last read, and its member
        _template: dict[str, Any] | None = None
        _plans: dict[tuple[Any, ...], tuple[str, ...] | None]
        _blocked: frozenset[str] = late  # fields a line of these keys leaves to powertools' path
        _joined: tuple[Any, dict[tuple[Any, ...], tuple[str, ...]]] = (None, {})  # `_pieces` by call site, for `_seen`

        def _plan(self, levelname: str, func: str, lineno: int, message: str) -> tuple[str, ...] | None:
            """The line's fixed keys serialized, as texts between which (at odd places) stand
            the name of a volatile key (`cold_start`) or a NUL (which JSON text never holds
            raw) where the timestamp goes; None where this path does not know a key's
            template. Made again when a key or a fixed value changes."""
            keys = self.log_format
            if (id(keys), self._version) != self._seen:
                self._reshape()
            at = (levelname, func, lineno, message)
            found = self._plans.get(at, False)
            if found is not False:
                return found  # type: ignore[return-value]
            plan = None
            if "message" in keys and "xray_trace_id" not in keys:
                fixed: dict[str, Any] = {}
                names: list[str] = []
                for key, value in keys.items():
                    if value and key in reserved:
                        if value == "%(levelname)s":
                            value = levelname
                        elif value == "%(funcName)s:%(lineno)d":
                            value = f"{func}:{lineno}"
                        elif value == "%(asctime)s":
                            value = f"@@sluice-{stamp}@@"
                        else:
                            fixed = {}
                            break
                    elif key == "message":
                        value = message
                    elif key in volatile and type(value) in (str, bool):
                        value = f"@@sluice-{len(names)}@@"
                        names.append(key)
                    if value is not None:
                        fixed[key] = value
                if self.serialize_stacktrace:
                    fixed.pop("stack_trace", None)  # powertools sets it to None, then drops it
                if fixed:
                    parts = slot.split(dumps(fixed)[:-1])
                    plan = tuple(p if i % 2 == 0 else "\0" if p == stamp else names[int(p)] for i, p in enumerate(parts))
            return keep(self._plans, at, plan, MAX_SITES)  # bounded: messages that vary (a line of text made per record)

        def _reshape(self) -> None:
            """The keys looked at anew: their plans kept while only volatile values changed."""
            keys = self.log_format
            shape = [(k, (type(v),) if k in volatile and type(v) in (str, bool) else v) for k, v in keys.items()]
            if shape != self._shape:
                self._shape, self._plans, self._blocked = shape, {}, late.union(keys)
            self._seen = (id(keys), self._version)

        def line(self, levelname: str, func: str, lineno: int, created: float, msecs: float, message: str, fields: dict[str, Any]) -> str | None:
            """The line powertools would write for a plain record with these attributes and
            these fields (its extras); None where only powertools' own path can tell."""
            keys = self.log_format
            seen = self._seen
            if seen is None or seen[0] != id(keys) or seen[1] != self._version:
                self._reshape()
                seen = self._seen
            token, joined = self._joined
            if token is not seen:  # new keys, or a new invocation's values: texts made anew
                joined = {}
                self._joined = (seen, joined)
            if not message or message[0] in maybe_json:
                return None
            at = (levelname, func, lineno, message)
            pieces = joined.get(at)
            if pieces is None:
                pieces = keep(joined, at, self._pieces(levelname, func, lineno, message), MAX_SITES)
            if not pieces or self.datefmt or self.use_rfc3339_iso8601 or base._get_context().get() or not self._blocked.isdisjoint(fields):
                return None
            second = int(created)
            if second != self._second:  # the timestamp's seconds, once per second
                parts = self.converter(created)
                self._stamp = (time.strftime('"%Y-%m-%d %H:%M:%S,', parts), time.strftime('%z"', parts))
                self._second = second if created >= 0 else None  # before 1970 `int` is not the floor: made per line
            head, zone = self._stamp
            ms = int(msecs)
            text = f"{head}{_MILLIS[ms] if 0 <= ms < 1000 else f'{ms:03d}'}{zone}".join(pieces)
            version, trace = self._trace
            if version != self._version:  # outside an invocation (or keys changed in one): read per line, as powertools does
                trace = self._trace_member()
            own = dumps(fields)[1:-1]  # the members alone ("" for none)
            if ":null" in own and _NONE in map(type, fields.values()):  # powertools drops a field that is None (types: never an array's ==)
                own = dumps({k: v for k, v in fields.items() if v is not None})[1:-1]
            return f"{text},{own}{trace}}}" if own else f"{text}{trace}}}"

        def _pieces(self, levelname: str, func: str, lineno: int, message: str) -> tuple[str, ...]:
            """The call site's fixed keys as text with the volatile keys' values in place: the
            pieces between the timestamps, made once per call site and invocation; () where
            this path does not know a key's template."""
            template = self._plan(levelname, func, lineno, message)
            if template is None:
                return ()
            seen, rendered = self._volatile
            if seen != self._seen:  # the volatile keys' values as text, once per invocation
                keys = self.log_format
                rendered = {k: ("true" if v else "false") if v is True or v is False else dumps(v) for k, v in keys.items() if k in volatile}
                self._volatile = (self._seen, rendered)  # type: ignore[assignment]
            filled = [*template]  # the names at odd places replaced by their values' text
            for i in range(1, len(filled), 2):  # (not `str.format_map`: it parses the whole line, ~11,000 instructions)
                if filled[i] != "\0":
                    filled[i] = rendered[filled[i]]
            return tuple("".join(filled).split("\0"))

        def _trace_member(self) -> str:
            """The line's X-Ray member for the trace id set now (a line of a plan has no
            `xray_trace_id` key: powertools reads the variable), rendered once per id."""
            raw = os.environ.get(XRAY_TRACE_ID_ENV)
            if raw != self._raw_trace[0]:
                trace = raw.split(";")[0].replace("Root=", "") if raw else None
                self._raw_trace = (raw, "" if trace is None else f',"xray_trace_id":{dumps(trace)}')
            return self._raw_trace[1]

        def restructure(self, keys: dict[str, Any]) -> None:
            """What powertools' `Logger.structure_logs(**keys)` does to a configured logger's
            formatter (its keys cleared, then `keys` appended), in one step."""
            fresh = dict.fromkeys(self.log_record_order)
            fresh.update(self.keys_combined)
            fresh.update(keys)
            self.log_format = fresh
            base.clear_context_keys()
            self._version += 1

        def invocation(self) -> None:
            """An invocation starts with the keys just set: its trace id, set by Lambda before it
            and holding through it, is read once (`invocation_over` forgets it)."""
            self._trace = (self._version, self._trace_member())

        def invocation_keys(self, defaults: dict[str, Any], cold_start: bool, name: Any, memory: Any, arn: Any, request_id: Any) -> None:
            """`restructure` with powertools' Lambda context keys, then `invocation`. Where only
            the volatile values (cold_start, function_request_id) differ from the last
            invocation's and no key changed since, the last keys are copied with the two values
            set and their text rendered: the plans, made for the same fixed keys, stand."""
            steady = self._steady
            if (
                steady is not None
                and steady[0] == self._version
                and type(request_id) is str
                and steady[2] == name
                and steady[3] == memory
                and steady[4] == arn
                and self._shape is steady[5]
                and steady[1] == defaults
            ):
                fresh = self._template.copy()  # type: ignore[union-attr]
                fresh["cold_start"] = cold_start
                fresh["function_request_id"] = request_id
                self.log_format = fresh
                base.clear_context_keys()
                self._seen = (id(fresh), self._version)
                self._volatile = (self._seen, {"cold_start": "true" if cold_start else "false", "function_request_id": dumps(request_id)})
            else:
                self.restructure(
                    {
                        **defaults,
                        "cold_start": cold_start,
                        "function_name": name,
                        "function_memory_size": memory,
                        "function_arn": arn,
                        "function_request_id": request_id,
                    }
                )
                keys = self.log_format
                self._reshape()  # the plans' keys are these now: a copy of them may skip this
                vary = type(request_id) is str and type(keys.get("cold_start")) is bool and keys.get("function_request_id") is request_id
                self._steady = (self._version, dict(defaults), name, memory, arn, self._shape) if vary else None
                self._template = dict(keys)
            self.invocation()

        def invocation_over(self) -> None:
            self._trace = (-1, "")

        def append_keys(self, **additional_keys: Any) -> None:
            super().append_keys(**additional_keys)
            self._version += 1

        def remove_keys(self, keys: Any) -> None:
            super().remove_keys(keys)
            self._version += 1

        def clear_state(self) -> None:
            super().clear_state()
            self._version += 1

        def format(self, record: Any) -> str:
            message = record.msg
            if not record.args and not record.exc_info and type(message) is str:
                fields = {k: v for k, v in record.__dict__.items() if k not in reserved}
                text = self.line(record.levelname, record.funcName, record.lineno, record.created, record.msecs, message, fields)
                if text is not None:
                    return text
            return super().format(record)

    return Formatter


def dumps(record: Any) -> str:
    global _orjson_dumps
    if _orjson_dumps is None:
        import orjson

        _orjson_dumps = orjson.dumps
    return _orjson_dumps(record, default=str).decode()


_orjson_dumps: Callable[..., bytes] | None = None


def log_info(logger: Logger, message: str, extra: dict[str, Any]) -> None:
    """`logger.info(message, extra=extra)` for a caller that already knows INFO is on.

    Where powertools' handler is the only one the line reaches (no filter, no other handler
    on the way up), the line is formatted from the call's attributes and written by that
    handler's stream, under its lock, with no `LogRecord` on the way: the same line. Anywhere
    else (a test capturing records, a handler added by the host) the record goes through
    logging as `info` sends it."""
    std = logger._logger
    caller = sys._getframe(1)
    code = caller.f_code
    handler = sole_handler(std)
    if handler is not None:
        now = time.time()
        text = handler.formatter.line("INFO", code.co_name, _line_of(caller), now, (now - int(now)) * 1000, message, extra)  # type: ignore[union-attr]
        if text is not None:
            lock = handler.lock  # `handler.acquire()`, and in it `handler.flush()`'s steps, without their calls
            if lock:
                lock.acquire()
            try:
                stream = handler.stream
                stream.write(text + handler.terminator)
                if stream and hasattr(stream, "flush"):
                    stream.flush()
                return
            except Exception:  # as StreamHandler.emit: the handler reports it
                handler.handleError(std.makeRecord(std.name, logging.INFO, code.co_filename, caller.f_lineno, message, (), None, code.co_name, extra))
                return
            finally:
                if lock:
                    lock.release()
    std.handle(std.makeRecord(std.name, logging.INFO, code.co_filename, caller.f_lineno, message, (), None, code.co_name, extra))


_LINES: dict[tuple[int, int], tuple[CodeType, int]] = {}  # (id of a code, instruction) -> (the code, its line)
MAX_LINES = 4096  # call sites: a few; a bound all the same
MAX_SITES = 1024  # (level, function, line, message) a formatter keeps texts for


def _line_of(frame: FrameType) -> int:
    """`frame.f_lineno`, kept per code object and instruction: Python works a line out by
    walking the code's line table from its start (~4 µs at 150 lines in, as a prediction's line
    is), and a call site's line never changes. Keyed by the code's id (a code's own hash
    hashes its constants every time), the code kept with its line so that an id reused by
    another code is told apart."""
    code = frame.f_code
    at = (id(code), frame.f_lasti)
    found = _LINES.get(at)
    if found is None or found[0] is not code:
        found = keep(_LINES, at, (code, frame.f_lineno), MAX_LINES)
    return found[1]


def sole_handler(std: logging.Logger) -> logging.StreamHandler | None:  # type: ignore[type-arg]
    """powertools' stream handler when a record of `std` at INFO would reach it and nothing else."""
    handlers = std.handlers
    if len(handlers) != 1 or std.filters:
        return None
    handler = handlers[0]
    if type(handler) is not logging.StreamHandler or handler.filters or handler.level > logging.INFO:
        return None
    if type(handler.formatter) is not formatter_class():
        return None
    parent = std.parent if std.propagate else None
    while parent is not None:
        if parent.handlers:
            return None
        parent = parent.parent if parent.propagate else None
    return handler
