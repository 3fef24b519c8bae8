"""`sluice stream` told to stop: a real process fed an endless pipe, stopped by a real signal
while it runs. Every line it read comes out exactly once, in order, as a prediction or an error;
the summary says so and the exit status is 128 + the signal's number. A second signal exits at
once and says how many lines were left unaccounted for; a worker that dies fails its lines as
retryable errors."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.conftest import REPO
from tests.integration.stream.conftest import SETOSA

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sluice.settings import Settings
    from sluice.wiring import Container

STOPPED = re.compile(r"stopped by (SIG\w+): (\d+) lines read, (\d+) written \((\d+) predictions, (\d+) errors\)")
AT_ONCE = re.compile(r"stopped at once by a second (SIG\w+): (\d+) lines read, (\d+) written, (\d+) unaccounted for")


@pytest.fixture
def env(demo: Container, settings: Settings) -> dict[str, str]:
    return {
        **os.environ,
        "SLUICE_HOME": str(settings.home_path),
        "PYTHONPATH": os.pathsep.join([str(REPO / "functions"), os.environ.get("PYTHONPATH", "")]),
    }


def _line(n: int) -> bytes:
    """Input line `n` (1-based): its id says its number; every 997th line can never succeed."""
    if n % 997 == 0:
        return b'{"id": "bad-%d", "features": {"sepal_length": 1}}\n' % n
    return b'{"id": "tx-%d", "features": %s}\n' % (n, json.dumps(SETOSA).encode())


def _feed(pipe: Any) -> None:
    """An endless producer: the stream cannot run out of input before it is told to stop."""
    n = 0
    try:
        while True:
            pipe.write(b"".join(_line(n + k) for k in range(1, 5001)))
            n += 5000
    except (BrokenPipeError, ValueError, OSError):  # the stream stopped reading and exited
        pass


class Stream:
    """`sluice stream` reading from an endless pipe; its stdout is read by the caller."""

    def __init__(self, env: dict[str, str], workers: int, *, session: bool = False) -> None:
        args = [sys.executable, "-m", "sluice.cli", "--tenant", "acme", "stream", "--deployment", "iris", "--workers", str(workers), "--quiet"]
        self.proc = subprocess.Popen(args, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=session)
        self.feeder = threading.Thread(target=_feed, args=(self.proc.stdin,), daemon=True)
        self.feeder.start()
        self.out = b""

    def read_until_written(self, lines: int) -> None:
        assert self.proc.stdout is not None
        while self.out.count(b"\n") < lines:
            chunk = os.read(self.proc.stdout.fileno(), 1 << 16)
            assert chunk, f"the stream ended early: {self.finish()[1]}"
            self.out += chunk

    def workers(self) -> list[int]:
        """The stream's worker processes (its children)."""
        children = Path(f"/proc/{self.proc.pid}/task/{self.proc.pid}/children")
        return [int(pid) for pid in children.read_text().split()] if children.exists() else []

    def finish(self) -> tuple[int, str]:
        assert self.proc.stdout is not None and self.proc.stderr is not None
        while chunk := os.read(self.proc.stdout.fileno(), 1 << 16):
            self.out += chunk
        err = self.proc.stderr.read().decode()
        code = self.proc.wait(timeout=120)
        self.feeder.join(timeout=30)
        return code, err

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def streams(env: dict[str, str]) -> Iterator[list[Stream]]:
    started: list[Stream] = []
    yield started
    for stream in started:
        stream.kill()


def _outputs(out: bytes) -> list[dict[str, Any]]:
    assert out.endswith(b"\n"), "the output ends in the middle of a line"
    return [json.loads(line) for line in out.splitlines()]


def _check_every_line_once(outputs: list[dict[str, Any]], read: int) -> None:
    """Line 1 to `read`, each once, in order: a prediction for a good line, an error otherwise."""
    assert [o["source"]["line"] for o in outputs] == list(range(1, read + 1))
    for n, o in enumerate(outputs[:-1], 1):  # the last line read may have been cut off (checked below)
        if n % 997 == 0:
            assert o["id"] == f"bad-{n}" and "error" in o and not o.get("retryable"), o
        else:
            assert o["id"] == f"tx-{n}" and o["prediction"] == "setosa", o
    last = outputs[-1]
    assert "prediction" in last or "error" in last


@pytest.mark.parametrize(
    ("workers", "signum", "group"),
    [(2, signal.SIGTERM, False), (2, signal.SIGINT, True), (1, signal.SIGTERM, False)],
    ids=["sigterm-2-workers", "ctrl-c-to-the-group-2-workers", "sigterm-1-worker"],
)
def test_a_signal_drains_every_line_read_and_exits_128_plus_it(
    env: dict[str, str], streams: list[Stream], workers: int, signum: int, group: bool
) -> None:
    stream = Stream(env, workers, session=group)
    streams.append(stream)
    stream.read_until_written(2000)  # mid-run: answers are coming out, more input is waiting
    children = stream.workers()
    assert len(children) == (workers if workers > 1 else 0)
    if group:  # as a terminal's Ctrl-C does: every process of the group gets it, workers too
        os.killpg(stream.proc.pid, signum)
    else:
        os.kill(stream.proc.pid, signum)
    code, err = stream.finish()

    assert code == 128 + signum, err
    summary = STOPPED.search(err)
    assert summary is not None, err  # printed although --quiet: it says where to resume
    name, read, written, predictions, errors = summary.group(1), *map(int, summary.groups()[1:])
    assert name == signal.Signals(signum).name
    outputs = _outputs(stream.out)
    assert read == written == len(outputs) > 2000
    _check_every_line_once(outputs, read)
    assert predictions == sum("prediction" in o for o in outputs) and errors == sum("error" in o for o in outputs)
    assert "Traceback" not in err
    for pid in children:  # each worker answered its lines and exited before the stream did
        assert not Path(f"/proc/{pid}").exists(), f"worker {pid} outlived the stream"


def test_a_second_signal_exits_at_once_saying_what_is_unaccounted_for(env: dict[str, str], streams: list[Stream]) -> None:
    stream = Stream(env, 2)
    streams.append(stream)
    stream.read_until_written(1)
    # Nothing more is read from its stdout yet: the stream is held writing to a full pipe, so
    # the drain cannot end before the second signal comes.
    os.kill(stream.proc.pid, signal.SIGTERM)
    os.kill(stream.proc.pid, signal.SIGINT)
    code, err = stream.finish()

    summary = AT_ONCE.search(err)
    assert summary is not None, err
    second, read, written, unaccounted = summary.group(1), *map(int, summary.groups()[1:])
    assert code == 128 + signal.Signals[second].value
    assert unaccounted == read - written > 0
    whole = stream.out[: stream.out.rfind(b"\n") + 1]  # exiting at once may cut the last line
    outputs = _outputs(whole)
    assert written <= len(outputs) <= read  # at least what it counted went out, no line twice
    assert [o["source"]["line"] for o in outputs] == list(range(1, len(outputs) + 1))


def test_a_worker_that_dies_fails_its_lines_as_retryable_and_nothing_is_lost(env: dict[str, str], streams: list[Stream]) -> None:
    stream = Stream(env, 2)
    streams.append(stream)
    stream.read_until_written(2000)
    os.kill(stream.workers()[0], signal.SIGKILL)
    code, err = stream.finish()

    assert code == 1, err
    outputs = _outputs(stream.out)
    assert [o["source"]["line"] for o in outputs] == list(range(1, len(outputs) + 1))
    first = next(n for n, o in enumerate(outputs) if o.get("retryable"))
    assert first >= 2000  # the lines answered before it are as they were
    assert all("prediction" in o or o["id"].startswith("bad-") for o in outputs[:first])
    lost = outputs[first:]  # the dead worker's lines, and every line read after them
    assert all(o["retryable"] and o["code"] == "unavailable" and "worker" in o["error"] for o in lost[:-1])
    assert lost[-1]["retryable"]  # that, or the line the stop cut off


def test_a_worker_killed_while_it_sends_an_answer_still_lets_the_stream_end(env: dict[str, str], streams: list[Stream]) -> None:
    """An answer (a block's output) is larger than a pipe holds: a worker killed while it sends
    one leaves half a message in the pool's result pipe, which the executor's thread then waits
    on for ever. The stream still ends, every line accounted for."""
    stream = Stream(env, 2)
    streams.append(stream)
    stream.read_until_written(2000)
    sending = None
    # Stopped, nothing reads the answers: a worker's send fills the pipe. A worker idle as the
    # stream stopped (the stream itself held writing lines nobody read) sends nothing: then
    # the stream goes on a while, its lines read, and is stopped again (a busy machine).
    for _ in range(20):
        os.kill(stream.proc.pid, signal.SIGSTOP)
        try:
            for _ in range(60):
                sending = next((pid for pid in stream.workers() if "pipe_write" in Path(f"/proc/{pid}/wchan").read_text()), None)
                if sending is not None:
                    os.kill(sending, signal.SIGKILL)
                    break
                time.sleep(0.05)
        finally:
            os.kill(stream.proc.pid, signal.SIGCONT)
        if sending is not None:
            break
        stream.read_until_written(stream.out.count(b"\n") + 500)
    assert sending is not None, "no worker was held sending an answer"
    code, err = stream.finish()

    assert code == 1, err
    outputs = _outputs(stream.out)
    assert [o["source"]["line"] for o in outputs] == list(range(1, len(outputs) + 1))
    lost = [o for o in outputs if o.get("retryable")]
    assert lost and lost == outputs[-len(lost) :]  # the dead worker's lines and every line after them
