"""Where uploads lie: `uploads/tenants/<tenant>/<id>/` in the artifact store's bucket (or
folder), beside the asynchronous results and never inside the content-addressed artifacts.
Each upload is two objects: `record.json`, written by the API when the upload is made, and
`body`, written by the client alone.

On S3 the client writes the body with a presigned POST: its policy fixes the key, the content
type, the server-side encryption and a `content-length-range` of 1 to the declared size, and
expires within minutes. Where a signer role is configured (the CDK app's), the POST is signed
with credentials of that role assumed for the tenant, which may put objects under that
tenant's uploads prefix and nowhere else. Locally (`sluice serve`) the form is the same
shape, signed with a key kept in the home, and `POST /api/v1/uploads/{id}/body` checks it as
S3 checks its policy, so one client works against both.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

from sluice import owner_only
from sluice.domain.errors import BackendError, BadRequest, Forbidden, NotFound, PayloadTooLarge
from sluice.domain.uploads import UPLOAD_ID, UploadForm
from sluice.storage.base import on_disk

if TYPE_CHECKING:
    from collections.abc import Iterator

    from sluice.clients import AwsClients
    from sluice.storage.s3 import S3Store

RECORD = "record.json"
BODY = "body"
SIGNATURE_FIELD = "x-sluice-signature"
_TENANT = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}\Z")


def upload_prefix(tenant: str) -> str:
    return f"uploads/tenants/{tenant}/"


def _expiry(seconds: int, now: float | None = None) -> str:
    at = datetime.fromtimestamp((now or time.time()) + seconds, tz=UTC)
    return at.strftime("%Y-%m-%dT%H:%M:%SZ")


class UploadStore(Protocol):
    """Uploads by tenant and id: their records, the forms that write their bodies, the bodies."""

    def uri(self, tenant: str, upload_id: str) -> str:
        """Where the body lies (s3:// or file://)."""
        ...

    def put_record(self, tenant: str, upload_id: str, data: bytes) -> None: ...

    def record(self, tenant: str, upload_id: str) -> bytes | None:
        """The record written when the upload was made; None when there is none."""
        ...

    def form(
        self, tenant: str, upload_id: str, *, content_type: str, max_bytes: int, expires_in: int, base_url: str
    ) -> UploadForm:
        """The form the client posts the body with: the body alone, at most `max_bytes`."""
        ...

    def size(self, tenant: str, upload_id: str) -> int | None:
        """The body's size; None while it has not arrived."""
        ...

    def read(self, tenant: str, upload_id: str, start: int = 0, length: int | None = None) -> bytes: ...


class FolderUploads:
    """Uploads in the embedded home's folder store (local mode, `sluice serve`)."""

    def __init__(self, root: Path | str, *, clock: Any = time.time) -> None:
        self.root = Path(root).expanduser().resolve()
        self.clock = clock
        self._lock = threading.Lock()
        self._key: bytes | None = None

    def _dir(self, tenant: str, upload_id: str) -> Path:
        if not UPLOAD_ID.match(upload_id) or not tenant or "/" in tenant or tenant in (".", ".."):
            raise BadRequest("an upload id is 32 lowercase hex digits", field="upload_id")
        return self.root / upload_prefix(tenant) / upload_id

    def key_of(self, tenant: str, upload_id: str) -> str:
        return f"{upload_prefix(tenant)}{upload_id}/{BODY}"

    def uri(self, tenant: str, upload_id: str) -> str:
        return (self._dir(tenant, upload_id) / BODY).as_uri()

    def put_record(self, tenant: str, upload_id: str, data: bytes) -> None:
        with on_disk():
            owner_only.write(self._dir(tenant, upload_id) / RECORD, data)

    def record(self, tenant: str, upload_id: str) -> bytes | None:
        try:
            return (self._dir(tenant, upload_id) / RECORD).read_bytes()
        except FileNotFoundError:
            return None

    def size(self, tenant: str, upload_id: str) -> int | None:
        try:
            return (self._dir(tenant, upload_id) / BODY).stat().st_size
        except FileNotFoundError:
            return None

    def read(self, tenant: str, upload_id: str, start: int = 0, length: int | None = None) -> bytes:
        try:
            with (self._dir(tenant, upload_id) / BODY).open("rb") as fh:
                fh.seek(start)
                return fh.read() if length is None else fh.read(length)
        except FileNotFoundError:
            raise NotFound(f"upload '{upload_id}' has no body", field="upload_id") from None

    # The signed form ---------------------------------------------------------------------
    def _signing_key(self) -> bytes:
        """A key of this home, shared by every process serving it (made once, mode 0600)."""
        if self._key is None:
            with self._lock:
                path = self.root / "uploads" / ".signing-key"
                owner_only.folder(path.parent)
                with contextlib.suppress(FileExistsError), owner_only.open_file(path, "xb") as fh:
                    fh.write(secrets.token_bytes(32))
                key = path.read_bytes()
                if len(key) != 32:  # another process is writing it this instant
                    time.sleep(0.05)
                    key = path.read_bytes()
                self._key = key
        return self._key

    def _sign(self, policy: str) -> str:
        return hmac.new(self._signing_key(), policy.encode("ascii"), hashlib.sha256).hexdigest()

    def form(
        self, tenant: str, upload_id: str, *, content_type: str, max_bytes: int, expires_in: int, base_url: str
    ) -> UploadForm:
        key = self.key_of(tenant, upload_id)
        policy = {
            "expiration": _expiry(expires_in, self.clock()),
            "conditions": [{"key": key}, {"Content-Type": content_type}, ["content-length-range", 1, max_bytes]],
        }
        encoded = base64.b64encode(json.dumps(policy, separators=(",", ":")).encode()).decode("ascii")
        fields = {"key": key, "Content-Type": content_type, "policy": encoded, SIGNATURE_FIELD: self._sign(encoded)}
        return UploadForm(f"{base_url.rstrip('/')}/api/v1/uploads/{upload_id}/body", fields)

    def check_form(self, upload_id: str, fields: dict[str, str]) -> tuple[Path, int, int]:
        """What a posted form may write, as S3 checks a POST policy: its signature, its
        expiry and each condition. The body's path and the least and most bytes it may hold.
        A form without one of the fields every form has is malformed (400), not forbidden."""
        for name in ("key", "policy", SIGNATURE_FIELD):
            if name not in fields:
                raise _no_field(name)
        encoded = fields.get("policy", "")
        given = fields.get(SIGNATURE_FIELD, "")
        if not (encoded and given and encoded.isascii() and given.isascii()) or not hmac.compare_digest(self._sign(encoded), given):
            raise Forbidden("the upload form's signature does not match its policy", field="policy")
        try:
            policy = json.loads(base64.b64decode(encoded, validate=True))
            expiration = datetime.strptime(policy["expiration"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
            conditions = policy["conditions"]
        except (ValueError, KeyError, TypeError):
            raise Forbidden("the upload form's policy cannot be read", field="policy") from None
        if expiration.timestamp() <= self.clock():
            raise Forbidden("the upload form has expired: make a new upload", field="policy")
        least, most = 0, 0
        for condition in conditions:
            if isinstance(condition, list) and condition[:1] == ["content-length-range"]:
                least, most = int(condition[1]), int(condition[2])
            elif isinstance(condition, dict):
                ((name, value),) = condition.items()
                if name not in fields:
                    raise _no_field(name)
                if fields[name] != value:
                    raise Forbidden(f"the form's {name} does not match its policy", field=name)
        key = fields.get("key", "")
        parts = key.split("/")
        if len(parts) != 5 or parts[3] != upload_id or parts[4] != BODY or key != self.key_of(parts[2], upload_id):
            raise Forbidden("the form's key is not this upload's", field="key")
        return self._dir(parts[2], upload_id) / BODY, least, most

    @contextlib.contextmanager
    def writer(self, path: Path, least: int, most: int) -> Iterator[BodyWriter]:
        """A file the body is streamed into, put in place by `commit()` only, once whole and
        within bounds; writing past `most` raises PayloadTooLarge. Left without a commit (a
        client gone, an error), the partial file is removed.

        Each writer has a file of its own: two posts of one form at once (a retry while the
        first still streams) may be fed from the same thread, so a name made of the process
        and thread would be shared and each would write into, or remove, the other's. As on
        S3, the last whole body put in place wins."""
        with on_disk():  # a full disk under the body: its folder, its writes, its commit
            owner_only.folder(path.parent)
            fh, partial = owner_only.aside(path)
            sink = BodyWriter(fh, partial, path, least, most)
            try:
                yield sink
            finally:
                sink.fh.close()
                partial.unlink(missing_ok=True)


def _no_field(name: str) -> BadRequest:
    return BadRequest(f"the form has no `{name}` field: send the upload's fields as they are, before the file", field=name)


class BodyWriter:
    def __init__(self, fh: IO[bytes], partial: Path, path: Path, least: int, most: int) -> None:
        self.fh = fh
        self.partial, self.path, self.least, self.most, self.written = partial, path, max(least, 1), most, 0

    def write(self, data: bytes) -> int:
        self.written += len(data)
        if self.written > self.most:
            raise PayloadTooLarge(f"the upload's body is over its declared size of {self.most} bytes", field="file")
        return self.fh.write(data)

    def commit(self) -> None:
        self.fh.close()
        if self.written < self.least:
            raise BadRequest(f"the upload's body is {self.written} bytes; it must hold at least {self.least}", field="file")
        os.replace(self.partial, self.path)


class TenantSigner:
    """S3 clients on credentials of the upload signer role, assumed per tenant with the
    `tenant` session tag: that role may put objects under its tenant's uploads prefix only, so
    a form signed with them can write nothing else, whatever its policy says. Kept per tenant
    until fewer seconds remain than a form needs."""

    def __init__(
        self, role_arn: str, *, clients: AwsClients | None = None, region: str | None = None, duration_s: int = 3600
    ) -> None:
        self.role_arn = role_arn
        self.region = region
        self.duration_s = duration_s
        self._clients = clients
        self._lock = threading.Lock()
        self._by_tenant: dict[str, tuple[Any, float]] = {}

    def client(self, tenant: str, *, valid_for_s: int) -> Any:
        if not _TENANT.match(tenant):
            raise ValueError(f"not a tenant name: {tenant!r}")
        with self._lock:
            found = self._by_tenant.get(tenant)
        if found is not None and found[1] - time.time() > valid_for_s + 60:
            return found[0]
        built = self._build(tenant)
        with self._lock:
            if len(self._by_tenant) > 256:
                self._by_tenant.clear()
            self._by_tenant[tenant] = built
        return built[0]

    def _build(self, tenant: str) -> tuple[Any, float]:
        import boto3
        from botocore.config import Config

        if self._clients is None:
            from sluice.clients import default_clients

            self._clients = default_clients(self.region)
        sts = self._clients.client("sts", region=self.region)
        found = sts.assume_role(
            RoleArn=self.role_arn,
            RoleSessionName=f"sluice-upload-{tenant}"[:64],
            DurationSeconds=self.duration_s,
            Tags=[{"Key": "tenant", "Value": tenant}],
        )["Credentials"]
        session = boto3.session.Session(
            aws_access_key_id=found["AccessKeyId"],
            aws_secret_access_key=found["SecretAccessKey"],
            aws_session_token=found["SessionToken"],
        )
        client = session.client(
            "s3",
            region_name=self.region or sts.meta.region_name,
            endpoint_url=self._clients.endpoint_urls.get("s3"),
            config=Config(signature_version="s3v4", s3={"addressing_style": "virtual", "us_east_1_regional_endpoint": "regional"}),
        )
        return client, found["Expiration"].timestamp()


class S3Uploads:
    """Uploads in the artifact bucket, under its prefix, private and encrypted as it is."""

    def __init__(self, store: S3Store, *, signer: TenantSigner | None = None) -> None:
        self.store = store
        self.bucket = store.bucket
        self.signer = signer
        self._root = f"{store.prefix}/" if store.prefix else ""

    def _key(self, tenant: str, upload_id: str, name: str) -> str:
        if not UPLOAD_ID.match(upload_id) or not _TENANT.match(tenant):
            raise BadRequest("an upload id is 32 lowercase hex digits", field="upload_id")
        return f"{self._root}{upload_prefix(tenant)}{upload_id}/{name}"

    def uri(self, tenant: str, upload_id: str) -> str:
        return f"s3://{self.bucket}/{self._key(tenant, upload_id, BODY)}"

    def _encryption(self) -> dict[str, str]:
        found = {"x-amz-server-side-encryption": self.store.server_side_encryption}
        if self.store.kms_key_id:
            found["x-amz-server-side-encryption-aws-kms-key-id"] = self.store.kms_key_id
        return found

    def put_record(self, tenant: str, upload_id: str, data: bytes) -> None:
        params: dict[str, Any] = {
            "Bucket": self.bucket,
            "Key": self._key(tenant, upload_id, RECORD),
            "Body": data,
            "ContentType": "application/json",
            "ServerSideEncryption": self.store.server_side_encryption,
        }
        if self.store.kms_key_id:
            params["SSEKMSKeyId"] = self.store.kms_key_id
        try:
            self.store.client.put_object(**params)
        except Exception as exc:
            raise BackendError(f"could not write the upload's record ({type(exc).__name__})") from None

    def record(self, tenant: str, upload_id: str) -> bytes | None:
        from botocore.exceptions import ClientError

        try:
            return self.store.client.get_object(Bucket=self.bucket, Key=self._key(tenant, upload_id, RECORD))["Body"].read()
        except ClientError as exc:
            if _missing(exc):
                return None
            raise BackendError("could not read the upload store") from None

    def size(self, tenant: str, upload_id: str) -> int | None:
        from botocore.exceptions import ClientError

        try:
            return int(self.store.client.head_object(Bucket=self.bucket, Key=self._key(tenant, upload_id, BODY))["ContentLength"])
        except ClientError as exc:
            if _missing(exc):
                return None
            raise BackendError("could not read the upload store") from None

    def read(self, tenant: str, upload_id: str, start: int = 0, length: int | None = None) -> bytes:
        from botocore.exceptions import ClientError

        params: dict[str, Any] = {"Bucket": self.bucket, "Key": self._key(tenant, upload_id, BODY)}
        if start or length is not None:
            params["Range"] = f"bytes={start}-{'' if length is None else start + length - 1}"
        try:
            return self.store.client.get_object(**params)["Body"].read()
        except ClientError as exc:
            if _missing(exc):
                raise NotFound(f"upload '{upload_id}' has no body", field="upload_id") from None
            raise BackendError("could not read the upload store") from None

    def form(
        self, tenant: str, upload_id: str, *, content_type: str, max_bytes: int, expires_in: int, base_url: str
    ) -> UploadForm:
        fields = {"Content-Type": content_type, **self._encryption()}
        conditions: list[Any] = [{name: value} for name, value in fields.items()]
        conditions.append(["content-length-range", 1, max_bytes])
        try:
            client = self.signer.client(tenant, valid_for_s=expires_in) if self.signer else self.store.presigner
            found = client.generate_presigned_post(
                Bucket=self.bucket,
                Key=self._key(tenant, upload_id, BODY),
                Fields=fields,
                Conditions=conditions,
                ExpiresIn=expires_in,
            )
        except Exception as exc:
            raise BackendError(f"could not sign the upload ({type(exc).__name__})") from None
        return UploadForm(found["url"], {str(k): str(v) for k, v in found["fields"].items()})


def _missing(exc: Any) -> bool:
    return str(exc.response.get("Error", {}).get("Code")) in ("NoSuchKey", "404", "NotFound")


def uploads_for(store: object, *, signer_role_arn: str | None = None, region: str | None = None) -> UploadStore | None:
    """The upload store beside an artifact store (the same bucket or folder); None for others."""
    from sluice.storage.folder import FolderStore
    from sluice.storage.s3 import S3Store

    if isinstance(store, S3Store):
        signer = TenantSigner(signer_role_arn, clients=store._clients, region=region or store.region) if signer_role_arn else None
        return S3Uploads(store, signer=signer)
    if isinstance(store, FolderStore):
        return FolderUploads(store.root)
    return None


__all__ = ["BODY", "RECORD", "FolderUploads", "S3Uploads", "TenantSigner", "UploadStore", "upload_prefix", "uploads_for"]
