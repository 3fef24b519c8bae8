"""Tensor encodings: v2 datatypes, JSON tensors and plain-JSON conversion of outputs."""
