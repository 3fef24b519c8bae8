"""`api.managed_instances`: the API function on Lambda Managed Instances (opt-in).

A capacity provider runs the function on EC2 instances Lambda launches in the deployment's own
subnets; one execution environment answers several requests at once (for Python, one process
per request in flight), and the bill is the instances' (plus a management fee and the request
charge), not GB-seconds. What AWS requires of it, checked here rather than at deploy time:

- subnets (1 to 16) and security groups (1 to 5) of an existing VPC, by id;
- Python 3.13 or newer (`functions.python`);
- a function of at least 2 GB and one vCPU: `api.memory_mb` / `memory_gib_per_vcpu` >= 1 GiB;
- instance types of the functions' architecture (Graviton's have a `g` after the generation).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal, get_args

from pydantic import Field, model_validator

from infra.config.base import Section

if TYPE_CHECKING:
    from infra.config.sections import FunctionsConfig

FIELD = "api.managed_instances"
MIN_PYTHON = (3, 13)  # Lambda Managed Instances run Python 3.13 and newer
INSTANCE_TYPE = r"^[a-z][a-z0-9-]*\.[a-z0-9]+$"  # c7g.xlarge, m7i.2xlarge
# The processes one execution environment runs (one per request in flight) each import the app
# and load the models they serve: each needs at least this much of the function's memory.
PROCESS_MIN_MB = 256


def _version(python: str) -> tuple[int, ...]:
    return tuple(int(part) for part in python.split("."))


def graviton(instance_type: str) -> bool:
    """Whether an instance type is Graviton (arm64): a `g` right after the generation (c7g,
    m8g, r7gd, c6gn)."""
    return re.match(r"^[a-z]+\d+g", instance_type) is not None


class ManagedInstancesConfig(Section):
    subnet_ids: tuple[str, ...] = Field(
        min_length=1,
        max_length=16,
        description="Subnets (of one VPC) the instances run in; they must reach the AWS APIs the "
        "API calls (DynamoDB, S3, STS, and what the deployment uses), through a NAT gateway or "
        "VPC endpoints.",
    )
    security_group_ids: tuple[str, ...] = Field(
        min_length=1, max_length=5, description="Security groups of the instances (outbound to those APIs)."
    )
    instance_types: tuple[str, ...] = Field(
        (),
        description="EC2 instance types Lambda may launch (e.g. c7g.xlarge); none: Lambda chooses "
        "among current generations of the functions' architecture.",
    )
    max_vcpus: int | None = Field(
        None, ge=12, le=15000, description="Upper bound on the vCPUs of all the instances; none: Lambda's default."
    )
    per_environment_concurrency: int = Field(
        4,
        ge=1,
        le=1600,
        description="Requests one execution environment answers at once (PerExecutionEnvironmentMaxConcurrency), "
        "each in a Python process of its own sharing the environment's memory.",
    )
    memory_gib_per_vcpu: Literal[2, 4, 8] = Field(
        2,
        description="Memory per vCPU of an execution environment: api.memory_mb gives the memory, this "
        "the vCPUs (2048 MB at 2 GiB a vCPU: one vCPU).",
    )
    min_environments: int | None = Field(
        None, ge=0, le=15000, description="Execution environments kept running; none: Lambda's (three, one per zone)."
    )
    max_environments: int | None = Field(None, ge=0, le=15000)

    @model_validator(mode="after")
    def _ids_and_bounds(self) -> ManagedInstancesConfig:
        for subnet in self.subnet_ids:
            if not re.fullmatch(r"subnet-[0-9a-f]{8,17}", subnet):
                raise ValueError(f"{FIELD}.subnet_ids: {subnet!r} is not a subnet id (subnet-0123abcd...)")
        for group in self.security_group_ids:
            if not re.fullmatch(r"sg-[0-9a-f]{8,17}", group):
                raise ValueError(f"{FIELD}.security_group_ids: {group!r} is not a security group id (sg-0123abcd...)")
        for kind in self.instance_types:
            if not re.fullmatch(INSTANCE_TYPE, kind):
                raise ValueError(f"{FIELD}.instance_types: {kind!r} is not an EC2 instance type (c7g.xlarge)")
        low, high = self.min_environments, self.max_environments
        if low is not None and high is not None and low > high:
            raise ValueError(f"{FIELD}: min_environments ({low}) exceeds max_environments ({high})")
        return self

    def vcpus(self, memory_mb: int) -> float:
        """The vCPUs of one execution environment of a function of `memory_mb`."""
        return memory_mb / 1024 / self.memory_gib_per_vcpu

    def process_mb(self, memory_mb: int) -> int:
        """The memory each of an environment's processes may count on."""
        return memory_mb // self.per_environment_concurrency

    def check(self, functions: FunctionsConfig, memory_mb: int) -> None:
        """What the section requires of the rest of the config (raises ValueError)."""
        if _version(functions.python) < MIN_PYTHON:
            offered = get_args(type(functions).model_fields["python"].annotation)
            raise ValueError(
                f"{FIELD} needs functions.python {' or '.join(v for v in offered if _version(v) >= MIN_PYTHON)} "
                f"(Lambda Managed Instances run Python 3.13 and newer); functions.python is {functions.python}"
            )
        if memory_mb < 2048 or self.vcpus(memory_mb) < 1:
            raise ValueError(
                f"{FIELD}: api.memory_mb ({memory_mb}) gives {self.vcpus(memory_mb):g} vCPU at "
                f"memory_gib_per_vcpu {self.memory_gib_per_vcpu}; an execution environment needs at "
                f"least 2048 MB and one vCPU (api.memory_mb >= {max(2048, 1024 * self.memory_gib_per_vcpu)})"
            )
        if self.process_mb(memory_mb) < PROCESS_MIN_MB:
            raise ValueError(
                f"{FIELD}: per_environment_concurrency {self.per_environment_concurrency} leaves each "
                f"process {self.process_mb(memory_mb)} MB of api.memory_mb ({memory_mb}); each request in "
                f"flight runs in a process of its own, which needs at least {PROCESS_MIN_MB} MB"
            )
        wanted = functions.architecture == "arm64"
        wrong = [kind for kind in self.instance_types if graviton(kind) != wanted]
        if wrong:
            raise ValueError(
                f"{FIELD}.instance_types: {', '.join(wrong)} do not run functions.architecture "
                f"{functions.architecture} (Graviton types, with a g after the generation, run arm64)"
            )
