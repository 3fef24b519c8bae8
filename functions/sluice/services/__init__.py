"""The transport-agnostic core: the API, the CLI and the Lambda tasks all call these."""
