"""Writes tests/data/reference/torch_pad.json: torch.nn.functional.pad in every mode (constant with a
value and negative amounts, reflect, replicate, circular; 1, 2 and 3 padded dims) and nn.Conv2d with
padding_mode reflect / replicate / circular (explicit padding, stride, dilation, and padding="same"
with an even kernel), on f64 inputs, with the gradients of sum(y * r) for a fixed r, for
tests/ops/test_pad.cpp. Run once by hand; the tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_pad.py tests/data/reference
"""
import json
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(11)
D = torch.float64
flat = lambda t: t.detach().reshape(-1).tolist()

pads = []
# shape, pad, mode, value
for shape, amounts, mode, value in (
        ((2, 3, 4, 5), (1, 2, 0, 3), "constant", 0.0),
        ((2, 3, 4, 5), (-1, 2, 1, -2), "constant", 1.5),
        ((3, 6), (2, 1), "constant", -2.0),
        ((2, 3, 4, 5), (2, 3, 3, 1), "reflect", 0.0),
        ((2, 3, 7), (3, 6), "reflect", 0.0),
        ((1, 2, 3, 4, 5), (1, 2, 2, 0, 1, 2), "reflect", 0.0),
        ((2, 3, 4, 5), (2, 1, 0, 3), "replicate", 0.0),
        ((2, 3, 5), (4, 2), "replicate", 0.0),
        ((2, 3, 4, 5), (5, 2, 1, 4), "circular", 0.0),
        ((1, 2, 3, 4, 2), (2, 1, 0, 4, 3, 1), "circular", 0.0)):
    x = torch.randn(*shape, dtype=D, requires_grad=True)
    y = F.pad(x, amounts, mode=mode, value=value) if mode == "constant" else F.pad(x, amounts, mode=mode)
    r = torch.randn(y.shape, dtype=D)
    (gx,) = torch.autograd.grad((y * r).sum(), (x,))
    pads.append({"x_shape": list(shape), "pad": list(amounts), "mode": mode, "value": value, "x": flat(x),
                 "y_shape": list(y.shape), "y": flat(y), "r": flat(r), "gx": flat(gx)})

convs = []
# in, out, kernel, stride, padding ("same" or (h, w)), dilation, mode, H, W
for cin, cout, k, s, p, d, mode, h, w in ((3, 4, (3, 3), (1, 1), (1, 1), (1, 1), "reflect", 6, 5),
                                         (2, 3, (3, 2), (2, 1), (2, 1), (1, 2), "replicate", 7, 6),
                                         (2, 2, (3, 3), (1, 2), (1, 2), (1, 1), "circular", 5, 6),
                                         (3, 2, (4, 2), (1, 1), "same", (1, 2), "reflect", 7, 6),
                                         (2, 4, (2, 3), (1, 1), "same", (2, 1), "circular", 6, 5)):
    conv = torch.nn.Conv2d(cin, cout, k, stride=s, padding=p, dilation=d, padding_mode=mode).double()
    x = torch.randn(2, cin, h, w, dtype=D, requires_grad=True)
    y = conv(x)
    r = torch.randn(y.shape, dtype=D)
    gx, gw, gb = torch.autograd.grad((y * r).sum(), (x, conv.weight, conv.bias))
    convs.append({"in": cin, "out": cout, "kernel": list(k), "stride": list(s),
                  "padding": p if p == "same" else list(p), "dilation": list(d), "mode": mode,
                  "x_shape": list(x.shape), "x": flat(x), "w": flat(conv.weight), "b": flat(conv.bias),
                  "y_shape": list(y.shape), "y": flat(y), "r": flat(r), "gx": flat(gx), "gw": flat(gw),
                  "gb": flat(gb)})

with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_pad.json", "w") as fh:
    json.dump({"torch": torch.__version__, "pad": pads, "conv": convs}, fh, separators=(",", ":"))
    fh.write("\n")
print(len(pads), "pad cases,", len(convs), "conv cases")
