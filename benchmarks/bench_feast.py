"""A lookup step reading Feast (`store: feast`, Feast's SDK on its SQLite online store) against
the same step reading a plain SQLite table holding the same 10,000 customers (docs/features.md,
"Feast"): the step alone (`LookupSteps.call`, no graph, no model), p50 at batch 1 and 64, A/B
rotated repeats in one child process. No goal: the figure says what Feast's SDK costs a request
over the store it reads. Also reported: importing Feast and its first call, which the first Feast
lookup of a process pays.

    python -m benchmarks.bench_feast [--quick]
"""

from __future__ import annotations

import argparse
import json
import subprocess
import tempfile
import time
from datetime import UTC, datetime, timedelta
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from benchmarks.bench_lookups import CUSTOMERS, LOOKUP, TENANT, _features
from benchmarks.common import PYTHON, REPO, bench_env, figure, percentile, rotate, section

BATCHES = (1, 64)


def _feast_repo(repo: Path, table: dict[str, tuple[float, int]]) -> None:
    import pandas as pd
    from feast import Entity, FeatureStore, FeatureView, Field, FileSource, ValueType
    from feast.types import Float32, Int64

    (repo / "data").mkdir(parents=True)
    (repo / "feature_store.yaml").write_text(
        "project: bench\nregistry: data/registry.db\nprovider: local\nonline_store:\n  type: sqlite\n  path: data/online.db\n"
        "offline_store:\n  type: file\nentity_key_serialization_version: 3\n"
    )
    rows = pd.DataFrame(
        {
            "customer_id": list(table),
            "avg_amount": [a for a, _ in table.values()],
            "chargebacks": [n for _, n in table.values()],
            "event_timestamp": [datetime.now(UTC)] * len(table),
        }
    )
    rows.to_parquet(repo / "data" / "customers.parquet")
    customer = Entity(name="customer", join_keys=["customer_id"], value_type=ValueType.STRING)
    view = FeatureView(
        name="customer_features", entities=[customer], ttl=timedelta(days=1),
        schema=[Field(name="avg_amount", dtype=Float32), Field(name="chargebacks", dtype=Int64)],
        source=FileSource(path=str(repo / "data" / "customers.parquet"), timestamp_field="event_timestamp"),
    )  # fmt: skip
    store = FeatureStore(repo_path=str(repo))
    store.apply([customer, view])
    store.write_to_online_store("customer_features", rows)


def child(out: Path, folder: Path, repeats: int, n: int) -> None:
    import numpy as np

    from sluice.domain.lookups import Lookup
    from sluice.inference.loop import run
    from sluice.runtimes.lookups import LookupSteps
    from sluice.settings import LookupSettings

    started = time.perf_counter()
    import feast  # noqa: F401  (what the first Feast lookup of a process pays)

    imported = time.perf_counter() - started
    table = _features(folder / f"{TENANT}.db")
    _feast_repo(folder / "repo", table)
    settings = LookupSettings(lookup_sqlite=str(folder / "{tenant}.db"), lookup_feast_repo=str(folder / "repo"), lookup_sources={TENANT: ["feast:customer_features"]})
    steps = LookupSteps(settings, mode="local")
    spec = {k: v for k, v in LOOKUP.items() if k not in ("kind", "inputs")}
    nodes = {"feast": Lookup.model_validate({**spec, "store": "feast"}), "sqlite": Lookup.model_validate(spec)}
    rng = np.random.default_rng(0)
    started = time.perf_counter()
    run(steps.call(nodes["feast"], TENANT, {"customer": np.array(["c1"], dtype=object)}, timeout_s=60))
    first = time.perf_counter() - started
    results: dict[str, Any] = {"import_s": imported, "first_call_s": first}
    for batch in BATCHES:
        arrays = {"customer": np.array([f"c{i}" for i in rng.integers(0, CUSTOMERS * 1.1, batch)], dtype=object)}
        got = {name: run(steps.call(node, TENANT, arrays, timeout_s=60))[0] for name, node in nodes.items()}
        if not all(np.allclose(got["feast"][f], got["sqlite"][f]) for f in ("avg_amount", "chargebacks")):
            raise RuntimeError("Feast and the SQLite table disagree")

        def timed(node: Lookup, count: int, arrays: dict[str, Any] = arrays) -> list[float]:
            samples = []
            for _ in range(count):
                t = time.perf_counter()
                run(steps.call(node, TENANT, arrays, timeout_s=60))
                samples.append((time.perf_counter() - t) * 1e6)
            return samples

        for node in nodes.values():
            timed(node, 20)
        runs: dict[str, list[float]] = {name: [] for name in nodes}
        for r in range(repeats):
            for name in rotate(list(nodes), r):
                runs[name].append(percentile(timed(nodes[name], n), 50))
        results[str(batch)] = runs
    out.write_text(json.dumps(results))


def run(quick: bool) -> dict[str, Any]:
    if find_spec("feast") is None:
        return section("feast", "Lookup steps through Feast", [], error="Feast's SDK is not installed (pip install 'sluice[feast]')")
    repeats, n = (2, 100) if quick else (3, 300)
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "feast.json"
        proc = subprocess.run(
            [PYTHON, "-m", "benchmarks.bench_feast", "--child", str(out), "--folder", tmp, "--repeats", str(repeats), "--n", str(n)],
            cwd=REPO, env=bench_env(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, timeout=900, check=False,
        )  # fmt: skip
        if proc.returncode != 0:
            raise RuntimeError(f"feast benchmark failed: {proc.stderr[-2000:]}")
        results = json.loads(out.read_text())
    figures = [
        figure(
            f"feast.lookup.b{batch}", f"lookup step alone, batch {batch}: p50", "µs", "Feast's SDK on its SQLite online store",
            results[str(batch)]["feast"], reference="a plain SQLite table, the same customers", ref_values=results[str(batch)]["sqlite"],
        )
        for batch in BATCHES
    ]
    notes = [
        f"In process, concurrency 1, {CUSTOMERS:,} customers (10% of the keys asked are not there); p50 of each run, median over runs.",
        f"Importing Feast took {results['import_s']:.1f} s and the first Feast lookup (the repository's registry read) "
        f"{results['first_call_s']:.2f} s: what the first Feast lookup of a process pays.",
    ]
    return section("feast", "Lookup steps through Feast", figures, notes=notes)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--child", type=Path)
    parser.add_argument("--folder", type=Path)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.folder, args.repeats, args.n)
        return
    print(json.dumps(run(args.quick), indent=2))


if __name__ == "__main__":
    main()
