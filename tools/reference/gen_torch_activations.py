"""Writes tests/data/reference/torch_activations.json: PyTorch's forward and backward of the
piecewise activations (leaky_relu, elu, selu, celu, hardswish, hardsigmoid, mish, hardtanh, relu6)
on CPU in f32, bf16 and f16, for tests/ops/test_activation_torch.cpp. Inputs: a grid over
[-10, 10] with the kinks (0, +-1.5, +-3, +-6) and special values (+-0, +-inf, NaN); the gradient
flowing in is a fixed pseudo-random tensor. Values are stored as bit patterns (hex strings), so
NaN, inf and -0 survive JSON. Run once by hand; the tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_activations.py tests/data/reference
"""
import json
import math
import sys

import torch
import torch.nn.functional as F

ACTS = {
    "leaky_relu_0.01": lambda x: F.leaky_relu(x, 0.01),
    "leaky_relu_0.2": lambda x: F.leaky_relu(x, 0.2),
    "elu_1": lambda x: F.elu(x, 1.0),
    "elu_0.5": lambda x: F.elu(x, 0.5),
    "selu": F.selu,
    "celu_1": lambda x: F.celu(x, 1.0),
    "celu_0.5": lambda x: F.celu(x, 0.5),
    "hardswish": F.hardswish,
    "hardsigmoid": F.hardsigmoid,
    "mish": F.mish,
    "hardtanh": F.hardtanh,
    "hardtanh_-2_0.5": lambda x: F.hardtanh(x, -2.0, 0.5),
    "relu6": F.relu6,
}


def inputs():
    grid = [i / 8.0 for i in range(-80, 81)]  # -10 .. 10, step 1/8: the kinks are on it
    odd = [0.123, -0.123, -1.19, -1.2, 2.99, -2.99, 3.01, -3.01, 5.99, 6.01, 20.5, -20.5, 100.0, -100.0,
           1e-3, -1e-3, 1e-20, -1e-20, -0.0, math.inf, -math.inf, math.nan]
    return torch.tensor(grid + odd, dtype=torch.float64)


def bits(t):
    if t.dtype == torch.float32:
        return [format(v & 0xFFFFFFFF, "08x") for v in t.view(torch.int32).tolist()]
    return [format(v & 0xFFFF, "04x") for v in t.view(torch.int16).tolist()]


def main(out_dir):
    x64 = inputs()
    gen = torch.Generator().manual_seed(7)
    g64 = torch.randn(x64.shape, generator=gen, dtype=torch.float64)
    out = {"torch": torch.__version__, "inputs": {}, "cases": {}}
    for dname, dt in (("f32", torch.float32), ("bf16", torch.bfloat16), ("f16", torch.float16)):
        x = x64.to(dt)
        g = g64.to(dt)
        out["inputs"][dname] = {"x": bits(x), "g": bits(g)}
        for name, f in ACTS.items():
            xr = x.clone().requires_grad_(True)
            y = f(xr)
            (dx,) = torch.autograd.grad(y, xr, g)
            out["cases"][f"{name}/{dname}"] = {"y": bits(y.detach()), "dx": bits(dx)}
    with open(f"{out_dir}/torch_activations.json", "w") as fh:
        json.dump(out, fh, separators=(",", ":"))
        fh.write("\n")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
