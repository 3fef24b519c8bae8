"""The CDK app that `cdk deploy --all` ships: storage, API, batch, endpoints, observability."""
