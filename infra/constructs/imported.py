"""The storage stack's buckets and table as another stack sees them: imported by name
(infra.naming), never through exports, the first time one of its constructs asks."""

from __future__ import annotations

from functools import cached_property

from aws_cdk import aws_dynamodb as dynamodb
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.naming import ResourceNames


class ImportedStorage:
    def __init__(self, scope: Construct, names: ResourceNames) -> None:
        self._scope = scope
        self._names = names

    @cached_property
    def artifacts(self) -> s3.IBucket:
        return s3.Bucket.from_bucket_name(
            self._scope, "ArtifactsBucket", self._names.artifacts_bucket
        )

    @cached_property
    def batch(self) -> s3.IBucket:
        return s3.Bucket.from_bucket_name(self._scope, "BatchBucket", self._names.batch_bucket)

    @cached_property
    def table(self) -> dynamodb.ITableV2:
        return dynamodb.TableV2.from_table_name(self._scope, "RegistryTable", self._names.table)

    @cached_property
    def precomputed(self) -> dynamodb.ITableV2:
        return dynamodb.TableV2.from_table_name(self._scope, "PrecomputedTable", self._names.precomputed_table)
