"""Start-up without the cyclic garbage collector (`sluice.startup`): the CLI and the Lambda entry
modules pause it while they start and give it back, frozen, once they have; nothing a process
runs afterwards goes without it. Each case runs in a fresh interpreter: the collector is the
process's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sluice.startup import SERVING_YOUNG

REPO = Path(__file__).resolve().parents[2]

# Counts the collector's passes by generation from here on, and prints what it saw at exit.
COUNTING = """
import atexit, gc, json, sys
passes = [0, 0, 0]
gc.callbacks.append(lambda phase, info: phase == "stop" and passes.__setitem__(info["generation"], passes[info["generation"]] + 1))
def report():
    print("GC " + json.dumps({"passes": passes, "enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}), file=sys.stderr)
atexit.register(report)
"""


def _python(code: str, *, env: dict[str, str] | None = None, timeout: int = 120) -> dict:
    run_env = {k: v for k, v in os.environ.items() if k != "AWS_LAMBDA_FUNCTION_NAME"}  # in Lambda only where a case says so
    run_env.update(PYTHONPATH=os.pathsep.join([str(REPO / "functions"), str(REPO)]), **(env or {}))
    proc = subprocess.run([sys.executable, "-c", COUNTING + code], env=run_env, capture_output=True, text=True, timeout=timeout, check=False)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("GC ")]
    assert proc.returncode == 0 and lines, proc.stderr[-2000:]
    return json.loads(lines[-1][3:])  # type: ignore[no-any-return]


def test_a_cli_command_starts_without_collector_passes_and_leaves_everything_frozen(tmp_path: Path) -> None:
    code = "import runpy, sys\nsys.argv = ['sluice', 'keys', 'list']\nrunpy.run_module('sluice.cli', run_name='__main__')"
    seen = _python(code, env={"SLUICE_HOME": str(tmp_path / "home"), "SLUICE_LOG_LEVEL": "WARNING"})
    # The interpreter's own start-up makes a few passes before sluice pauses the collector; a
    # command otherwise makes well over a hundred (every import, pydantic's models, the parser).
    assert sum(seen["passes"]) <= 10, seen
    assert seen["frozen"] > 10_000  # what is left at exit: frozen, so the last collection looks at none


def test_the_same_command_without_the_pause_makes_many_passes(tmp_path: Path) -> None:
    """The figure above means something: the command's own imports, the collector on."""
    code = "from sluice.cli import main\nraise SystemExit(main(['keys', 'list']))"
    seen = _python(code, env={"SLUICE_HOME": str(tmp_path / "home"), "SLUICE_LOG_LEVEL": "WARNING"})
    assert sum(seen["passes"]) > 50, seen
    assert seen["enabled"] and seen["frozen"] == 0


@pytest.mark.parametrize("module", ["api", "batch", "stream", "authorizer", "websocket", "shadow", "monitor", "rollouts", "registry_events"])
def test_a_lambda_entry_module_starts_paused_and_gives_the_collector_back_frozen(tmp_path: Path, module: str) -> None:
    # The pause's own bound (MOST_S, 2 s) lifted: on a busy machine an import may take longer,
    # and the collector back by the timer mid-import is not what this test looks at.
    code = f"import gc\nfrom sluice import startup\nstartup.MOST_S = 120.0\nimport sluice.handlers.{module}\nassert gc.isenabled()"
    env = {"AWS_LAMBDA_FUNCTION_NAME": f"sluice-{module}", "SLUICE_MODE": "local", "SLUICE_HOME": str(tmp_path / "home")}
    seen = _python(code, env=env)
    assert sum(seen["passes"]) <= 10, seen
    assert seen["enabled"] and seen["frozen"] > 10_000


def test_a_lambda_entry_module_imported_elsewhere_leaves_the_collector_alone(tmp_path: Path) -> None:
    seen = _python("import sluice.handlers.batch", env={"SLUICE_HOME": str(tmp_path / "home")})
    assert sum(seen["passes"]) > 50 and seen["frozen"] == 0 and seen["enabled"], seen


def test_a_pause_nobody_ends_ends_by_itself() -> None:
    code = (
        "import gc, time\nfrom sluice import startup\nstartup.MOST_S = 0.2\n"
        "assert startup.pause() and not gc.isenabled() and startup.paused()\n"
        "time.sleep(1.0)\nassert gc.isenabled() and not startup.paused() and gc.get_freeze_count() > 0"
    )
    _python(code)


def test_started_ends_the_pause_once_and_a_second_pause_is_nobodys() -> None:
    code = (
        "import gc, threading\nfrom sluice import startup\n"
        "assert startup.pause()\nassert not startup.pause()  # paused already: not a second owner\n"
        "startup.started()\nassert gc.isenabled()\nfrozen = gc.get_freeze_count()\n"
        "startup.started()  # nothing in force: nothing done\nassert gc.get_freeze_count() == frozen\n"
        "timers = [t for t in threading.enumerate() if isinstance(t, threading.Timer)]\n"
        "[t.join(1.0) for t in timers]\nassert not any(t.is_alive() for t in timers)  # its timer cancelled, not left to fire"
    )
    _python(code)


def test_a_collector_someone_else_turned_off_stays_off() -> None:
    code = "import gc\nfrom sluice import startup\ngc.disable()\nassert not startup.pause()\nstartup.started()\nassert not gc.isenabled()\ngc.enable()"
    _python(code)


def test_a_child_forked_while_paused_has_the_collector() -> None:
    code = (
        "import gc, os\nfrom sluice import startup\nassert startup.pause()\n"
        "pid = os.fork()\n"
        "if pid == 0:\n    os._exit(0 if gc.isenabled() and not startup.paused() else 3)\n"
        "_, status = os.waitpid(pid, 0)\nassert os.waitstatus_to_exitcode(status) == 0\n"
        "assert not gc.isenabled()  # the parent's pause is its own\nstartup.started()"
    )
    _python(code)


def test_a_serve_worker_ready_to_serve_has_its_start_up_frozen(tmp_path: Path) -> None:
    """A `sluice serve` worker is a process of its own (spawned): once its container and routes
    are built, what they made is frozen, so a full pass of the collector while it serves looks
    only at what came after, not at the ~100,000 objects of its start-up (40-90 ms of the event
    loop's time each)."""
    code = (
        "import gc, json, sys\n"
        "from sluice.cli.serve import _ready, served_app\n"
        "app = served_app().app\n"
        "_ready(app)\n"
        "print('LEFT ' + json.dumps({'frozen': gc.get_freeze_count(), 'tracked': len(gc.get_objects()), 'young': gc.get_threshold()[0]}), file=sys.stderr)\n"
    )
    run_env = {k: v for k, v in os.environ.items() if k != "AWS_LAMBDA_FUNCTION_NAME"}
    run_env.update(PYTHONPATH=os.pathsep.join([str(REPO / "functions"), str(REPO)]), SLUICE_HOME=str(tmp_path / "home"), SLUICE_LOG_LEVEL="WARNING")
    proc = subprocess.run([sys.executable, "-c", code], env=run_env, capture_output=True, text=True, timeout=120, check=False)
    lines = [line for line in proc.stderr.splitlines() if line.startswith("LEFT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-2000:]
    left = json.loads(lines[-1][5:])
    assert left["frozen"] > 30_000, left  # the worker's modules, container and routes
    assert left["tracked"] < left["frozen"] // 10, left  # what a full pass still walks
    assert left["young"] == SERVING_YOUNG  # requests in flight die young, not in the oldest generation
