"""Cheaper variants of an ONNX version, measured against it: `sluice optimize` and its API route."""
