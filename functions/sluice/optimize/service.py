"""`sluice optimize`: build the candidates of one ONNX version, measure them against it, say
which to take, tune the session options, and (asked) register the chosen ones as versions
derived from it and mirror the best from a deployment."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sluice.domain.errors import (
    BadRequest,
    InvalidRequest,
    NotFound,
    PayloadTooLarge,
    Unavailable,
    Unprocessable,
)
from sluice.domain.policy import single_policy
from sluice.domain.signature import DYNAMIC
from sluice.optimize.candidates import KINDS, build_candidates
from sluice.optimize.measure import (
    Timing,
    agreement,
    latencies,
    outputs_of,
    peak_memory_mb,
    session_for,
)
from sluice.optimize.report import Budget, judge, triton_advice

if TYPE_CHECKING:
    import numpy as np

    from sluice.domain import ModelVersion, Principal
    from sluice.services.deployments import DeploymentService
    from sluice.services.models import ModelService
    from sluice.settings import OnnxSettings
    from sluice.storage import ArtifactStore

MAX_DATA_BYTES = 256 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class OptimizeRequest:
    model: str
    version: int | str
    budget: Budget = field(default_factory=Budget)
    kinds: tuple[str, ...] = KINDS
    calibration_rows: int = 200
    evaluation_rows: int = 1000
    timing: Timing = field(default_factory=Timing)
    tune: bool = True
    register: tuple[str, ...] = ()  # candidate names, or ("recommended",)
    shadow: str | None = None  # a deployment to mirror the best registered candidate from


def require_onnx() -> None:
    """The quantizer and the FP16 converter need the onnx package, which the Lambda layers
    leave out: say so rather than fail half-way."""
    import importlib.util

    if importlib.util.find_spec("onnx") is None:
        raise Unavailable(
            "this sluice has no optimizer (the 'onnx' package): run `sluice optimize` where "
            "`pip install 'sluice[optimize]'` is installed",
            field="optimize",
        )


class OptimizeService:
    def __init__(
        self, models: ModelService, deployments: DeploymentService, store: ArtifactStore, settings: OnnxSettings
    ) -> None:
        self.models = models
        self.deployments = deployments
        self.store = store
        self.settings = settings

    def rows_from_uri(self, principal: Principal, uri: str, version: ModelVersion, limit: int) -> dict[str, np.ndarray]:
        """Rows from a file the tenant may import (as push by URI), read by the batch readers."""
        from sluice.batch.sample import read_rows
        from sluice.batch.uris import format_of

        principal.require("admin")
        location = self.models.import_location(principal, uri, field="data_uri")
        name = location.uri.rstrip("/").rsplit("/", 1)[-1]
        if location.is_prefix:
            raise BadRequest(f"data_uri names a folder ({name!r}): name a file of rows (.parquet, .csv or .jsonl)", field="data_uri")
        try:
            suffix = {"parquet": ".parquet", "csv": ".csv", "jsonl": ".jsonl"}[format_of(location.uri)]
        except BadRequest:  # batch's words name its own fields (input_uri, format), which this route has not
            raise BadRequest(f"data_uri: cannot read {name!r} as rows: name a .parquet, .csv or .jsonl file, uncompressed (Parquet compresses inside)", field="data_uri") from None
        try:
            data = self.models.read_import(principal, location, field="data_uri", max_bytes=MAX_DATA_BYTES)
        except PayloadTooLarge:
            raise BadRequest("data files above 256 MiB are not read; give a sample of rows", field="data_uri") from None
        with tempfile.NamedTemporaryFile(suffix=suffix) as tmp:
            tmp.write(data)
            tmp.flush()
            return read_rows(tmp.name, version.signature, limit=limit, field="data_uri")

    def version(self, principal: Principal, model: str, version: int | str) -> ModelVersion:
        require_onnx()
        found = self.models.get_version(principal, model, version)
        if found.runtime != "onnx":
            raise Unprocessable(
                f"{found.ref} runs on '{found.runtime}'; only onnx versions are optimized here", field="version"
            )
        return found

    def check(self, principal: Principal, request: OptimizeRequest) -> ModelVersion:
        """What `run` would refuse after building, measuring or writing anything, refused first
        (the API before it starts the job, the CLI before it reads the model): the candidates,
        the names to register, the deployment to mirror into and whether it takes the model's
        inputs, the model's batch dimension. The source version."""
        principal.require("admin")
        unknown = sorted(set(request.kinds) - set(KINDS))
        if unknown:
            raise BadRequest(f"unknown candidates {unknown}; choose from {list(KINDS)}", field="candidates")
        wrong = sorted(set(request.register) - {"recommended", *KINDS} | ({"original"} & set(request.register)))
        if wrong:
            raise InvalidRequest(f"register takes 'recommended' or candidate names, not {wrong}", field="register")
        unasked = sorted(set(request.register) - {"recommended", *request.kinds})
        if unasked:
            raise InvalidRequest(f"register names {unasked}, which are not among the candidates asked ({', '.join(request.kinds)})", field="register")
        if request.shadow and not request.register:
            raise BadRequest("shadow mirrors a registered candidate: give register too (--register)", field="shadow")
        source = self.version(principal, request.model, request.version)
        fixed = next((spec for spec in source.signature.inputs if spec.shape and spec.shape[0] != DYNAMIC), None)
        if fixed is not None:  # ONNX Runtime refused the batches of rows mid-run: a traceback, or a job failed "(InvalidArgument)"
            raise Unprocessable(
                f"input {fixed.name!r} has a fixed batch of {fixed.shape[0]}: optimize measures batches of rows; "
                "export the model with a dynamic batch dimension",
                field="model",
            )
        if request.shadow:  # a candidate takes the source's inputs: mirrored as the source would be
            self.deployments.check_mirror(principal, request.shadow, "optimized", single_policy(source.model, source.version))
        return source

    def run(self, principal: Principal, request: OptimizeRequest, rows: dict[str, np.ndarray]) -> dict[str, Any]:
        source = self.check(principal, request)  # refused before any candidate is built and measured
        original = self.store.get(source.artifact_uri, sha256=source.sha256)
        n = len(next(iter(rows.values())))
        calibration = {k: v[: request.calibration_rows] for k, v in rows.items()}
        # Evaluate on rows the calibration did not see when there are enough of them.
        held_out = n - request.calibration_rows >= 64
        start = request.calibration_rows if held_out else 0
        evaluation = {k: v[start : start + request.evaluation_rows] for k, v in rows.items()}
        kinds = tuple(dict.fromkeys(("original", *request.kinds)))
        candidates = build_candidates(original, calibration=calibration, kinds=kinds)
        options = {"intra_op_threads": self.settings.ort_intra_op_threads, "inter_op_threads": self.settings.ort_inter_op_threads}
        reference = outputs_of(session_for(original, **options), evaluation)
        table: list[dict[str, Any]] = []
        built: dict[str, bytes] = {}
        for candidate in candidates:
            row: dict[str, Any] = {"candidate": candidate.name, "how": candidate.how}
            if candidate.data is None:
                table.append(row | {"skipped": candidate.skipped})
                continue
            try:
                session = session_for(candidate.data, **options)
            except Exception as exc:  # a candidate ORT cannot load is reported, not fatal
                table.append(row | {"skipped": f"ONNX Runtime cannot load it ({type(exc).__name__})"})
                continue
            built[candidate.name] = candidate.data
            row["size_bytes"] = len(candidate.data)
            row.update(latencies(session, evaluation, request.timing))
            row["peak_mem_mb"] = peak_memory_mb(candidate.data, evaluation, **options)
            row.update(agreement(source.signature, reference, outputs_of(session, evaluation)))
            table.append(row)
        verdict = judge(table, request.budget)
        report: dict[str, Any] = {
            "model": source.model,
            "version": source.version,
            "rows": {"calibration": len(next(iter(calibration.values()))),
                     "evaluation": len(next(iter(evaluation.values()))), "held_out": held_out},
            "session_options": options,
            "budget": {"min_agreement": request.budget.min_agreement, "max_abs_diff": request.budget.max_abs_diff},
            "candidates": table,
            "recommendation": verdict,
            "triton": triton_advice(table, request.budget, source.ref),
        }  # fmt: skip
        if request.tune:
            report["tuning"] = self._tune(principal, source, original, evaluation, request.timing)
        if request.register:
            report["registered"] = self._register(principal, source, request, table, built, verdict, evaluation)
            if request.shadow:
                report["shadow"] = self._shadow(principal, request.shadow, report["registered"], verdict)
        return report

    def _tune(self, principal: Principal, source: ModelVersion, data: bytes, rows: dict[str, np.ndarray], timing: Timing) -> list[dict[str, Any]]:
        import dataclasses

        from sluice.optimize.tuning import sweep

        tuned = sweep(data, rows, timing=timing)
        self.models.record_session_options(principal, source, tuned)
        return [dataclasses.asdict(t) for t in tuned]

    def _register(
        self, principal: Principal, source: ModelVersion, request: OptimizeRequest, table: list[dict[str, Any]],
        built: dict[str, bytes], verdict: dict[str, Any], rows: dict[str, np.ndarray],
    ) -> list[dict[str, Any]]:  # fmt: skip
        from sluice.optimize.tuning import sweep

        names = [verdict["candidate"] if n == "recommended" else n for n in request.register]
        names = [n for n in dict.fromkeys(names) if n != "original"]
        missing = [n for n in names if n not in built]
        if missing:
            raise Unprocessable(f"no candidate {missing} was built; built: {sorted(set(built) - {'original'})}", field="register")
        if self.models.get_version(principal, source.model, source.version).sha256 != source.sha256:
            raise NotFound(f"model '{source.model}' was deleted and made again while {source.ref} was optimized: nothing registered", field="model")
        first = source.signature.inputs[0] if len(source.signature.inputs) == 1 else None
        features = list(first.feature_names) if first is not None and first.feature_names else None
        registered = []
        for name in names:
            row = next(r for r in table if r["candidate"] == name)
            measured = {k: v for k, v in row.items() if k not in ("how", "candidate")}
            version = self.models.push(
                principal, source.model, built[name], feature_names=features,
                derived_from=source.ref,
                optimization={"candidate": name, **row["how"], "measured": measured,
                              "budget": {"min_agreement": request.budget.min_agreement, "max_abs_diff": request.budget.max_abs_diff}},
                session_options=sweep(built[name], rows, timing=request.timing) if request.tune else (),
            )  # fmt: skip
            registered.append({"candidate": name, "model": version.model, "version": version.version,
                               "within_budget": row.get("within_budget"), "p50_ms_b64": row.get("p50_ms_b64")})  # fmt: skip
        return registered

    def _shadow(self, principal: Principal, deployment: str, registered: list[dict[str, Any]], verdict: dict[str, Any]) -> dict[str, Any]:
        if not registered:  # the recommendation is the original (no candidate kept the budget): said, the report kept
            return {"deployment": deployment, "mirror": None, "why": f"no candidate was registered to mirror (recommended: {verdict['candidate']})"}
        within = [r for r in registered if r["within_budget"]]
        best = next((r for r in registered if r["candidate"] == verdict["candidate"]), None) or min(
            within or registered, key=lambda r: r["p50_ms_b64"]
        )
        mirror = f"optimized-{best['candidate']}"
        updated = self.deployments.add_mirror(principal, deployment, mirror, single_policy(best["model"], best["version"]))
        return {"deployment": updated.name, "revision": updated.revision, "mirror": mirror, "version": best["version"]}


def save_report(report: dict[str, Any], path: str | Path) -> None:
    import json

    Path(path).write_text(json.dumps(report, indent=2, default=str))
