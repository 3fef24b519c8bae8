"""sluice: serverless model inference on AWS, with a local twin."""

__version__ = "0.1.0"
