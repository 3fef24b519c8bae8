"""The group of `lookup` steps: features fetched by entity key from an online store, each
table, feature group or Feast feature view held to the tenants the operator lists (a local
SQLite file per tenant)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, model_validator

from sluice.settings.process import Group


class LookupSettings(Group):
    """Read by the lookup steps (`sluice.runtimes.lookups`): the deployment service, which
    refuses a policy reading a store its tenant may not read, and the prediction service,
    which checks again at call time and fetches"""

    title: ClassVar[str] = "Lookup steps"

    lookup_sources: dict[str, list[str]] = Field(
        default_factory=dict,
        description=(
            "The online stores each tenant's `lookup` steps may read: `{tenant: [\"dynamodb:TABLE\", "
            "\"sagemaker:FEATURE_GROUP\", \"feast:FEATURE_VIEW\", ...]}`, JSON in the environment, compared "
            "whole. Set by the CDK app from `graphs.lookups` in `infra/sluice.yaml`, with `dynamodb:BatchGetItem` "
            "on those tables and `sagemaker:BatchGetRecord` on those feature groups; Feast's feature views are "
            "listed by the operator of a service that reads a Feast repository (`lookup_feast_repo`), and a "
            "SQLite table (`sqlite:TABLE`) where `lookup_sqlite` is one file for every tenant. Empty: no tenant "
            "may read one."
        ),
    )
    lookup_sqlite: str = Field(
        default="",
        description=(
            "The SQLite file whose tables `lookup` steps with `store: sqlite` read (local mode only), opened "
            "read-only; `{tenant}` stands for the policy's tenant (e.g. `./features/{tenant}.db`), so each "
            "tenant reads its own file. A path without `{tenant}` is one file every tenant's lookups open: a "
            "tenant then reads only the tables `lookup_sources` lists for it (`sqlite:TABLE`). Empty: SQLite "
            "lookups are off."
        ),
    )
    lookup_sqlite_hold_rows: int = Field(
        default=100_000,
        ge=0,
        le=10_000_000,
        description=(
            "A SQLite lookup table of at most this many rows is read whole into memory once lookups have asked "
            "it for as many keys as it has rows (a batch job's chunks, many requests), and answered from there "
            "until the file changes (about 250 bytes a row); a table a dictionary would not answer as SQL does (a "
            "view, a collation, a key column neither TEXT nor INTEGER asked with integers, two rows of one key) is "
            "always read with SQL. 0: always SQL."
        ),
    )
    lookup_feast_repo: str = Field(
        default="",
        description=(
            "The Feast repository (the folder of its `feature_store.yaml`) that `lookup` steps with "
            "`store: feast` read through Feast's SDK; `{tenant}` stands for the policy's tenant (e.g. "
            "`./feature_repos/{tenant}`), so each tenant may have its own. Its `feature_store.yaml` decides "
            "the online store (SQLite locally, DynamoDB on AWS) and the registry; the feature views a tenant "
            "may read are still listed in `lookup_sources`. Needs `pip install 'sluice[feast]'`; not in the "
            "Lambda layers. Empty: Feast lookups are off."
        ),
    )
    lookup_concurrency: int = Field(
        default=8,
        ge=1,
        le=64,
        description=(
            "Store calls one lookup makes at once when its rows need more than one (DynamoDB's and SageMaker "
            "Feature Store's 100 keys a call); a SQLite file is read one call after another."
        ),
    )
    lookup_retries: int = Field(
        default=5,
        ge=0,
        le=20,
        description="Times a call's unprocessed keys (DynamoDB's UnprocessedKeys, throttling) are asked again, with backoff, before the step fails (503).",
    )

    lookup_cache_entries: int = Field(
        default=100_000,
        ge=0,
        le=10_000_000,
        description=(
            "The most entities whose looked-up values one process keeps between requests and between a batch "
            "job's chunks, across all tenants and tables (about 100 bytes an entity plus 10 a feature, more for text); the "
            "tables least recently read go first. 0: no feature cache, whatever a lookup's `cache_ttl_s`."
        ),
    )
    lookup_cache_ttl_s: float = Field(
        default=0.0,
        ge=0,
        le=86_400,
        description=(
            "How long a lookup that does not set its own `cache_ttl_s` keeps the values it read (never past "
            "its `max_age_s`: a record about to turn stale is read again). 0: such lookups read the store on "
            "every request and chunk; a lookup opts in with `cache_ttl_s`, or out with `cache_ttl_s: 0`."
        ),
    )

    @model_validator(mode="after")
    def _parse_sources(self) -> LookupSettings:
        def valid(source: str) -> bool:
            store, _, name = source.partition(":")
            return store in ("dynamodb", "sagemaker", "feast", "sqlite") and bool(name)

        self._check_allowlist("lookup_sources", valid, "dynamodb:TABLE, sagemaker:FEATURE_GROUP, feast:FEATURE_VIEW or sqlite:TABLE")
        return self
