"""Writes tests/data/reference/torch_weighted_losses.json: PyTorch's cross_entropy and nll_loss with
class weights (ignore_index, label smoothing, spatial and unbatched inputs, every reduction),
binary_cross_entropy(_with_logits) with element weights (broadcast, with pos_weight), and
huber_loss, each with the gradient of the loss (or of its sum for reduction none) with respect to
the input, in f64, for tests/ops/test_weighted_loss.cpp. Run once by hand; the tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_weighted_losses.py tests/data/reference
"""
import json
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(11)
D = torch.float64


def flat(t):
    return [float(v) for v in t.detach().reshape(-1).tolist()]


def case(fn, inp, **tensors):
    x = inp.clone().requires_grad_(True)
    y = fn(x)
    (g,) = torch.autograd.grad(y.sum(), x)
    out = {"input": flat(inp), "input_shape": list(inp.shape), "loss": flat(y), "loss_shape": list(y.shape),
           "grad": flat(g)}
    for k, v in tensors.items():
        out[k] = flat(v) if v.is_floating_point() else [int(i) for i in v.reshape(-1).tolist()]
        out[k + "_shape"] = list(v.shape)
    return out


cases = {}
logits = torch.randn(6, 5, dtype=D) * 2
target = torch.tensor([0, 3, 4, -100, 1, 3])
w = torch.tensor([0.5, 2.0, 1.0, 3.0, 0.25], dtype=D)
for red in ("mean", "sum", "none"):
    for eps in (0.0, 0.1):
        cases[f"ce/{red}/eps{eps}"] = case(
            lambda x: F.cross_entropy(x, target, weight=w, reduction=red, label_smoothing=eps), logits,
            target=target, weight=w)
spatial = torch.randn(3, 4, 2, 2, dtype=D)
starget = torch.randint(0, 4, (3, 2, 2))
sw = torch.tensor([1.5, 0.5, 2.0, 1.0], dtype=D)
cases["ce/spatial/mean/eps0.2/ignore1"] = case(
    lambda x: F.cross_entropy(x, starget, weight=sw, ignore_index=1, label_smoothing=0.2), spatial,
    target=starget, weight=sw)
u = torch.randn(5, dtype=D)
ut = torch.tensor(2)
cases["ce/unbatched/mean"] = case(lambda x: F.cross_entropy(x, ut, weight=w), u, target=ut, weight=w)
lp = F.log_softmax(torch.randn(6, 5, dtype=D), 1)
for red in ("mean", "none"):
    cases[f"nll/{red}"] = case(lambda x: F.nll_loss(x, target, weight=w, reduction=red), lp, target=target, weight=w)
bx = torch.randn(4, 3, dtype=D) * 2
bt = torch.rand(4, 3, dtype=D)
bw = torch.tensor([1.0, 0.5, 3.0], dtype=D)
pw = torch.tensor([2.0, 1.0, 0.5], dtype=D)
for red in ("mean", "sum", "none"):
    cases[f"bcel/{red}"] = case(lambda x: F.binary_cross_entropy_with_logits(x, bt, weight=bw, reduction=red), bx,
                                target=bt, weight=bw)
cases["bcel/pos_weight/mean"] = case(
    lambda x: F.binary_cross_entropy_with_logits(x, bt, weight=bw, pos_weight=pw), bx, target=bt, weight=bw,
    pos_weight=pw)
bp = torch.rand(4, 3, dtype=D) * 0.9 + 0.05
bw2 = torch.tensor([[1.0], [2.0], [0.5], [0.0]], dtype=D)
cases["bce/mean"] = case(lambda x: F.binary_cross_entropy(x, bt, weight=bw2), bp, target=bt, weight=bw2)
hx = torch.randn(3, 4, dtype=D) * 2
hy = torch.randn(3, 4, dtype=D)
for red, delta in (("mean", 0.5), ("none", 2.0), ("sum", 1.0)):
    cases[f"huber/{red}/delta{delta}"] = case(lambda x: F.huber_loss(x, hy, reduction=red, delta=delta), hx,
                                              target=hy, delta=torch.tensor([delta], dtype=D))

with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_weighted_losses.json", "w") as fh:
    json.dump({"torch": torch.__version__, "cases": cases}, fh, separators=(",", ":"))
    fh.write("\n")
