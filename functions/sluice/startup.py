"""A process's start-up without the cyclic garbage collector.

Starting, a process makes objects that live as long as it does: modules, classes, pydantic's
validators, the parser, the container. Python's collector looks for cycles among them again
and again while they are made (some 150 passes, a full one among them) and frees none of them:
45-50 ms of a `sluice batch run` of 0.65 CPU s, and as much of a Lambda function's cold start
(the API's import: 45 ms of 0.6 s). So an entry point pauses it (`pause`: the CLI's, and a Lambda
handler module's where it runs in Lambda) and, once its start-up is over (`started`), freezes
what start-up made (`gc.freeze`: kept out of every later pass, as CPython's documentation
advises for a process's long-lived objects) and turns the collector back on.

A process whose entry never says its start-up is over gets the collector back `MOST_S`
seconds after the pause at the latest (a timer thread), so no long-running command leaves it
off; a child forked meanwhile gets it back as it starts (its parent's timer is not its own).
A pause where the collector is already off (someone else's) does nothing. A CLI command that
has returned freezes what is left (`exiting`): the interpreter's last collection then has
nothing to look at.
"""

from __future__ import annotations

import gc
import os
import threading

MOST_S = 2.0  # the longest the collector stays paused where nothing says start-up is over

_lock = threading.Lock()
_timer: threading.Timer | None = None  # while a pause is in force: the timer that ends it


def in_lambda() -> bool:
    """Whether this process runs in AWS Lambda: the one place sluice asks."""
    return "AWS_LAMBDA_FUNCTION_NAME" in os.environ


def pause() -> bool:
    """The collector paused until `started` (or `MOST_S` seconds); False where it was off
    already (its owner turns it back on) or is paused already."""
    global _timer
    with _lock:
        if _timer is not None or not gc.isenabled():
            return False
        gc.disable()
        _timer = threading.Timer(MOST_S, started)
        _timer.daemon = True
        _timer.start()
        return True


def pause_in_lambda() -> bool:
    """`pause`, in a Lambda function's process only (a handler module imported elsewhere, by
    a test or a tool, leaves the collector as it is)."""
    return pause() if in_lambda() else False


def started() -> None:
    """Start-up is over: what it made is frozen out of the collector's passes, and the
    collector runs again. Nothing where no `pause` is in force."""
    global _timer
    with _lock:
        timer, _timer = _timer, None
        if timer is None:
            return
        gc.freeze()
        gc.enable()
    if timer is not threading.current_thread():
        timer.cancel()


SERVING_YOUNG = 10_000  # allocations between young collections once a worker serves (`settled`)


def settled() -> None:
    """A long-running process is ready to serve (a `sluice serve` worker, its container and
    routes built): what its start-up made is collected once, then frozen out of every later
    pass. A worker is a process of its own (spawned, not forked: the CLI's freeze is not its),
    and without this each full pass of the collector walked the ~120,000 objects its start-up
    left, 40-90 ms on two cores, a stop of the event loop that every request arriving meanwhile
    waited out. Then a full pass looks only at what came after.

    It then collects its youngest objects every `SERVING_YOUNG` allocations rather than
    Python's 700. A busy worker allocates that many in a few dozen requests, so each request's
    objects lived through several young passes; those of the requests in flight (more of them,
    and for longer, when adaptive batching holds them for company) were promoted to the oldest
    generation until its share rule called a full pass: 20-40 a minute in each worker under
    load, 3-9 ms each with the event loop stopped. At 10,000, in-flight objects mostly die
    young: no full pass in a minute of the same load, and 0.1-0.17 s of collection a minute in
    place of 0.45-1.0 s (Python 3.13 raised its own default to 2,000 for the same reason)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(SERVING_YOUNG, *gc.get_threshold()[1:])


def paused() -> bool:
    return _timer is not None


def exiting() -> None:
    """The process is about to exit, its work done (a CLI command has returned): everything
    frozen, so that the interpreter's last collection, which looks at every object left, looks
    at none (30-70 ms of a CLI command). What is left is freed with the process; only cycles
    unreachable by now lose their finalizers, as they may at any exit."""
    gc.freeze()


def _forked() -> None:
    global _timer, _lock
    _lock = threading.Lock()  # the parent's may have been held by another thread at the fork
    if _timer is not None:  # the parent's timer is not the child's: frozen and on, as `started` leaves it
        _timer = None
        gc.freeze()
        gc.enable()


os.register_at_fork(after_in_child=_forked)
