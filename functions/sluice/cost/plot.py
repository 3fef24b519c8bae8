"""Cost-versus-traffic curves as a PNG: the CLI's only use of matplotlib (the `cost` extra),
imported here and only when a plot is asked for; never in a Lambda layer."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from sluice.domain.errors import BadRequest

if TYPE_CHECKING:
    from pathlib import Path

LABELS = {
    "onnx": "ONNX Runtime in Lambda",
    "lambda-managed": "Lambda Managed Instances",
    "sagemaker": "SageMaker real-time",
    "sagemaker-serverless": "SageMaker serverless",
    "sagemaker-async": "SageMaker async, scale to zero",
    "batch": "batch (Step Functions)",
}


def draw(path: Path, rates: list[float], curves: dict[str, list[float]], report: dict[str, Any]) -> Path:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise BadRequest("drawing needs matplotlib: pip install 'sluice[cost]'", field="plot") from None
    figure, axes = plt.subplots(figsize=(8, 5), dpi=120)
    for runtime, values in curves.items():
        points = [(r, v) for r, v in zip(rates, values, strict=True) if math.isfinite(v)]
        if points:
            axes.plot(*zip(*points, strict=True), label=LABELS.get(runtime, runtime), linestyle="--" if runtime == "batch" else "-")
    axes.axvline(report["workload"]["rps"], color="grey", linewidth=0.8)
    axes.set_xscale("log")
    axes.set_yscale("log")
    axes.set_xlabel("traffic, predictions per second")
    axes.set_ylabel("USD per million predictions")
    prices = report["prices"]
    axes.set_title(
        f"{report['deployment']}: cost by runtime ({prices['region']} prices as of {prices['as_of']}"
        f"{'' if prices.get('verified') else ', unverified'})",
        fontsize=10,
    )
    axes.grid(True, which="both", linewidth=0.3)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path)
    plt.close(figure)
    return path
