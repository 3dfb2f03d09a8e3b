"""Writes tests/data/reference/torch_instance_norm.json: torch.nn.InstanceNorm1d / InstanceNorm2d
(affine or not, batched and unbatched, another eps) in f64, with the gradients of sum(y * r) with
respect to x and the affine parameters, for tests/nn/test_instance_norm.cpp. Run once by hand; the
tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_instance_norm.py tests/data/reference
"""
import json
import sys

import torch

torch.manual_seed(43)
D = torch.float64
flat = lambda t: t.detach().reshape(-1).tolist()

# name, layer, shape, affine, eps
CASES = (
    ("in1d", "InstanceNorm1d", [2, 3, 5], False, 1e-5),
    ("in1d_affine_unbatched", "InstanceNorm1d", [3, 6], True, 1e-5),
    ("in2d_affine", "InstanceNorm2d", [2, 4, 3, 3], True, 1e-5),
    ("in2d_eps", "InstanceNorm2d", [1, 2, 4, 2], False, 1e-3),
    ("in2d_affine_unbatched", "InstanceNorm2d", [2, 3, 2], True, 1e-5),
)

cases = []
for name, layer, shape, affine, eps in CASES:
    C = shape[0] if len(shape) == (2 if layer == "InstanceNorm1d" else 3) else shape[1]
    m = getattr(torch.nn, layer)(C, eps=eps, affine=affine).double()
    if affine:
        with torch.no_grad():
            m.weight.copy_(torch.randn(C, dtype=D))
            m.bias.copy_(torch.randn(C, dtype=D))
    x = (torch.randn(*shape, dtype=D) * 2 + 0.5).requires_grad_(True)
    y = m(x)
    r = torch.randn(y.shape, dtype=D)
    wrt = [x] + ([m.weight, m.bias] if affine else [])
    grads = torch.autograd.grad((y * r).sum(), wrt)
    cases.append({"name": name, "layer": layer, "channels": C, "affine": affine, "eps": eps, "shape": shape,
                  "x": flat(x), "y": flat(y), "r": flat(r), "grad_x": flat(grads[0]),
                  "weight": flat(m.weight) if affine else None, "bias": flat(m.bias) if affine else None,
                  "grad_weight": flat(grads[1]) if affine else None, "grad_bias": flat(grads[2]) if affine else None})
    print(name, shape)

with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_instance_norm.json", "w") as fh:
    json.dump({"torch": torch.__version__, "cases": cases}, fh, separators=(",", ":"))
    fh.write("\n")
print(len(cases), "cases")
