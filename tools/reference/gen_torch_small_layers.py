"""Writes tests/data/reference/torch_small_layers.json: torch.nn.LPPool1d / LPPool2d (norm types 1,
1.5, 2 and 3, strides, ceil_mode, unbatched input), ChannelShuffle and Softmax2d on f64 inputs: the
output and the gradient of sum(out * r) w.r.t. the input, for tests/nn/test_small_layers.cpp. Inputs
are positive for the odd and fractional norm types (a negative window sum is NaN there). Run once
by hand; the tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_small_layers.py tests/data/reference
"""
import json
import sys

import torch

torch.manual_seed(44)
torch.set_num_threads(1)
D = torch.float64
flat = lambda t: t.detach().reshape(-1).tolist()
cases = []


def add(kind, opts, module, shape, positive):
    x = torch.randn(shape, dtype=D)
    if positive:
        x = x.abs() + 0.1
    x.requires_grad_(True)
    y = module(x)
    r = torch.randn(y.shape, dtype=D)
    (g,) = torch.autograd.grad((y * r).sum(), [x])
    cases.append({"kind": kind, "options": opts, "x_shape": list(x.shape), "x": flat(x), "out_shape": list(y.shape),
                  "out": flat(y), "r": flat(r), "grad": flat(g)})


for p, k, s, ceil, shape in ((2.0, 3, None, False, (2, 3, 10)), (1.0, 2, 1, False, (1, 2, 7)),
                             (3.0, 3, 2, True, (2, 2, 8)), (1.5, 4, 3, True, (3, 9))):
    add("lp_pool1d", {"norm_type": p, "kernel": k, "stride": s or 0, "ceil_mode": ceil},
        torch.nn.LPPool1d(p, k, stride=s, ceil_mode=ceil), shape, p != 2.0)
for p, k, s, ceil, shape in ((2.0, (3, 3), None, False, (2, 2, 7, 8)), (1.5, (2, 3), (1, 2), False, (1, 3, 6, 7)),
                             (2.0, (3, 2), (2, 2), True, (2, 1, 8, 7)), (3.0, (2, 2), None, True, (2, 5, 5))):
    add("lp_pool2d", {"norm_type": p, "kernel": list(k), "stride": list(s) if s else [0, 0], "ceil_mode": ceil},
        torch.nn.LPPool2d(p, k, stride=s, ceil_mode=ceil), shape, p != 2.0)
for groups, shape in ((2, (2, 4, 3)), (3, (1, 6, 2, 2)), (1, (2, 3, 4)), (4, (1, 8, 1, 2, 2))):
    add("channel_shuffle", {"groups": groups}, torch.nn.ChannelShuffle(groups), shape, False)
for shape in ((2, 3, 4, 5), (3, 2, 2)):
    add("softmax2d", {}, torch.nn.Softmax2d(), shape, False)
with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_small_layers.json", "w") as fh:
    json.dump({"torch": torch.__version__, "cases": cases}, fh, separators=(",", ":"))
    fh.write("\n")
print(len(cases), "cases")
