"""Writes tests/data/reference/torch_adaptive_softmax.json: torch.nn.AdaptiveLogSoftmaxWithLoss in
f64 — forward's output and loss, the gradients of loss + sum(output * r) w.r.t. the input and every
parameter, log_prob and predict — for one and three clusters, head_bias, a div_value that is not a
power of two, a batch whose targets miss a cluster, and an unbatched input (log_prob and predict of it as a batch of one), for
tests/nn/test_adaptive_softmax.cpp. Run once by hand; the tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_adaptive_softmax.py tests/data/reference
"""
import json
import sys

import torch

torch.manual_seed(41)
torch.set_num_threads(1)
D = torch.float64
flat = lambda t: t.detach().reshape(-1).tolist()

cases = []


def case(name, in_features, n_classes, cutoffs, div_value, head_bias, x_shape, target):
    m = torch.nn.AdaptiveLogSoftmaxWithLoss(in_features, n_classes, cutoffs, div_value=div_value,
                                            head_bias=head_bias).double()
    params = dict(m.named_parameters())
    x = torch.randn(*x_shape, dtype=D, requires_grad=True)
    t = torch.tensor(target, dtype=torch.int64)
    out, loss = m(x, t)
    r = torch.randn(out.shape, dtype=D)
    xb = x if x.dim() == 2 else x.unsqueeze(0)  # PyTorch's log_prob and predict take only a batch
    wrt = [x] + list(params.values())
    grads = torch.autograd.grad(loss + (out * r).sum(), wrt, allow_unused=True)
    grads = [torch.zeros_like(w) if g is None else g for g, w in zip(grads, wrt)]  # a cluster no target reached
    cases.append({"name": name, "in": in_features, "n_classes": n_classes, "cutoffs": cutoffs,
                  "div_value": div_value, "head_bias": head_bias, "x": flat(x), "x_shape": list(x.shape),
                  "target": flat(t), "params": {k: flat(v) for k, v in params.items()},
                  "param_shapes": {k: list(v.shape) for k, v in params.items()},
                  "output": flat(out), "loss": loss.item(), "r": flat(r),
                  "grads": dict(zip(["input"] + list(params.keys()), [flat(g) for g in grads])),
                  "log_prob": flat(m.log_prob(xb)), "predict": flat(m.predict(xb))})
    print(name, list(out.shape), sorted(params))


case("one_cluster", 6, 10, [4], 4.0, False, (5, 6), [0, 3, 4, 9, 2])
case("three_clusters_head_bias", 16, 40, [5, 12, 25], 2.0, True, (9, 16), [0, 39, 5, 11, 12, 24, 25, 4, 30])
case("div_value_3_target_misses_a_cluster", 9, 20, [3, 8], 3.0, False, (4, 9), [1, 15, 19, 0])
case("unbatched", 8, 12, [6, 9], 2.0, True, (8,), 10)

with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_adaptive_softmax.json", "w") as fh:
    json.dump({"torch": torch.__version__, "cases": cases}, fh, separators=(",", ":"))
    fh.write("\n")
print(len(cases), "cases")
