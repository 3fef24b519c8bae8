"""MLflow credentials on AWS, from Secrets Manager: the scheduled poll of followed MLflow
registries (`sluice.convert.mlflow_rest`) sends them to a tenant's tracking server.

One secret per tenant, named by `mlflow_credentials_secrets` (the function may read those
secrets alone): a JSON object with MLflow's own names, `MLFLOW_TRACKING_USERNAME` and
`MLFLOW_TRACKING_PASSWORD` (HTTP basic authentication) or `MLFLOW_TRACKING_TOKEN` (a bearer
token), as MLflow's client reads them from its environment. A secret is read when a poll first
needs it and kept `ttl_s` (so a rotated secret is used within minutes), and its values are never
logged nor put in a message: botocore's own debug log of the response body is filtered out.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from sluice.domain.errors import Unavailable, Unprocessable

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

USERNAME, PASSWORD, TOKEN = "MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"
TTL_S = 300.0


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a request to MLflow carries: basic authentication or a bearer token."""

    username: str | None = field(default=None, repr=False)
    password: str | None = field(default=None, repr=False)
    token: str | None = field(default=None, repr=False)

    def authorization(self) -> str:
        if self.token:
            return f"Bearer {self.token}"
        import base64

        pair = f"{self.username or ''}:{self.password or ''}".encode()
        return f"Basic {base64.b64encode(pair).decode()}"

    def scrub(self, text: str) -> str:
        """`text` with every credential (and its encoded header) replaced by ***."""
        for secret in (self.password, self.token, self.authorization().partition(" ")[2]):
            if secret:
                text = text.replace(secret, "***")
        return text


class _NoSecretValues(logging.Filter):
    """Drops botocore's debug lines that would show a GetSecretValue response's body."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "SecretString" not in record.getMessage() and "SecretBinary" not in record.getMessage()


_FILTER = _NoSecretValues()
for _name in ("botocore.parsers", "botocore.endpoint", "botocore.hooks"):
    logging.getLogger(_name).addFilter(_FILTER)


class SecretCredentials:
    """Each tenant's MLflow credentials, read from its secret and kept `ttl_s`."""

    def __init__(
        self, secrets: Mapping[str, str], client: Callable[[], Any], *, ttl_s: float = TTL_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        self.secrets = dict(secrets)
        self._client = client
        self.ttl_s = ttl_s
        self.clock = clock
        self._lock = threading.Lock()
        self._kept: dict[str, tuple[float, Credentials]] = {}

    def __call__(self, tenant: str) -> Credentials | None:
        secret = self.secrets.get(tenant)
        if secret is None:
            return None
        now = self.clock()
        with self._lock:
            kept = self._kept.get(secret)
            if kept is not None and now - kept[0] < self.ttl_s:
                return kept[1]
        credentials = self._read(secret)
        with self._lock:
            self._kept[secret] = (now, credentials)
        return credentials

    def _read(self, secret: str) -> Credentials:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            text = self._client().get_secret_value(SecretId=secret).get("SecretString")
        except ClientError as exc:  # the error's code only: its message is AWS's, and names no value
            code = exc.response.get("Error", {}).get("Code", "error")
            raise Unavailable(f"cannot read the MLflow credentials secret {secret}: {code}", field="credentials") from None
        except BotoCoreError as exc:
            raise Unavailable(f"cannot read the MLflow credentials secret {secret}: {type(exc).__name__}", field="credentials") from None
        return parse(secret, text)


def parse(secret: str, text: str | None) -> Credentials:
    """A secret's JSON object as credentials; anything else refused without quoting it."""
    expected = f"a JSON object with {USERNAME} and {PASSWORD}, or {TOKEN}"
    try:
        values = json.loads(text) if text else None
    except ValueError:
        values = None
    if not isinstance(values, dict) or not all(isinstance(v, str) for v in values.values()):
        raise Unprocessable(f"the MLflow credentials secret {secret} is not {expected}", field="credentials")
    if values.get(TOKEN):
        return Credentials(token=values[TOKEN])
    if values.get(USERNAME) and values.get(PASSWORD):
        return Credentials(username=values[USERNAME], password=values[PASSWORD])
    raise Unprocessable(f"the MLflow credentials secret {secret} is not {expected}", field="credentials")
