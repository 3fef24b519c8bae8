"""Models from other frameworks to ONNX, on the user's machine (`sluice models push`)."""
