"""Writes tests/data/reference/torch_embedding_max_norm.json: torch.nn.Embedding with max_norm (and
norm_type 1, 2, 3, inf; a padding_idx; repeated indices; rows below the limit left alone) in f64,
run on two batches in a row, with the weight after each forward (the in-place renormalisation), the
outputs, and the weight gradient of sum(out * r) over both batches, for
tests/nn/test_embedding_max_norm.cpp. Run once by hand; the tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_embedding_max_norm.py tests/data/reference
"""
import json
import math
import sys

import torch

torch.manual_seed(17)
D = torch.float64
flat = lambda t: t.detach().reshape(-1).tolist()

# name, V, D, max_norm, norm_type, padding_idx, batches of indices
CASES = (
    ("l2_limit_1", 10, 4, 1.0, 2.0, None, [[[1, 3, 3], [0, 9, 1]], [[2, 3, 5, 5]]]),
    ("l2_limit_2_padding", 8, 5, 2.0, 2.0, 0, [[[0, 4, 4, 7]], [[7, 6, 0]]]),
    ("l1_limit_1_5", 6, 3, 1.5, 1.0, None, [[[5, 2, 2]], [[1, 5]]]),
    ("l3_limit_0_8", 7, 6, 0.8, 3.0, None, [[[6, 1]], [[1, 0, 6, 3]]]),
    ("inf_limit_0_5", 5, 4, 0.5, math.inf, None, [[[4, 4, 0]], [[2, 0]]]),
    ("large_limit_some_rows_untouched", 9, 4, 2.2, 2.0, None, [[[0, 1, 2, 3, 4, 5, 6, 7, 8]], [[8, 0]]]),
)

cases = []
for name, V, Dim, max_norm, norm_type, padding_idx, batches in CASES:
    emb = torch.nn.Embedding(V, Dim, max_norm=max_norm, norm_type=norm_type, padding_idx=padding_idx).double()
    initial = emb.weight.detach().clone()
    steps = []
    total = 0
    for b in batches:
        idx = torch.tensor(b, dtype=torch.int64)
        out = emb(idx)
        r = torch.randn(out.shape, dtype=D)
        total = total + (out * r).sum()
        steps.append({"indices": flat(idx), "shape": list(idx.shape), "weight_after": flat(emb.weight),
                      "output": flat(out), "r": flat(r)})
    (g,) = torch.autograd.grad(total, [emb.weight])
    cases.append({"name": name, "num": V, "dim": Dim, "max_norm": max_norm,
                  "norm_type": "inf" if math.isinf(norm_type) else norm_type, "padding_idx": padding_idx,
                  "weight": flat(initial), "steps": steps, "grad_weight": flat(g)})
    print(f"{name}: {len(batches)} batches")

with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_embedding_max_norm.json", "w") as fh:
    json.dump({"torch": torch.__version__, "cases": cases}, fh, separators=(",", ":"))
    fh.write("\n")
print(len(cases), "cases")
