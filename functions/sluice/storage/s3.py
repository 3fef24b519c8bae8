"""The AWS artifact store: one S3 bucket, under an optional prefix.

Keys are `<prefix>/tenants/<tenant>/sha256/<digest><suffix>`, so the same bytes are stored
once per tenant and every read is checked against the digest it was stored under.

Uploads are one PutObject rather than the managed (multipart) transfer: the bytes are already
in memory, artifacts are capped at 2 GiB (below the 5 GiB single-PUT limit), and a single PUT
lets S3 check the whole object against the SHA-256 we computed, with no half-finished
multipart uploads to clean up after a timed-out Lambda.

Reading a missing key answers 403, not 404, to a role without `s3:ListBucket` on the bucket,
so the role that uses this store needs that permission for NotFound to mean what it says.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from sluice.clients import client_from, lazy_client
from sluice.domain.errors import (
    BackendError,
    BadRequest,
    Forbidden,
    NotFound,
    PayloadTooLarge,
    SluiceError,
    Unavailable,
)
from sluice.storage.base import ArtifactRef, artifact_key, sha256_hex, verify

if TYPE_CHECKING:
    from typing import Unpack

    from mypy_boto3_s3 import S3Client

    from sluice.clients import AwsArgs, AwsSource

_MISSING = frozenset({"NoSuchKey", "NoSuchBucket", "NotFound", "404"})
_DENIED = frozenset({"AccessDenied", "AllAccessDisabled", "403"})
_THROTTLED = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestTimeout",
        "RequestLimitExceeded",
        "ServiceUnavailable",
        "InternalError",
        "503",
    }
)


def parse_s3_url(url: str) -> tuple[str, str]:
    """`s3://bucket/some/key` -> (`bucket`, `some/key`)."""
    parsed = urlparse(url)
    if parsed.scheme != "s3" or not parsed.netloc:
        raise ValueError(f"not an s3 URL: {url!r}")
    return parsed.netloc, parsed.path.lstrip("/")


class S3Store:
    def __init__(
        self, bucket: str, prefix: str = "", *, server_side_encryption: str = "aws:kms", kms_key_id: str | None = None, **aws: Unpack[AwsArgs]
    ) -> None:
        self.bucket = bucket
        self._clients = aws.get("clients")
        self.prefix = prefix.strip("/")
        self.region = aws.get("region")
        self.server_side_encryption = server_side_encryption
        self.kms_key_id = kms_key_id
        self._root = f"{self.prefix}/" if self.prefix else ""
        self._s3 = lazy_client("s3", aws, region=self.region)
        self._presigner: Any = None

    @classmethod
    def from_url(cls, url: str, **aws: Unpack[AwsSource]) -> S3Store:
        bucket, prefix = parse_s3_url(url)
        return cls(bucket, prefix, **aws)

    @property
    def client(self) -> S3Client:
        return self._s3()  # type: ignore[no-any-return]

    @property
    def presigner(self) -> Any:
        """A client on the store's credentials for presigned GETs and POSTs (see
        `AwsClients.client`'s `presigning`)."""
        if self._presigner is None:
            region = self.region or self.client.meta.region_name
            self._presigner = client_from(self._clients, region, "s3", region=region, presigning=True)
        return self._presigner

    def _uri(self, key: str) -> str:
        return f"s3://{self.bucket}/{key}"

    def _key(self, uri: str) -> str:
        """The key of a URI in this store; Forbidden for anything outside it."""
        try:
            bucket, key = parse_s3_url(uri)
        except ValueError:
            raise Forbidden("artifact is outside this store", field="artifact_uri") from None
        if bucket != self.bucket or not key.startswith(self._root) or _dotted(key):
            raise Forbidden("artifact is outside this store", field="artifact_uri")
        return key

    def _tenant_root(self, tenant: str) -> str:
        return f"{self._root}tenants/{tenant}/"

    def put(self, tenant: str, data: bytes, *, suffix: str = "") -> ArtifactRef:
        digest = sha256_hex(data)
        key = self._root + artifact_key(tenant, digest, suffix)
        if not self._exists(key):
            encryption: dict[str, Any] = {"ServerSideEncryption": self.server_side_encryption}
            if self.kms_key_id:
                encryption["SSEKMSKeyId"] = self.kms_key_id
            with _s3_errors(missing=None):
                self.client.put_object(
                    Bucket=self.bucket,
                    Key=key,
                    Body=data,
                    ContentType="application/octet-stream",
                    ChecksumSHA256=base64.b64encode(bytes.fromhex(digest)).decode("ascii"),
                    **encryption,
                )
        return ArtifactRef(self._uri(key), digest, len(data))

    def _exists(self, key: str) -> bool:
        from botocore.exceptions import BotoCoreError, ClientError

        try:
            self.client.head_object(Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _code(exc) in _MISSING:
                return False
            raise _error(exc, missing=None) from exc
        except BotoCoreError as exc:
            raise _error(exc, missing=None) from exc
        return True

    def get(self, uri: str, *, sha256: str) -> bytes:
        key = self._key(uri)
        with _s3_errors(missing=f"artifact {uri} is missing from the store"):
            data = self.client.get_object(Bucket=self.bucket, Key=key)["Body"].read()
        return verify(data, sha256, uri)

    def owns(self, tenant: str, uri: str) -> bool:
        try:
            return self._key(uri).startswith(self._tenant_root(tenant))
        except Forbidden:
            return False

    def tenant_root(self, tenant: str) -> str:
        return self._uri(self._tenant_root(tenant))

    def read_external(self, tenant: str, uri: str, max_bytes: int | None = None) -> bytes:
        if not uri.startswith("s3://"):
            raise BadRequest("the S3 store reads s3:// URIs only", field="artifact_uri")
        try:
            bucket, key = parse_s3_url(uri)
        except ValueError:
            raise BadRequest("that is not an s3://bucket/key URI", field="artifact_uri") from None
        if not key:
            raise BadRequest("that is not an s3://bucket/key URI", field="artifact_uri")
        if _dotted(key):
            raise Forbidden(
                "object keys with '.' or '..' segments are refused", field="artifact_uri"
            )
        inside = bucket == self.bucket and key.startswith(self._root)
        if inside and not key.startswith(self._tenant_root(tenant)):
            raise Forbidden("that artifact belongs to another tenant", field="artifact_uri")
        with _s3_errors(missing=f"no object at {uri}"):
            found = self.client.get_object(Bucket=bucket, Key=key)
            if max_bytes is not None and int(found.get("ContentLength") or 0) > max_bytes:  # refused before it is read
                found["Body"].close()
                raise PayloadTooLarge(f"{uri} is over the {max_bytes} bytes read from it", field="artifact_uri")
            return found["Body"].read()

    def delete(self, uri: str) -> None:
        key = self._key(uri)
        with _s3_errors(missing=None):
            self.client.delete_object(Bucket=self.bucket, Key=key)


def _dotted(key: str) -> bool:
    """S3 keys are literal, but a folder (and many tools) would read `a/../b` as `b`: refuse
    such keys rather than let them look like they lie under a tenant's prefix."""
    return any(part in (".", "..") for part in key.split("/"))


def _code(exc: Exception) -> str:
    response = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


def _error(exc: Exception, *, missing: str | None) -> SluiceError:
    """The sluice error for an S3 failure, in words of our own. `missing` is the NotFound
    message; without one, a missing bucket or key is the store's own fault."""
    code = _code(exc)
    status = (
        (getattr(exc, "response", None) or {}).get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    )
    if code in _MISSING:
        if missing is not None:
            return NotFound(missing, field="artifact_uri")
        return Unavailable("the artifact store is unavailable")
    if code in _DENIED or code.startswith("KMS."):
        return Forbidden("access to that artifact is denied", field="artifact_uri")
    if code in _THROTTLED or status >= 500 or not code:  # no code: a connection or timeout error
        return Unavailable("the artifact store is unavailable; try again")
    return BackendError("the artifact store could not complete the request")


@contextmanager
def _s3_errors(*, missing: str | None) -> Iterator[None]:
    from botocore.exceptions import BotoCoreError, ClientError

    try:
        yield
    except (ClientError, BotoCoreError) as exc:
        raise _error(exc, missing=missing) from exc
