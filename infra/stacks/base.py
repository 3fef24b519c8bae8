"""What the stacks of sluice functions (api, batch, streams) share."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aws_cdk import Stack
from constructs import Construct

from infra.constructs.functions import FunctionPlatform
from infra.constructs.grants import FunctionSteps
from infra.constructs.imported import ImportedStorage
from infra.naming import ResourceNames


class FunctionStack(Stack):
    """A stack of sluice functions: what it makes is named by `names`, its functions run on
    `platform`, it reaches the storage stack's buckets and table by name (`storage`), and its
    functions that predict may invoke the SageMaker endpoints `endpoint_names` and the
    tenants' Lambda functions of `function_steps`."""

    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        names: ResourceNames,
        platform: FunctionPlatform,
        endpoint_names: Sequence[str],
        function_steps: FunctionSteps | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(scope, id, **kwargs)
        self.names = names
        self.platform = platform
        self.endpoint_names = endpoint_names
        self.function_steps = function_steps or FunctionSteps({})
        self.storage = ImportedStorage(self, names)
