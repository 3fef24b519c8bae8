"""The base of every part of a policy (nodes, their branches, a switch's conditions): frozen,
no unknown fields, and written back as it reads (options left out stay out, no `null`s)."""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, SerializerFunctionWrapHandler, model_serializer

# A header's name as HTTP writes one (RFC 9110's token), of at most 64 characters: what a policy
# may read from a request's headers (a switch's `headers.<name>`, a precomputed key's, a sticky
# split's `routing_key`).
HEADER_NAME = r"[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}"


class Part(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_serializer(mode="wrap")
    def _without_unset_options(self, handler: SerializerFunctionWrapHandler) -> Any:
        data = handler(self)
        return {k: v for k, v in data.items() if v is not None} if isinstance(data, dict) else data


class ReadsRequest:
    """A part that reads a value of the request where its field named `path_field` says:
    routing_key, headers.<name>, parameters.<name> or inputs.<name> (a switch's condition, a
    precomputed node's key)."""

    path_field: ClassVar[str]

    @property
    def source(self) -> str:
        """routing_key, headers, parameters or inputs."""
        return getattr(self, self.path_field).partition(".")[0]  # type: ignore[no-any-return]

    @property
    def name(self) -> str:
        """The header's, parameter's or input's name; empty for routing_key."""
        return getattr(self, self.path_field).partition(".")[2]  # type: ignore[no-any-return]
