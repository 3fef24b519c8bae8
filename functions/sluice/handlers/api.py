"""The API Lambda: API Gateway (REST or HTTP API) -> Mangum's event translation -> the app.

Built at import (cold start) without touching AWS: clients, the registry and ONNX Runtime
are created on the first request that needs them.
"""

from __future__ import annotations

from sluice.startup import pause_in_lambda, started

pause_in_lambda()  # in Lambda, the collector off until this module has loaded (`sluice.startup`)

from typing import Any

from sluice.api.app import create_app
from sluice.handlers import snapstart
from sluice.handlers.asgi import LambdaASGI
from sluice.observability import get_logger, inject_lambda_context

app = create_app()
_asgi = LambdaASGI(app)
logger = get_logger()
# SnapStart: routes built and models loaded before the snapshot; after a restore, answer
# with the rebuilt container.
snapstart.install(
    prepare=app.prepare, on_restore=lambda container: setattr(app.state, "container", container)
)


@inject_lambda_context  # powertools' keys on every line, set once per invocation
def handler(event: dict[str, Any], context: Any) -> dict[str, Any]:
    return _asgi(event, context)  # on the thread's kept loop (`sluice.inference.loop`)


started()  # the function's start-up is over: the collector back on (`sluice.startup`)
