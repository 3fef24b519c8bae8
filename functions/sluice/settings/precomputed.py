"""The group of precomputed answers: the table batch jobs publish into and `precomputed`
nodes read (`sluice.registry.precomputed`)."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field, field_validator

from sluice.settings.process import Group


class PrecomputedSettings(Group):
    """Read by the wiring, which builds the store for the prediction services (reading) and
    the batch runner (publishing)."""

    title: ClassVar[str] = "Precomputed answers"

    precomputed_table: str = Field(
        default="",
        description=(
            "Where tables of precomputed answers live: `dynamodb://TABLE` (on AWS, set by the CDK app to the "
            "storage stack's table), or `sqlite:///PATH`; empty: a file beside a SQLite registry "
            "(`precomputed.db`), or none beside a DynamoDB one (`precomputed` nodes then answer every row live "
            "and `publish` is refused)."
        ),
    )
    precomputed_publication_ttl_s: float = Field(
        default=5.0,
        ge=0,
        le=60,  # a replaced generation's answers are kept a minute locally (`SqlitePrecomputed.retire`)
        description=(
            "How long a container keeps a table's publication (which job's answers it serves): a job's answers "
            "are served within this long of its success, at most 60 s. 0 reads it on every request (one more store call)."
        ),
    )
    precomputed_answers_kept: int = Field(
        default=10_000,
        ge=0,
        le=10_000_000,
        description=(
            "Stored answers a container keeps once read, by tenant, table, generation and entity: a published "
            "generation's answers never change, so a kept one is the stored one, served until its own expiry, and "
            "an entity asked again costs no read of the table (on AWS a DynamoDB read). 0: every answer read from the table."
        ),
    )
    precomputed_answers_kept_bytes: int = Field(
        default=32 * 1024 * 1024,
        ge=0,
        le=64 * 1024 * 1024 * 1024,
        description=(
            "The most bytes of stored answers a container keeps (their rows as stored): past it the kept ones are "
            "dropped, as past `precomputed_answers_kept`, and read again as asked. 0: none kept."
        ),
    )

    @field_validator("precomputed_table")
    @classmethod
    def _url(cls, value: str) -> str:
        if value and not value.startswith(("dynamodb://", "sqlite:///")):
            raise ValueError("SLUICE_PRECOMPUTED_TABLE must be dynamodb://TABLE or sqlite:///PATH")
        return value
