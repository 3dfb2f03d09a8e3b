"""Writes tests/data/reference/torch_layers_more.json: torch.nn.functional.bilinear (with and
without bias, extra leading dims), local_response_norm (3-, 4- and 5-D inputs, odd and even
sizes, size 1 and a size larger than the channels) and rrelu in eval mode, in f64, with the
gradients of sum(y * r) with respect to every input, for tests/nn/test_layers_more.cpp. Run once
by hand; the tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_layers_more.py tests/data/reference
"""
import json
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(97)
D = torch.float64
flat = lambda t: t.detach().reshape(-1).tolist()
t = lambda *s: torch.randn(*s, dtype=D, requires_grad=True)

cases = []


def add(name, fn, args, kw):
    y = fn(*args, **kw)
    r = torch.randn(y.shape, dtype=D)
    wrt = [a for a in args if a is not None]
    grads = torch.autograd.grad((y * r).sum(), wrt)
    cases.append({"name": name, "kw": kw, "shapes": [list(a.shape) if a is not None else None for a in args],
                  "inputs": [flat(a) if a is not None else None for a in args], "y": flat(y),
                  "y_shape": list(y.shape), "r": flat(r), "grads": [flat(g) for g in grads]})
    print(name, list(y.shape))


add("bilinear_bias", F.bilinear, [t(4, 3), t(4, 5), t(2, 3, 5), t(2)], {})
add("bilinear_no_bias_leading_dims", F.bilinear, [t(2, 3, 4), t(2, 3, 2), t(3, 4, 2), None], {})
add("lrn_3d_size_3", F.local_response_norm, [t(2, 5, 4)], {"size": 3, "alpha": 0.3, "beta": 0.75, "k": 1.0})
add("lrn_4d_size_2", F.local_response_norm, [t(2, 4, 3, 3)], {"size": 2, "alpha": 0.5, "beta": 0.6, "k": 2.0})
add("lrn_5d_size_5", F.local_response_norm, [t(1, 3, 2, 2, 3)], {"size": 5, "alpha": 0.2, "beta": 1.2, "k": 0.5})
add("lrn_4d_size_1", F.local_response_norm, [t(2, 3, 2, 2)], {"size": 1, "alpha": 1.0, "beta": 0.5, "k": 1.0})
add("rrelu_eval", F.rrelu, [t(3, 7)], {"lower": 0.1, "upper": 0.3, "training": False})

with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_layers_more.json", "w") as fh:
    json.dump({"torch": torch.__version__, "cases": cases}, fh, separators=(",", ":"))
    fh.write("\n")
print(len(cases), "cases")
