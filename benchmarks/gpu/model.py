"""A Triton python-backend model that runs a float32 MLP with PyTorch on the GPU.

INPUT0 FP32 [batch, FEATURES] -> OUTPUT0 FP32 [batch, FEATURES], through
FEATURES -> HIDDEN -> HIDDEN -> FEATURES linear layers with ReLU between them (1024/4096:
25.2 M parameters, 100.7 MB of float32 weights). Weights are random but seeded, so the
benchmark can build the same network in its own process (the PyTorch floor) and check the
server's answers against it. Triton's dynamic batcher hands `execute` several requests at
once; they run as one forward pass.

Outside Triton (no `triton_python_backend_utils`), only `build_mlp` is of use.
"""

from __future__ import annotations

import itertools
import json
import warnings

import numpy as np

try:  # present only inside Triton's python backend stub
    import triton_python_backend_utils as pb_utils
except ImportError:  # imported by the benchmark for build_mlp
    pb_utils = None

FEATURES = 1024
HIDDEN = 4096
SEED = 0


def build_mlp(
    features: int = FEATURES, hidden: int = HIDDEN, device: str = "cuda", seed: int = SEED
):
    import torch

    generator = torch.Generator().manual_seed(seed)
    dims = [features, hidden, hidden, features]
    layers: list = []
    for i, (n_in, n_out) in enumerate(itertools.pairwise(dims)):
        linear = torch.nn.Linear(n_in, n_out)
        with torch.no_grad():
            linear.weight.copy_(torch.randn(n_out, n_in, generator=generator) / n_in**0.5)
            linear.bias.copy_(torch.randn(n_out, generator=generator) * 0.01)
        layers.append(linear)
        if i < len(dims) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers).to(device).eval()


def pick_device(wanted: str = "auto") -> str:
    import torch

    if wanted == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    return wanted


class TritonPythonModel:
    def initialize(self, args):
        import torch

        config = json.loads(args["model_config"])
        params = {k: v.get("string_value", "") for k, v in config.get("parameters", {}).items()}
        features = int(params.get("features", FEATURES))
        hidden = int(params.get("hidden", HIDDEN))
        self.device = pick_device(params.get("device", "auto"))
        self.torch = torch
        self.model = build_mlp(features, hidden, self.device)
        # first CUDA kernels (cuBLAS handles, workspace) before traffic
        with torch.inference_mode():
            for rows in (1, 16, 64):
                self.model(torch.zeros(rows, features, device=self.device))
        if self.device.startswith("cuda"):
            torch.cuda.synchronize()
        warnings.filterwarnings("ignore", message=".*not writable.*")
        pb_utils.Logger.log_info(
            f"mlp {features}->{hidden}->{hidden}->{features} on {self.device}, torch {torch.__version__}, numpy {np.__version__}"
        )

    def execute(self, requests):
        torch = self.torch
        arrays = [pb_utils.get_input_tensor_by_name(r, "INPUT0").as_numpy() for r in requests]
        sizes = [a.shape[0] for a in arrays]
        x = arrays[0] if len(arrays) == 1 else np.concatenate(arrays)
        with torch.inference_mode():
            y = self.model(torch.from_numpy(x).to(self.device)).cpu().numpy()
        responses = []
        start = 0
        for size in sizes:
            out = pb_utils.Tensor("OUTPUT0", np.ascontiguousarray(y[start : start + size]))
            responses.append(pb_utils.InferenceResponse(output_tensors=[out]))
            start += size
        return responses

    def finalize(self):
        self.model = None
