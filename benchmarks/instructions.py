"""Machine instructions per request, counted rather than timed: the same subjects as
`benchmarks.bench_lookups` (lookup -> transform -> model against the hand-written handler) and
`benchmarks.bench_precomputed` (a precomputed answer against the live ~10 MB MLP), each run
`K` times through the Lambda handler under valgrind's callgrind.

A count does not move with what else the machine is doing (a timed p50 on a shared two-core
machine moves by a third from one run to the next), so a change of a few per cent to the
request path shows here when the timed figures cannot tell it from noise. It is not a time:
an instruction of ONNX Runtime's vectorised kernels does more work than one of the
interpreter's, so a ratio of counts sits near, not at, the ratio of times (the timed goals
stay in those benchmarks).

Only the requests are counted: collection is switched on inside `functools.reduce`, which
drives the K calls and nothing else calls meanwhile; each subject's count is dumped apart.
Needs valgrind (Debian's package); without it the section says so and counts nothing.

    python -m benchmarks.instructions [--quick]
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

from benchmarks.common import figure, lambda_env, run_child, section

TOGGLE = "functools_reduce"
PAIRS = {  # case: (subject, reference, what)
    "lookup": ("graph", "hand", "lookup -> transform -> model, batch 1, against the hand-written handler (same SQLite read, one ORT call)"),
    "mlp_large": ("hit", "live", "a precomputed answer against the live ~10 MB MLP's own deployment, batch 1"),
}


# the child (run under callgrind) ------------------------------------------------------------
def _subjects(case: str, folder: Path) -> dict[str, tuple[Any, dict[str, Any]]]:
    from benchmarks.inprocess import rest_event
    from sluice.handlers import api

    if case == "lookup":
        from benchmarks.bench_lookups import one_row

        hand, graph, plain = one_row(folder)
        return {"graph": (api.handler, graph), "hand": (hand, plain)}
    from benchmarks import bench_precomputed as precomputed
    from benchmarks.prepare import MODELS

    precomputed._setup(case)
    row = MODELS[case].rows(1)

    def event(deployment: str, user: str | None) -> dict[str, Any]:
        body = {"deployment": deployment, "inputs": row, **({"routing_key": user} if user else {})}
        return rest_event("/api/v1/predictions", json.dumps(body).encode(), tenant=precomputed.TENANT)

    return {"hit": (api.handler, event(f"{case}-recs", "u1")), "live": (api.handler, event(case, None))}


def child(out: Path, case: str, folder: Path, k: int) -> None:
    import functools
    import gc

    from tests.support import LambdaContext

    context = LambdaContext()
    subjects = _subjects(case, folder)
    for handler, event in subjects.values():  # every path warm: sessions loaded, plans kept
        for _ in range(300):
            if handler(event, context)["statusCode"] != 200:
                raise RuntimeError(f"{case}: unexpected answer")
    gc.collect()
    for handler, event in subjects.values():
        functools.reduce(lambda acc, _, h=handler, e=event: h(e, context) and acc, range(k), 0)  # counted
    out.write_text(json.dumps(list(subjects)))


# the parent ---------------------------------------------------------------------------------
# What a container does once a while rather than once a request (read its deployment again,
# every `SLUICE_DEPLOYMENT_CACHE_TTL_S`, 1 s by default; a table's publication, every 5 s;
# merge its statistics into the registry, every 2 s; write its monitoring profiles and kept
# predictions, every 30 s) comes about as often per request under callgrind, some 50 times
# slower, as at full speed: each period is the default's times this (the publication's at most
# 60 s, the most it may be).
SLOWER = 50


def _counts(case: str, k: int) -> list[int]:
    with tempfile.TemporaryDirectory() as tmp:
        env = lambda_env(SLUICE_HOME=str(Path(tmp) / "home"), SLUICE_DEPLOYMENT_CACHE_TTL_S=str(1.0 * SLOWER),
                         SLUICE_PRECOMPUTED_PUBLICATION_TTL_S=str(min(5.0 * SLOWER, 60.0)),
                         SLUICE_STATS_FLUSH_S=str(2.0 * SLOWER), SLUICE_MONITOR_FLUSH_S=str(30.0 * SLOWER),
                         SLUICE_LOOKUP_SQLITE=str(Path(tmp) / "{tenant}.db"), PYTHONHASHSEED="0")  # fmt: skip
        counted = Path(tmp) / "cg.out"
        under = ("valgrind", "--tool=callgrind", "--collect-atstart=no", f"--toggle-collect={TOGGLE}", f"--dump-after={TOGGLE}", f"--callgrind-out-file={counted}")
        run_child("benchmarks.instructions", tmp, env, "--case", case, "--folder", tmp, "--k", str(k), timeout_s=1200, under=under)
        parts = sorted(Path(tmp).glob("cg.out.*"), key=lambda p: int(p.suffix[1:]))
        totals = [int(re.search(r"^summary: (\d+)", p.read_text(errors="replace"), re.M).group(1)) for p in parts]  # type: ignore[union-attr]
    return [t // k for t in totals[-2:]]  # the last two dumps: the subjects, in order


def run(quick: bool) -> dict[str, Any]:
    if shutil.which("valgrind") is None:
        return section("instructions", "Machine instructions per request", [], notes=["valgrind is not installed here: nothing counted."])
    k = 100 if quick else 200
    figures = []
    for case, (subject, reference, what) in PAIRS.items():
        ours, theirs = _counts(case, k)
        figures.append(figure(f"instructions.{case}", f"{what}: machine instructions per request", "instructions", subject, [float(ours)],
                              reference=reference, ref_values=[float(theirs)]))  # fmt: skip
    notes = [
        f"Counted by callgrind over {k} requests of each subject after 300 to warm every path, in one process per case "
        f"(PYTHONHASHSEED=0; the deployment and publication caches' periods, and the statistics' and monitoring's flushes', {SLOWER} times "
        "their defaults, as callgrind runs "
        "about that much slower); counts repeat within about 0.5%. Not times: see the lookups and precomputed sections for those.",
    ]
    return section("instructions", "Machine instructions per request (counted, not timed)", figures, notes=notes)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", type=Path)
    parser.add_argument("--case", default="lookup")
    parser.add_argument("--folder", type=Path)
    parser.add_argument("--k", type=int, default=200)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.case, args.folder, args.k)
        return
    print(json.dumps(run(args.quick), indent=2))


if __name__ == "__main__":
    main()
