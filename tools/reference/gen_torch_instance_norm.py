"""Writes tests/data/reference/torch_instance_norm.json: torch.nn.InstanceNorm1d / InstanceNorm2d
(affine or not, batched and unbatched, another eps; then track_running_stats: two training steps and eval) in f64, with the gradients of sum(y * r) with
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

# Appended later: track_running_stats. Two training steps on two batches (their outputs and the
# running statistics after them), then eval on a third batch with the running statistics (its output
# and the gradients of sum(y * r) with respect to x and the affine parameters).
# name, layer, shape, affine, momentum
TRACKING = (
    ("in2d_tracking_affine", "InstanceNorm2d", [3, 2, 4, 3], True, 0.1),
    ("in1d_tracking_momentum", "InstanceNorm1d", [2, 3, 6], False, 0.3),
    ("in2d_tracking_unbatched", "InstanceNorm2d", [2, 3, 3], True, 0.2),
)
tracking = []
for name, layer, shape, affine, momentum in TRACKING:
    C = shape[0] if len(shape) == (2 if layer == "InstanceNorm1d" else 3) else shape[1]
    m = getattr(torch.nn, layer)(C, affine=affine, momentum=momentum, track_running_stats=True).double()
    if affine:
        with torch.no_grad():
            m.weight.copy_(torch.randn(C, dtype=D))
            m.bias.copy_(torch.randn(C, dtype=D))
    steps = []
    for _ in range(2):
        x = torch.randn(*shape, dtype=D) * 1.5 + 0.7
        y = m(x)
        steps.append({"x": flat(x), "y": flat(y), "running_mean": flat(m.running_mean), "running_var": flat(m.running_var)})
    m.eval()
    x = (torch.randn(*shape, dtype=D) + 0.3).requires_grad_(True)
    y = m(x)
    r = torch.randn(y.shape, dtype=D)
    wrt = [x] + ([m.weight, m.bias] if affine else [])
    grads = torch.autograd.grad((y * r).sum(), wrt)
    tracking.append({"name": name, "layer": layer, "channels": C, "affine": affine, "momentum": momentum,
                     "shape": shape, "steps": steps, "weight": flat(m.weight) if affine else None,
                     "bias": flat(m.bias) if affine else None, "eval_x": flat(x), "eval_y": flat(y), "r": flat(r),
                     "grad_x": flat(grads[0]), "grad_weight": flat(grads[1]) if affine else None,
                     "grad_bias": flat(grads[2]) if affine else None,
                     "num_batches_tracked": int(m.num_batches_tracked)})
    print(name, shape)

with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_instance_norm.json", "w") as fh:
    json.dump({"torch": torch.__version__, "cases": cases, "tracking": tracking}, fh, separators=(",", ":"))
    fh.write("\n")
print(len(cases), "cases")
