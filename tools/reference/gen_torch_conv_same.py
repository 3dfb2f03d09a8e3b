"""Writes tests/data/reference/torch_conv_same.json: PyTorch's conv2d with padding="same" (odd and
even kernels, dilation, groups) on f64 inputs, with the gradients of sum(y * r) for a fixed r with
respect to the input, weight and bias, for tests/ops/test_conv_same.cpp. Run once by hand; the
tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_conv_same.py tests/data/reference
"""
import json
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(5)
D = torch.float64
cases = []
# in, out, kernel, dilation, groups, H, W
for cin, cout, k, d, g, h, w in ((3, 4, (3, 3), (1, 1), 1, 6, 5), (2, 4, (2, 4), (1, 1), 2, 5, 7),
                                 (4, 2, (3, 2), (2, 3), 1, 7, 8), (3, 3, (4, 1), (1, 1), 3, 6, 4)):
    x = torch.randn(2, cin, h, w, dtype=D, requires_grad=True)
    wt = torch.randn(cout, cin // g, *k, dtype=D, requires_grad=True)
    b = torch.randn(cout, dtype=D, requires_grad=True)
    y = F.conv2d(x, wt, b, padding="same", dilation=d, groups=g)
    r = torch.randn(y.shape, dtype=D)
    gx, gw, gb = torch.autograd.grad((y * r).sum(), (x, wt, b))
    flat = lambda t: t.detach().reshape(-1).tolist()
    cases.append({"x_shape": list(x.shape), "w_shape": list(wt.shape), "dilation": list(d), "groups": g,
                  "x": flat(x), "w": flat(wt), "b": flat(b), "y_shape": list(y.shape), "y": flat(y), "r": flat(r),
                  "gx": flat(gx), "gw": flat(gw), "gb": flat(gb)})
with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_conv_same.json", "w") as fh:
    json.dump({"torch": torch.__version__, "cases": cases}, fh, separators=(",", ":"))
    fh.write("\n")
