"""The embedded artifact store: a folder, written atomically. A disk that is full,
read-only or failing is raised as the domain's `StorageFault` (`on_disk`)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import unquote, urlparse

from sluice import owner_only
from sluice.domain.errors import BadRequest, Forbidden, NotFound, PayloadTooLarge
from sluice.storage.base import ArtifactRef, artifact_key, on_disk, sha256_hex, verify


def path_of_file_url(url: str) -> Path:
    parsed = urlparse(url)
    if parsed.scheme != "file":
        raise ValueError(f"not a file URL: {url!r}")
    path = unquote(parsed.path)  # as `Path.as_uri` quotes it (`dt=1` is `dt%3D1`)
    return Path((parsed.netloc + path) if parsed.netloc == "~" else path).expanduser()


class FolderStore:
    def __init__(self, root: Path | str) -> None:
        self.root = Path(root).expanduser().resolve()
        with on_disk():
            owner_only.folder(self.root)

    @classmethod
    def from_url(cls, url: str) -> FolderStore:
        return cls(path_of_file_url(url))

    def _uri(self, path: Path) -> str:
        return path.as_uri()

    def _path(self, uri: str) -> Path:
        path = path_of_file_url(uri).resolve()
        if not path.is_relative_to(self.root):
            raise Forbidden("artifact is outside this store", field="artifact_uri")
        return path

    def put(self, tenant: str, data: bytes, *, suffix: str = "") -> ArtifactRef:
        digest = sha256_hex(data)
        path = self.root / artifact_key(tenant, digest, suffix)
        if not path.exists():
            with on_disk():
                owner_only.write(path, data)
        return ArtifactRef(self._uri(path), digest, len(data))

    def get(self, uri: str, *, sha256: str) -> bytes:
        path = self._path(uri)
        try:
            with on_disk(writing=False):
                data = path.read_bytes()
        except FileNotFoundError:
            raise NotFound(f"the artifact sha256:{sha256[:12]} is missing from the store", field="artifact_uri") from None
        return verify(data, sha256, uri)

    def owns(self, tenant: str, uri: str) -> bool:
        try:
            return self._path(uri).is_relative_to(self.root / "tenants" / tenant)
        except (Forbidden, ValueError):
            return False

    def tenant_root(self, tenant: str) -> str:
        return f"{self.root.as_uri()}/tenants/{tenant}/"

    def read_external(self, tenant: str, uri: str, max_bytes: int | None = None) -> bytes:
        if not uri.startswith("file://"):
            raise BadRequest("the local store reads file:// URIs only", field="artifact_uri")
        path = path_of_file_url(uri).resolve()
        if path.is_relative_to(self.root) and not self.owns(tenant, uri):
            raise Forbidden("that artifact belongs to another tenant", field="artifact_uri")
        if not path.is_file():
            raise NotFound(f"no file at {uri}", field="artifact_uri")
        if max_bytes is not None and path.stat().st_size > max_bytes:  # refused before it is read, not after
            raise PayloadTooLarge(f"{uri} is over the {max_bytes} bytes read from it", field="artifact_uri")
        return path.read_bytes()

    def delete(self, uri: str) -> None:
        with on_disk():
            self._path(uri).unlink(missing_ok=True)
