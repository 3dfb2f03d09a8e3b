"""Writes tests/data/reference/torch_adaptive_max.json: torch.nn.functional.adaptive_max_pool1d/2d/3d
in f64 (overlapping windows, output larger than the input, unbatched, integer-valued inputs with
ties) with the gradients of sum(y * r), for tests/ops/test_adaptive_max_pool.cpp. Run once by
hand; the tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_adaptive_max.py tests/data/reference
"""
import json
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(127)
D = torch.float64
flat = lambda t: t.detach().reshape(-1).tolist()

# name, op, input shape, output size, integer values (ties)
CASES = (
    ("1d_overlap", "adaptive_max_pool1d", [2, 3, 10], [4], False),
    ("1d_upsample_unbatched", "adaptive_max_pool1d", [3, 5], [7], False),
    ("2d_overlap", "adaptive_max_pool2d", [2, 2, 7, 9], [3, 4], False),
    ("2d_ties", "adaptive_max_pool2d", [1, 2, 6, 6], [4, 3], True),
    ("2d_unbatched_larger", "adaptive_max_pool2d", [2, 3, 2], [5, 4], False),
    ("3d_overlap_ties", "adaptive_max_pool3d", [1, 2, 5, 4, 6], [3, 3, 4], True),
)
cases = []
for name, op, shape, out, ties in CASES:
    x = (torch.randint(0, 3, shape).to(D) if ties else torch.randn(shape, dtype=D)).requires_grad_(True)
    y = getattr(F, op)(x, out if len(out) > 1 else out[0])
    r = torch.randn(y.shape, dtype=D)
    (g,) = torch.autograd.grad((y * r).sum(), [x])
    cases.append({"name": name, "op": op, "shape": shape, "output": out, "x": flat(x), "y": flat(y),
                  "y_shape": list(y.shape), "r": flat(r), "grad_x": flat(g)})
    print(name, list(y.shape))
with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_adaptive_max.json", "w") as fh:
    json.dump({"torch": torch.__version__, "cases": cases}, fh, separators=(",", ":"))
    fh.write("\n")
print(len(cases), "cases")
