"""The role that signs uploads' presigned POSTs (`sluice.storage.uploads.TenantSigner`).

A presigned POST acts with the permissions of whoever signed it. The API function's own role
may write anywhere under the store's prefix, so the forms are signed instead with credentials
of this role, assumed per tenant with the `tenant` session tag (as the tenant registry role
is: `infra.constructs.registry_access`): it may put objects under
`<prefix>uploads/tenants/${aws:PrincipalTag/tenant}/` and do nothing else, so a form signed
for tenant A cannot write a byte outside A's uploads, whatever its policy says.
"""

from __future__ import annotations

from aws_cdk import aws_iam as iam
from aws_cdk import aws_s3 as s3
from constructs import Construct

from infra.constructs.registry_access import TENANT_TAG, assume_tagged_statement, tenant_tagged_role
from infra.nag import acknowledge, wildcard_resource
from infra.naming import tenant_prefix


class UploadSignerRole(Construct):
    def __init__(
        self, scope: Construct, id: str, *, bucket: s3.IBucket, uploads_prefix: str, caller: iam.IRole
    ) -> None:
        super().__init__(scope, id)
        self.role = tenant_tagged_role(
            self,
            caller,
            description="Signs upload forms: puts objects under the tagged tenant's uploads prefix only",
        )
        tenant = f"${{aws:PrincipalTag/{TENANT_TAG}}}"
        objects = bucket.arn_for_objects(f"{tenant_prefix(uploads_prefix, tenant)}*")
        self.role.add_to_principal_policy(
            iam.PolicyStatement(actions=["s3:PutObject"], resources=[objects])
        )
        acknowledge(
            self.role,
            wildcard_resource(self, objects),
            "An upload's key is made at run time (<tenant>/<id>/body); PutObject only, and only "
            "under the uploads prefix of the tenant named by the session tag.",
        )
        # A policy of its own: CDK would fold it into the tenant registry role's statement.
        iam.Policy(
            self,
            "Assume",
            statements=[assume_tagged_statement(self.role)],
        ).attach_to_role(caller)
