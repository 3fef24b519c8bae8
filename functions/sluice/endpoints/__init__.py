"""SageMaker endpoints and Triton model repositories: packaging, lifecycle, the local Triton."""
