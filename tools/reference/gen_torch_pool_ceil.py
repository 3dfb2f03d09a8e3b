"""Writes tests/data/reference/torch_pool_ceil.json: PyTorch's max_pool2d and avg_pool2d with
ceil_mode (with and without padding, dilation, count_include_pad), and avg_pool2d with
divisor_override (ceil_mode on and off), on an f64 input of odd sizes,
and the input gradient of sum(y * r) for a fixed r, for tests/ops/test_pool_ceil.cpp. Run once by
hand; the tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_pool_ceil.py tests/data/reference
"""
import json
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(3)
x = torch.randn(2, 3, 7, 6, dtype=torch.float64)
configs = [
    # kind, kernel, stride, padding, dilation, count_include_pad
    ("max", [2, 2], [2, 2], [0, 0], [1, 1], True),
    ("max", [3, 3], [2, 2], [1, 1], [1, 1], True),
    ("max", [3, 2], [2, 3], [1, 0], [1, 1], True),
    ("max", [2, 3], [3, 2], [0, 1], [2, 1], True),
    ("avg", [2, 2], [2, 2], [0, 0], [1, 1], True),
    ("avg", [3, 3], [2, 2], [1, 1], [1, 1], True),
    ("avg", [3, 3], [2, 2], [1, 1], [1, 1], False),
    ("avg", [3, 2], [2, 3], [1, 0], [1, 1], True),
    ("avg", [4, 4], [3, 3], [2, 2], [1, 1], True),
]
cases = []
for kind, k, s, p, d, inc in configs:
    xr = x.clone().requires_grad_(True)
    if kind == "max":
        y = F.max_pool2d(xr, k, s, p, d, ceil_mode=True)
    else:
        y = F.avg_pool2d(xr, k, s, p, ceil_mode=True, count_include_pad=inc)
    r = torch.randn(y.shape, dtype=torch.float64)
    (g,) = torch.autograd.grad((y * r).sum(), xr)
    floor_shape = list((F.max_pool2d(x, k, s, p, d) if kind == "max" else F.avg_pool2d(x, k, s, p)).shape)
    cases.append({"kind": kind, "kernel": k, "stride": s, "padding": p, "dilation": d, "count_include_pad": inc,
                  "shape": list(y.shape), "floor_shape": floor_shape, "y": y.detach().reshape(-1).tolist(),
                  "r": r.reshape(-1).tolist(), "grad": g.reshape(-1).tolist()})
# divisor_override (appended: the cases above keep their random draws): floor and ceil mode.
for k, s_, p, ceil, div in (([3, 3], [2, 2], [1, 1], False, 5), ([2, 3], [2, 2], [0, 1], True, 4),
                            ([3, 2], [1, 2], [1, 0], False, 1)):
    xr = x.clone().requires_grad_(True)
    y = F.avg_pool2d(xr, k, s_, p, ceil_mode=ceil, divisor_override=div)
    r = torch.randn(y.shape, dtype=torch.float64)
    (g,) = torch.autograd.grad((y * r).sum(), xr)
    cases.append({"kind": "avg", "kernel": k, "stride": s_, "padding": p, "dilation": [1, 1], "count_include_pad": True,
                  "ceil_mode": ceil, "divisor_override": div, "shape": list(y.shape),
                  "floor_shape": list(F.avg_pool2d(x, k, s_, p).shape),
                  "y": y.detach().reshape(-1).tolist(), "r": r.reshape(-1).tolist(), "grad": g.reshape(-1).tolist()})
with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_pool_ceil.json", "w") as fh:
    json.dump({"torch": torch.__version__, "x": x.reshape(-1).tolist(), "x_shape": list(x.shape), "cases": cases}, fh,
              separators=(",", ":"))
    fh.write("\n")
