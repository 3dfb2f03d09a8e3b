"""Writes tests/data/reference/torch_max_unpool.json: torch.nn.MaxPool1d/2d/3d(return_indices=True) and
MaxUnpool1d/2d/3d on f64 inputs of distinct values (no two windows pick one element, where PyTorch's
order is unspecified): the pooled values, the indices, the unpooled output (default and given
output_size) and the gradient of sum(unpooled * r) w.r.t. the pooled values, for
tests/nn/test_small_layers.cpp. Run once by hand; the tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_max_unpool.py tests/data/reference
"""
import json
import sys

import torch

torch.manual_seed(45)
D = torch.float64
flat = lambda t: t.detach().reshape(-1).tolist()
cases = []
# (dims, kernel, stride, padding, input shape, output_size or None)
for dims, k, s, p, shape, size in ((2, 2, 2, 0, (2, 3, 4, 6), None), (2, 3, 3, 1, (1, 2, 7, 8), (7, 8)),
                                   (2, (2, 3), (2, 3), 0, (1, 1, 5, 7), (5, 7)), (2, 2, 2, 0, (3, 4, 4), None),
                                   (1, 2, 2, 0, (2, 3, 9), None), (1, 3, 3, 1, (1, 2, 10), (11,)),
                                   (3, 2, 2, 0, (1, 2, 4, 4, 6), None), (3, 3, 3, 1, (1, 1, 5, 6, 7), (5, 6, 7)),
                                   (3, (2, 3, 2), (2, 3, 2), 0, (2, 4, 6, 5), (4, 6, 5))):
    pool = {1: torch.nn.MaxPool1d, 2: torch.nn.MaxPool2d, 3: torch.nn.MaxPool3d}[dims](k, s, p, return_indices=True)
    unpool = {1: torch.nn.MaxUnpool1d, 2: torch.nn.MaxUnpool2d, 3: torch.nn.MaxUnpool3d}[dims](k, s, p)
    x = torch.randperm(torch.Size(shape).numel(), dtype=D).reshape(shape) / 7.0 - 3.0
    y, i = pool(x)
    y = y.detach().requires_grad_(True)
    u = unpool(y, i, output_size=list(size) if size else None)
    r = torch.randn(u.shape, dtype=D)
    (g,) = torch.autograd.grad((u * r).sum(), [y])
    cases.append({"dims": dims, "kernel": list(k) if isinstance(k, tuple) else [k] * dims,
                  "stride": list(s) if isinstance(s, tuple) else [s] * dims, "padding": [p] * dims,
                  "output_size": list(size) if size else None, "x_shape": list(shape), "x": flat(x),
                  "y_shape": list(y.shape), "y": flat(y), "indices": flat(i), "u_shape": list(u.shape), "u": flat(u),
                  "r": flat(r), "grad": flat(g)})
# max_pool3d's indices alone where windows overlap: ties (small integers), dilation, ceil_mode
index_cases = []
for k, s, p, d, ceil, shape in ((3, 2, 1, 1, False, (1, 2, 5, 6, 7)), (2, 1, 0, 2, False, (1, 1, 5, 5, 6)),
                                ((2, 3, 2), (2, 2, 3), (1, 1, 0), 1, True, (2, 1, 6, 7, 5))):
    x = torch.randint(0, 3, shape).to(D)
    y, i = torch.nn.functional.max_pool3d(x, k, s, p, d, ceil_mode=ceil, return_indices=True)
    trip = lambda v: list(v) if isinstance(v, tuple) else [v] * 3
    index_cases.append({"kernel": trip(k), "stride": trip(s), "padding": trip(p), "dilation": trip(d),
                        "ceil_mode": ceil, "x_shape": list(shape), "x": flat(x), "y_shape": list(y.shape),
                        "y": flat(y), "indices": flat(i)})
with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_max_unpool.json", "w") as fh:
    json.dump({"torch": torch.__version__, "cases": cases, "index_cases": index_cases}, fh, separators=(",", ":"))
    fh.write("\n")
print(len(cases), "cases,", len(index_cases), "index cases")
