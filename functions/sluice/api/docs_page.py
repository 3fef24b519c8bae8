"""`/docs`: Swagger UI over the API's OpenAPI document, on the console's origin, so held to
what may run there: the console keeps its signed-in key in the tab's session storage, which
any script of this origin can read. FastAPI's own page loads `swagger-ui-dist@5` (whatever
version the CDN serves that day) and ReDoc's page Google's fonts; this one loads one pinned
release whose bytes are checked (Subresource Integrity), runs no other script (a CSP with its
one inline script's hash), and may not be framed. ReDoc's page is not served."""

from __future__ import annotations

import base64
import hashlib

from starlette.responses import HTMLResponse

SWAGGER = "https://cdn.jsdelivr.net/npm/swagger-ui-dist@5.35.0"
# sha384 of the release's files (`npm pack swagger-ui-dist@5.35.0`): a browser refuses other bytes.
SCRIPT_SRI = "sha384-gjRm0bEPMeTmMh5jT2cHccIwCUZSTd8YC+j0d0sXw0MdGEfScduGpSyF3ZSSLkX9"
STYLE_SRI = "sha384-WlYgdmXYOOBWL5apwjDEZwN+U3HmXSSu5R6V5aGxEcf7z+KuRNwBhoxKVN1i3D5I"
INIT = (
    'SwaggerUIBundle({url: "/openapi.json", dom_id: "#swagger-ui", deepLinking: true, '
    "presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset], "
    'layout: "BaseLayout"});'
)
PAGE = f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>sluice API</title>
<link rel="stylesheet" href="{SWAGGER}/swagger-ui.css" integrity="{STYLE_SRI}" crossorigin="anonymous">
</head><body><div id="swagger-ui"></div>
<script src="{SWAGGER}/swagger-ui-bundle.js" integrity="{SCRIPT_SRI}" crossorigin="anonymous"></script>
<script>{INIT}</script>
</body></html>
"""
_INIT_HASH = base64.b64encode(hashlib.sha256(INIT.encode()).digest()).decode()
HEADERS = {
    # Swagger UI sets style attributes as it renders: inline styles, never inline script.
    "content-security-policy": (
        f"default-src 'none'; script-src {SWAGGER}/swagger-ui-bundle.js 'sha256-{_INIT_HASH}'; "
        f"style-src {SWAGGER}/swagger-ui.css 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "x-frame-options": "DENY",
    "referrer-policy": "no-referrer",
    "x-content-type-options": "nosniff",
}


async def docs() -> HTMLResponse:
    return HTMLResponse(PAGE, headers=HEADERS)
