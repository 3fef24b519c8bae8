"""Where every record lives in the single table: its `pk` (partition) and `sk` (sort key).

Deployed tables hold these keys, and the infrastructure's IAM conditions name their prefixes
(`T#<tenant>`, `K#<key id>`), so they never change:

- model: `pk=T#<tenant>`, `sk=M#<name>`; also `uid` and `last_version`
- version: `pk=T#<tenant>#M#<model>`, `sk=V#<version:010d>`
- where a deleted model's count of versions stood: the same pk, `sk=NUMBERS`; also
  `last_version` (a model made again under the name numbers on from it)
- deployment: `pk=T#<tenant>`, `sk=D#<name>`
- history counter: `pk=T#<tenant>#D#<name>`, `sk=SEQ`; also `last_seq`
- history entry: `pk=T#<tenant>#D#<name>`, `sk=H#<seq:010d>`
- statistics: `pk=T#<tenant>#D#<name>`, `sk=S#<revision:010d>#<subject>`; also `subject` and
  one `stat:<name>` per counter
- monitoring baseline: `pk=T#<tenant>#D#<name>`, `sk=BASELINE`; also `doc` (JSON)
- monitoring profile: `pk=T#<tenant>#D#<name>`, `sk=P#<revision:010d>#<window:012d>#<id>`, one
  per flush of a process; also `variant`, `doc` (JSON) and `expires_at`
- kept prediction (ground truth): `pk=T#<tenant>#D#<name>#R#<request id>`, `sk=PREDICTION`;
  also `doc` (JSON) and `expires_at`
- labelled row of it (written once per deployment made under the name, conditionally): the
  same pk, `sk=LABEL#<row:06d>`; also `made` (the revision its deployment was made at) and
  `expires_at`
- labelled counts: `pk=T#<tenant>#D#<name>`, `sk=Q#<revision:010d>#<window:012d>#<id>`, one per
  label post and window; also `window`, `doc` (JSON) and `expires_at`
- assignment: `pk=T#<tenant>#D#<name>#R#<request id>`, `sk=ASSIGNMENT`; also `variant` (the
  path of each variant the request's bandits chose, space-separated: `sluice.registry.codec`),
  `revision` (the deployment's, as it answered) and `expires_at`
- reward given for it: the same pk, `sk=REWARD` (written once per deployment made under the
  name, conditionally); also `made` and `expires_at`
- cached answer (prediction cache, shared tier): `pk=T#<tenant>#D#<name>#A#<key>`, `sk=ANSWER`;
  also `body` (bytes), `expires_at` (whole seconds, the time to live) and `expires_at_exact`
- WebSocket messages counted in a window: `pk=T#<tenant>#W#<connection id>`, `sk=N#<window>`;
  also `n` and `expires_at`
- API key: `pk=K#<key id>`, `sk=KEY`
- API key listing: `pk=T#<tenant>`, `sk=K#<key id>`, a copy of the key
- batch job: `pk=T#<tenant>`, `sk=J#<job id>`; its counters are numbers added to in place
- batch chunk: `pk=T#<tenant>#J#<job id>`, `sk=C#<index:06d>`, one per scored chunk
- batch output folder held: `pk=T#<tenant>`, `sk=O#<sha256 of the output URI>`; also `uri`, and
  `job` while an unfinished job holds it (a released one has `expires_at` instead)
- batch schedule: `pk=T#<tenant>`, `sk=SC#<name>`
- optimize job: `pk=T#<tenant>`, `sk=OJ#<job id>`; its report is one string attribute of JSON
- follow binding: `pk=T#<tenant>`, `sk=F#<deployment>`; also `watch` (what it follows) and
  `revision`, on which every update is conditional
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from collections.abc import Callable

MODEL = "M#"
VERSION = "V#"
NUMBERS = "NUMBERS"
DEPLOYMENT = "D#"
HISTORY = "H#"
HISTORY_COUNTER = "SEQ"
CATALOG = "CATALOG"  # in the tenant's partition: its catalog counter (`sluice.registry.guards`)
STATS = "S#"
BASELINE = "BASELINE"
PROFILE = "P#"
PREDICTION = "PREDICTION"
LABEL = "LABEL#"
OUTCOMES = "Q#"
ASSIGNMENT = "ASSIGNMENT"
REWARD = "REWARD"
ANSWER = "ANSWER"
KEY = "KEY"
MESSAGES = "N#"
KEY_LISTING = "K#"
JOB = "J#"
CHUNK = "C#"
OUTPUT = "O#"
SCHEDULE = "SC#"
OPTIMIZE_JOB = "OJ#"
FOLLOW = "F#"


def tenant(tenant: str) -> str:
    """The tenant's partition: its models, deployments, key listings and jobs."""
    return f"T#{tenant}"


def in_tenant(prefix: str) -> Callable[[str, str], tuple[str, str] | None]:
    """What reads (tenant, name) from the keys of a tenant partition's item whose sort key is
    `prefix` and the name (None for any other item)."""

    def name_of(pk: str, sk: str) -> tuple[str, str] | None:
        return (pk[2:], sk[len(prefix) :]) if pk.startswith("T#") and "#" not in pk[2:] else None

    return name_of


def model_sk(name: str) -> str:
    return f"{MODEL}{name}"


def versions_pk(tenant: str, model: str) -> str:
    return f"T#{tenant}#M#{model}"


def version_sk(version: int) -> str:
    return f"{VERSION}{version:010d}"


def deployment_sk(name: str) -> str:
    return f"{DEPLOYMENT}{name}"


def deployment_pk(tenant: str, name: str) -> str:
    """The partition of a deployment's history and statistics."""
    return f"T#{tenant}#D#{name}"


def history_sk(seq: int) -> str:
    return f"{HISTORY}{seq:010d}"


def stats_sk(revision: int, subject: str) -> str:
    return f"{STATS}{revision:010d}#{subject}"


def profile_sk(revision: int, window: int | None = None, record: str = "") -> str:
    """A revision's profiles (`window` None: the prefix of them all), in window order."""
    if window is None:
        return f"{PROFILE}{revision:010d}#"
    return f"{PROFILE}{revision:010d}#{window:012d}#{record}"


def outcomes_sk(revision: int, window: int | None = None, record: str = "") -> str:
    """A revision's labelled counts (`window` None: the prefix of them all), in window order."""
    if window is None:
        return f"{OUTCOMES}{revision:010d}#"
    return f"{OUTCOMES}{revision:010d}#{window:012d}#{record}"


def label_sk(row: int) -> str:
    return f"{LABEL}{row:06d}"


def assignment_pk(tenant: str, deployment: str, request_id: str) -> str:
    # One partition per request: assignments are written on the request path.
    return f"T#{tenant}#D#{deployment}#R#{request_id}"


def answer_pk(tenant: str, deployment: str, key: str) -> str:
    # One partition per answer: read and written on the request path, by many containers.
    return f"T#{tenant}#D#{deployment}#A#{key}"


def connection_pk(tenant: str, connection: str) -> str:
    # One partition per connection: counted on every message, by many containers.
    return f"T#{tenant}#W#{connection}"


def messages_sk(window: str) -> str:
    return f"{MESSAGES}{window}"


def key_item(key_id: str) -> tuple[str, str]:
    return f"K#{key_id}", KEY


def key_ids(tenant_id: str, key_id: str) -> tuple[tuple[str, str], tuple[str, str]]:
    """The API key item and its listing copy under the tenant."""
    return key_item(key_id), (tenant(tenant_id), f"{KEY_LISTING}{key_id}")


def job_sk(job_id: str) -> str:
    return f"{JOB}{job_id}"


def chunks_pk(tenant: str, job_id: str) -> str:
    return f"T#{tenant}#J#{job_id}"


def chunk_sk(index: int) -> str:
    return f"{CHUNK}{index:06d}"


def output_sk(uri: str) -> str:
    # A digest: a URI may be longer than a sort key may be.
    return f"{OUTPUT}{hashlib.sha256(uri.encode()).hexdigest()}"


def schedule_sk(name: str) -> str:
    return f"{SCHEDULE}{name}"


def optimize_job_sk(job_id: str) -> str:
    return f"{OPTIMIZE_JOB}{job_id}"


def follow_sk(deployment: str) -> str:
    return f"{FOLLOW}{deployment}"
