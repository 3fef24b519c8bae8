"""Where artifacts live: a folder locally, S3 on AWS, behind one protocol."""

from sluice.storage.base import ArtifactRef, ArtifactStore, sha256_hex

__all__ = ["ArtifactRef", "ArtifactStore", "sha256_hex"]
