"""Predictions over a WebSocket: an API Gateway WebSocket API -> the websocket function.

`$connect` is guarded by the API's REQUEST authorizer (the same function and the same keys as
the REST API; `sluice.handlers.authorizer.authorize_connect`), which puts the tenant in the
connection's context; `$default` answers each message through the Management API
(`sluice.handlers.websocket`); `$disconnect` has nothing to clean up. The stage throttles
messages (every message is an invocation) and writes one access-log line per message.
"""

from __future__ import annotations

from collections.abc import Sequence

import jsii
from aws_cdk import ArnFormat, Duration, Stack
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_apigatewayv2 as apigwv2
from aws_cdk import aws_apigatewayv2_authorizers as authorizers
from aws_cdk import aws_apigatewayv2_integrations as integrations
from aws_cdk import aws_iam as iam
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_logs as logs
from constructs import Construct

from infra.config import WebSocketConfig
from infra.constructs.functions import FunctionPlatform, SluiceFunction
from infra.constructs.logs import CALLER_FIELDS, REQUEST_FIELDS, access_log_format
from infra.constructs.python_layer import PythonLayer
from infra.nag import acknowledge, wildcard_resource

# One JSON object per message.
ACCESS_LOG_FIELDS = {
    **REQUEST_FIELDS,
    "routeKey": "$context.routeKey",
    "eventType": "$context.eventType",
    "connectionId": "$context.connectionId",
    "status": "$context.status",
    "integrationLatency": "$context.integration.latency",
    **CALLER_FIELDS,
}


@jsii.implements(apigwv2.IAccessLogSettings)
class _AccessLogs:
    """Stage access logs: one JSON line per message into `log_group`."""

    def __init__(self, log_group: logs.ILogGroup) -> None:
        self._destination = apigwv2.LogGroupLogDestination(log_group)

    @property
    def destination(self) -> apigwv2.IAccessLogDestination:
        return self._destination

    @property
    def format(self) -> apigw.AccessLogFormat:
        return access_log_format(ACCESS_LOG_FIELDS)


class WebSocketApi(Construct):
    def __init__(
        self,
        scope: Construct,
        id: str,
        *,
        api_name: str,
        function_name: str,
        websocket: WebSocketConfig,
        platform: FunctionPlatform,
        layers: Sequence[PythonLayer],
        authorizer: lambda_.IFunction,
        environment: dict[str, str],
    ) -> None:
        super().__init__(scope, id)
        self.function = SluiceFunction(
            self,
            "Handler",
            function_name=function_name,
            handler="sluice.handlers.websocket.handler",
            description="Predictions over a WebSocket: answers each message on its connection",
            platform=platform,
            layers=layers,
            memory_mb=websocket.memory_mb,
            timeout=Duration.seconds(websocket.timeout_s),
            reserved_concurrency=websocket.reserved_concurrency,
            environment=environment,
        )
        integration = integrations.WebSocketLambdaIntegration(
            "Messages", self.function.function, timeout=Duration.seconds(websocket.timeout_s)
        )
        self.api = apigwv2.WebSocketApi(
            self,
            "Api",
            api_name=api_name,
            description="sluice: predictions over a WebSocket",
            connect_route_options=apigwv2.WebSocketRouteOptions(
                integration=integration,
                # A key may come in any of three headers (Authorization, x-api-key, or a
                # bearer.<key> subprotocol): no identity source, so each reaches the function.
                authorizer=authorizers.WebSocketLambdaAuthorizer(
                    "KeyAuthorizer", authorizer, identity_source=[]
                ),
            ),
            default_route_options=apigwv2.WebSocketRouteOptions(integration=integration),
            disconnect_route_options=apigwv2.WebSocketRouteOptions(integration=integration),
        )
        access_logs = platform.logs.group(self, "AccessLogs")
        self.stage = apigwv2.WebSocketStage(
            self,
            "Stage",
            web_socket_api=self.api,
            stage_name=websocket.stage_name,
            auto_deploy=True,
            detailed_metrics_enabled=True,
            throttle=apigwv2.ThrottleSettings(
                rate_limit=websocket.rate_limit, burst_limit=websocket.burst_limit
            ),
            access_log_settings=_AccessLogs(access_logs),
        )
        # Answers go to connections of this API and stage alone: post, and close (a revoked key).
        connections = [
            Stack.of(self).format_arn(
                service="execute-api",
                resource=self.api.api_id,
                resource_name=f"{websocket.stage_name}/{method}/@connections/*",
                arn_format=ArnFormat.SLASH_RESOURCE_NAME,
            )
            for method in ("POST", "DELETE")
        ]
        self.function.role.add_to_principal_policy(
            iam.PolicyStatement(actions=["execute-api:ManageConnections"], resources=connections)
        )
        for arn in connections:
            acknowledge(
                self.function,
                wildcard_resource(self, arn),
                "Connection ids are made by API Gateway at run time; the grant is confined to "
                "this API's stage and to posting to, or closing, a connection.",
            )
        acknowledge(
            self.api,
            "AwsSolutions-APIG4",
            "Every route is authorized: $connect by the API-key REQUEST authorizer; API Gateway "
            "accepts $default and $disconnect only on a connection $connect allowed.",
        )
