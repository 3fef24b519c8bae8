"""What a function step's module defines, read from its source without running it
(`sluice.runtimes.functions.defined_at_top`): where it gives names at all, every name the module
has once run is among them, so a policy naming a function the module defines is never refused
when saved. Checked against modules really run: the project's own, and small ones written here."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import types
from pathlib import Path

import pytest

import sluice.codecs
import sluice.domain
from sluice.runtimes.functions import defined_at_top

SMALL = {
    "blocks": "import numpy as np\nfrom json import dumps as d\nif np:\n    def a(i): return i\nelse:\n    a = None\ntry:\n    import os.path\nexcept ImportError as gone:\n    pass\nfinally:\n    f = 1\nfor k in range(2):\n    pass\nwith open(__file__) as handle:\n    pass\nwhile False:\n    w = 1\n",
    "bindings": "x, (y, *z) = 1, (2, 3)\n[v := 5]\nclass C:\n    def m(self): pass\ndef deco(f): return f\n@deco\ndef g(i): return i\nh = lambda i: i\nlst = [q for q in range(3)]\nmatch 1:\n    case {'a': 1, **rest}: pass\n    case [first, *others]: pass\n    case other: pass\n",
    "annotated": "n: int = 3\nm: int\nasync def co(i): return i\n",
    "starred": "from math import *\n",
    "dynamic": "globals()['made'] = print\n",
    "own-dunder": "def __embed__(inputs):\n    return inputs\n",
    "locals": "def _e(inputs):\n    return inputs\nlocals()['embed'] = _e\n",
    "itself": "import importlib\nimportlib.import_module(__name__).score = print\n",
    "modules": "from sys import modules\nmodules[__name__].score = print\n",
    "framed": "import sys\ndef _e(inputs):\n    return inputs\nsys._getframe(0).f_globals['embed'] = _e\n",
    "through-a-function": "def _e(inputs):\n    return inputs\n_e.__globals__['embed'] = _e\n",
    "inspected": "import inspect\ndef _e(inputs):\n    return inputs\ninspect.getmodule(_e).embed = _e\n",
    "logged": "import logging\nlog = logging.getLogger(__name__)\ndef embed(inputs):\n    return inputs\nif __name__ == '__main__':\n    pass\n",
    "lazy": "def __getattr__(name):\n    return print\n",
    "declared": "def make():\n    global later\n    later = print\nmake()\n",
}


# What the import system (and `exec`) sets on every module: no step's callable, nor in its source.
PYTHONS_OWN = frozenset({"__name__", "__doc__", "__package__", "__loader__", "__spec__", "__file__", "__cached__", "__builtins__", "__annotations__"})


def _names(module: types.ModuleType) -> set[str]:
    return set(vars(module)) - PYTHONS_OWN


@pytest.mark.parametrize("name", sorted(SMALL))
def test_every_name_a_small_module_has_once_run_is_read_from_its_source(name: str, tmp_path: Path) -> None:
    source = SMALL[name]
    path = tmp_path / f"{name}.py"
    path.write_text(source)
    module = types.ModuleType(f"defined_at_top_{name.replace('-', '_')}")
    module.__file__ = str(path)
    sys.modules[module.__name__] = module  # as a loaded module is: reachable by its __name__
    try:
        exec(compile(source, str(path), "exec"), vars(module))  # the test's own source
    finally:
        del sys.modules[module.__name__]
    found = defined_at_top(source.encode())
    if name in ("starred", "dynamic", "lazy", "declared", "locals", "itself", "modules", "framed", "through-a-function", "inspected"):
        assert found is None, found  # names that come from elsewhere: none claimed
    else:
        assert found is not None and _names(module) <= found, _names(module) - (found or set())


@pytest.mark.parametrize("package", [sluice.codecs, sluice.domain])
def test_every_name_the_projects_own_modules_hold_is_read_from_their_source(package: types.ModuleType) -> None:
    checked = 0
    for info in pkgutil.iter_modules(package.__path__, f"{package.__name__}."):
        module = importlib.import_module(info.name)
        found = defined_at_top(Path(module.__file__ or "").read_bytes())
        if found is None:
            continue
        # names another module set on this one after it ran (a submodule's, once imported) are not its own
        own = {n for n in _names(module) if not isinstance(getattr(module, n), types.ModuleType) or n in found}
        assert own <= found, (info.name, own - found)
        checked += 1
    assert checked >= 10


def test_a_module_that_only_reads_its_own_name_is_still_checked() -> None:
    """`logging.getLogger(__name__)` and `if __name__ == "__main__"` bind nothing: a typo in a step
    naming such a module is still found when the policy is saved."""
    found = defined_at_top(SMALL["logged"].encode())
    assert found is not None and "embed" in found and "embedd" not in found
