"""Writes tests/data/reference/torch_pdist.json: torch.nn.functional.pdist in f64 for several p (2, 1,
3, 0.5, inf, 0), with two equal rows (a zero distance, whose gradient PyTorch defines as 0), and the
gradient of sum(d * r) w.r.t. x, for tests/ops/test_normalize.cpp. Run once by hand; the tests
need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_pdist.py tests/data/reference
"""
import json
import math
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(61)
D = torch.float64
flat = lambda t: t.detach().reshape(-1).tolist()
cases = []
for p in (2.0, 1.0, 3.0, 0.5, math.inf, 0.0):
    x = torch.randn(5, 4, dtype=D)
    x[3] = x[1]  # rows 1 and 3 equal: one zero distance
    x.requires_grad_(True)
    d = F.pdist(x, p)
    r = torch.randn(d.shape, dtype=D)
    (g,) = torch.autograd.grad((d * r).sum(), [x])
    cases.append({"p": "inf" if math.isinf(p) else p, "x": flat(x), "d": flat(d), "r": flat(r), "grad": flat(g)})
with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_pdist.json", "w") as fh:
    json.dump({"torch": torch.__version__, "shape": [5, 4], "cases": cases}, fh, separators=(",", ":"))
    fh.write("\n")
print(len(cases), "cases")
