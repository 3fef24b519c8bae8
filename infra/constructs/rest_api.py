"""The REST API (API Gateway) in front of the API function, behind the API-key authorizer.

Why a REST API and not an HTTP API: per-tenant throttling and quotas need usage plans, and
X-Ray tracing of the gateway, both of which only REST APIs have.

Request size: REST APIs take bodies up to 10 MB, but a synchronous Lambda invoke carries at
most 6 MB with its envelope, and every body arrives base64-encoded (`BINARY_MEDIA_TYPES`), a
third larger: about 4.4 MB of body is the real limit, and between that and 10 MB the invoke
itself fails. The app's own 413 above `SLUICE_MAX_REQUEST_BYTES` (just under 6 MB) holds for
the local service and direct invokes. Larger inputs go through S3 as batch jobs.
"""

from __future__ import annotations

from collections.abc import Mapping

from aws_cdk import Duration
from aws_cdk import aws_apigateway as apigw
from aws_cdk import aws_lambda as lambda_
from constructs import Construct

from infra.config import PlanLimits
from infra.constructs.logs import CALLER_FIELDS, REQUEST_FIELDS, LogRetention, access_log_format
from infra.nag import acknowledge

# One JSON object per request.
ACCESS_LOG_FIELDS = {
    **REQUEST_FIELDS,
    "httpMethod": "$context.httpMethod",
    "path": "$context.path",
    "status": "$context.status",
    "protocol": "$context.protocol",
    "responseLength": "$context.responseLength",
    "responseLatency": "$context.responseLatency",
    "integrationLatency": "$context.integration.latency",
    **CALLER_FIELDS,
    "xrayTraceId": "$context.xrayTraceId",
}
DEFAULT_PLAN = "_default"  # the authorizer's name for tenants without a plan of their own
# Request bodies API Gateway passes to the function base64-encoded, byte for byte (the function
# decodes them): ONNX files for POST /api/v1/models/{name}/versions, and v2 bodies with binary
# tensors. `*/*` because tritonclient's synchronous client sends binary tensors with no
# Content-Type at all, which API Gateway would read as JSON text and mangle. The price: JSON
# bodies arrive base64-encoded too, a third larger, so through API Gateway a body over about
# 4.4 MB fails at the invoke (module docstring) instead of reaching the function. It also lets
# binary responses (the function returns them base64-encoded) go back as bytes whatever the
# client's Accept header says.
BINARY_MEDIA_TYPES = ["application/octet-stream", "application/onnx", "*/*"]
API_GATEWAY_TIMEOUT = Duration.seconds(29)
# Gateway errors in the API's own error shape, so clients parse one format:
# (id, response type, status (None: the gateway's), the API's error code).
GATEWAY_RESPONSES = (
    ("MissingKey", apigw.ResponseType.UNAUTHORIZED, "401", "unauthenticated"),
    ("BadKey", apigw.ResponseType.ACCESS_DENIED, "401", "unauthenticated"),
    ("Throttled", apigw.ResponseType.THROTTLED, "429", "throttled"),
    ("OverQuota", apigw.ResponseType.QUOTA_EXCEEDED, "429", "quota_exceeded"),
    ("TooLarge", apigw.ResponseType.REQUEST_TOO_LARGE, "413", "payload_too_large"),
    ("Timeout", apigw.ResponseType.INTEGRATION_TIMEOUT, "504", "deadline_exceeded"),
    ("Other5xx", apigw.ResponseType.DEFAULT_5_XX, None, "unavailable"),
)


class RestApi:
    """The API ("Api"), its access logs ("AccessLogs") and the key authorizer
    ("KeyAuthorizer"), built into `scope` (the API stack)."""

    def __init__(
        self,
        scope: Construct,
        *,
        rest_api_name: str,
        stage_name: str,
        rate_limit: float,
        burst_limit: int,
        execution_log_level: str,
        logs: LogRetention,
        authorizer: lambda_.IFunction,
        handler: lambda_.IFunction,
    ) -> None:
        access_logs = logs.group(scope, "AccessLogs")
        execution_logs = execution_log_level != "OFF"
        self.api = api = apigw.RestApi(
            scope,
            "Api",
            rest_api_name=rest_api_name,
            description="sluice: predictions, models, deployments and batch jobs",
            endpoint_types=[apigw.EndpointType.REGIONAL],
            # Usage plans are chosen by the authorizer, never by a client-sent x-api-key.
            api_key_source_type=apigw.ApiKeySourceType.AUTHORIZER,
            binary_media_types=BINARY_MEDIA_TYPES,
            cloud_watch_role=False,
            deploy_options=apigw.StageOptions(
                stage_name=stage_name,
                tracing_enabled=True,
                metrics_enabled=True,
                throttling_rate_limit=rate_limit,
                throttling_burst_limit=burst_limit,
                access_log_destination=apigw.LogGroupLogDestination(access_logs),
                access_log_format=access_log_format(ACCESS_LOG_FIELDS),
                logging_level=apigw.MethodLoggingLevel[execution_log_level],
                data_trace_enabled=False,
            ),
        )
        key_authorizer = apigw.RequestAuthorizer(
            scope,
            "KeyAuthorizer",
            handler=authorizer,
            # A key may come in either of two headers, and API Gateway only caches on
            # sources that are all present: no gateway cache, the function caches instead.
            identity_sources=[],
            results_cache_ttl=Duration.seconds(0),
        )
        integration = apigw.LambdaIntegration(handler, proxy=True, timeout=API_GATEWAY_TIMEOUT)
        method_options = apigw.MethodOptions(authorizer=key_authorizer, api_key_required=True)
        api.root.add_method("ANY", integration, authorizer=key_authorizer, api_key_required=True)
        api.root.add_proxy(
            default_integration=integration, any_method=True, default_method_options=method_options
        )
        self._console(integration)
        for id, kind, status, code in GATEWAY_RESPONSES:
            api.add_gateway_response(
                id,
                type=kind,
                status_code=status,
                templates={
                    "application/json": f'{{"error":"{code}","message":$context.error.messageString}}'
                },
            )
        self._acknowledge(execution_logs)

    def _console(self, integration: apigw.Integration) -> None:
        """The web console's static files (docs/console.md): `GET /console[/…]` reaches the
        API function without the key authorizer, as the page must load before its user signs
        in; the pages then call the routes above with the user's key. The function answers
        only GET and HEAD there, reads no body and serves only the built files."""
        console = self.api.root.add_resource("console")
        public = {"authorization_type": apigw.AuthorizationType.NONE, "api_key_required": False}
        methods = [
            console.add_method("GET", integration, **public),
            console.add_resource("{proxy+}").add_method("GET", integration, **public),
        ]
        for method in methods:
            acknowledge(
                method,
                "AwsSolutions-APIG4",
                "The console's static files are public by design (the page loads before its "
                "user signs in with an API key); they hold no data, and every API call the "
                "page makes goes through the key authorizer.",
            )

    def add_usage_plans(
        self, plans: Mapping[str, PlanLimits], *, name_prefix: str, key_prefix: str
    ) -> None:
        """One usage plan per tenant in `plans` (`DEFAULT_PLAN`: everyone else's), named
        `<name_prefix><tenant>`.

        The authorizer returns `<key_prefix><tenant>` (or `<key_prefix>_default`) as the
        usage identifier; these keys only name a plan and are never accepted from clients.
        """
        for tenant, limits in plans.items():
            plan = self.api.add_usage_plan(
                f"Plan-{tenant}",
                name=f"{name_prefix}{tenant}",
                description=f"Throttling and quota for tenant {tenant}"
                if tenant != DEFAULT_PLAN
                else "Throttling and quota for tenants without a plan of their own",
                throttle=apigw.ThrottleSettings(
                    rate_limit=limits.rate_limit, burst_limit=limits.burst_limit
                ),
                quota=apigw.QuotaSettings(
                    limit=limits.quota, period=apigw.Period[limits.quota_period]
                )
                if limits.quota
                else None,
            )
            plan.add_api_stage(stage=self.api.deployment_stage)
            key = self.api.add_api_key(
                f"PlanKey-{tenant}",
                api_key_name=f"{name_prefix}{tenant}",
                value=f"{key_prefix}{tenant}",
            )
            plan.add_api_key(key)

    def _acknowledge(self, execution_logs: bool) -> None:
        acknowledge(
            self.api,
            "AwsSolutions-APIG2",
            "Requests are validated by the API function against each model version's "
            "signature (names, dtypes, shapes, sizes) with a precise 4xx body; a gateway "
            "model would duplicate that check less precisely.",
        )
        acknowledge(
            self.api,
            "AwsSolutions-APIG3",
            "No WAF by default: prediction bodies (up to 6 MB) exceed what WAF's managed rule "
            "sets inspect (their body-size rule blocks over 8 KB), and callers are already "
            "authenticated and throttled per tenant. Associate a web ACL where policy asks.",
        )
        acknowledge(
            self.api,
            "AwsSolutions-COG4",
            "Callers are machines holding sluice API keys, checked by the REQUEST authorizer; "
            "there is no Cognito user pool.",
        )
        if not execution_logs:
            acknowledge(
                self.api,
                "AwsSolutions-APIG6",
                "Execution logs need the account's API Gateway CloudWatch role, a per-region "
                "setting this app should not own; structured access logs, X-Ray and the "
                "function logs cover requests. Set api.execution_log_level once the role exists.",
            )
