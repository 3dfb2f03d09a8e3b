"""Writes tests/data/reference/torch_probability_ce.json: PyTorch's cross_entropy with class-probability
targets (a floating target of the input's shape: every reduction, label smoothing, class weights,
spatial and unbatched inputs, targets that do not sum to 1), each with the gradients of the loss
(or of its sum for reduction none) with respect to the input and to the target, in f64, for
tests/ops/test_probability_cross_entropy.cpp. Run once by hand; the tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_probability_ce.py tests/data/reference
"""
import json
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(17)
D = torch.float64


def flat(t):
    return [float(v) for v in t.detach().reshape(-1).tolist()]


def case(inp, tgt, weight=None, **kw):
    x = inp.clone().requires_grad_(True)
    t = tgt.clone().requires_grad_(True)
    y = F.cross_entropy(x, t, weight=weight, **kw)
    gx, gt = torch.autograd.grad(y.sum(), (x, t))
    out = {"input": flat(inp), "input_shape": list(inp.shape), "target": flat(tgt), "loss": flat(y),
           "loss_shape": list(y.shape), "grad_input": flat(gx), "grad_target": flat(gt),
           "reduction": kw.get("reduction", "mean"), "label_smoothing": kw.get("label_smoothing", 0.0)}
    if weight is not None:
        out["weight"] = flat(weight)
    return out


cases = {}
logits = torch.randn(6, 5, dtype=D) * 2
probs = torch.softmax(torch.randn(6, 5, dtype=D), 1)
w = torch.tensor([0.5, 2.0, 1.0, 3.0, 0.25], dtype=D)
for red in ("mean", "sum", "none"):
    for eps in (0.0, 0.1):
        cases[f"{red}/eps{eps}"] = case(logits, probs, reduction=red, label_smoothing=eps)
    cases[f"{red}/weight/eps0.2"] = case(logits, probs, weight=w, reduction=red, label_smoothing=0.2)
cases["mean/unnormalised"] = case(logits, torch.rand(6, 5, dtype=D) * 2)
spatial = torch.randn(3, 4, 2, 2, dtype=D)
sprobs = torch.softmax(torch.randn(3, 4, 2, 2, dtype=D), 1)
cases["spatial/mean/weight"] = case(spatial, sprobs, weight=torch.tensor([1.5, 0.5, 2.0, 1.0], dtype=D))
cases["spatial/none"] = case(spatial, sprobs, reduction="none")
cases["unbatched/mean/eps0.1"] = case(torch.randn(5, dtype=D), torch.softmax(torch.randn(5, dtype=D), 0),
                                      label_smoothing=0.1)

with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_probability_ce.json", "w") as fh:
    json.dump({"torch": torch.__version__, "cases": cases}, fh, separators=(",", ":"))
    fh.write("\n")
