"""Writes tests/data/reference/torch_activations_more.json: torch.nn.functional softmin, glu,
logsigmoid, softsign, tanhshrink, hardshrink, softshrink, threshold and prelu (a shared and a
per-channel slope, 1-D to 4-D inputs) in f64 on inputs that include the kinks (±lambd, the
threshold, 0), large values (±25, ±40) and NaN, with the gradients of sum(y * r) (NaN-free inputs only),
for tests/ops/test_activation_composites.cpp. Run once by hand; the tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_activations_more.py tests/data/reference
"""
import json
import math
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(41)
D = torch.float64
flat = lambda t: [None if math.isnan(v) else v for v in t.detach().reshape(-1).tolist()]

SPECIAL = [0.0, 0.5, -0.5, 0.25, -0.25, 1.0, -1.0, 40.0, -40.0, 2.0, -2.0, 0.1, -25.0, 25.0]

cases = []


def add(name, fn, x, extra=None, with_nan=True):
    xg = x.clone().requires_grad_(True)
    y = fn(xg, *(extra or []))
    r = torch.randn(y.shape, dtype=D)
    wrt = [xg] + [e for e in (extra or []) if isinstance(e, torch.Tensor) and e.requires_grad]
    grads = torch.autograd.grad((y * r).sum(), wrt)
    case = {"name": name, "x": flat(x), "shape": list(x.shape), "y": flat(y), "y_shape": list(y.shape), "r": flat(r),
            "grad_x": flat(grads[0])}
    if len(grads) > 1:
        case["weight"] = flat(extra[0])
        case["weight_shape"] = list(extra[0].shape)
        case["grad_weight"] = flat(grads[1])
    if with_nan:
        xn = x.clone().reshape(-1)
        xn[1] = float("nan")
        xn = xn.reshape(x.shape)
        case["y_nan"] = flat(fn(xn, *[e.detach() if isinstance(e, torch.Tensor) else e for e in (extra or [])]))
    cases.append(case)


def special(*shape):
    x = torch.randn(*shape, dtype=D) * 1.5
    flatx = x.reshape(-1)
    for i, v in enumerate(SPECIAL[: flatx.numel() - 2]):
        flatx[i + 2] = v
    return x


add("softmin_dim1", lambda x: F.softmin(x, dim=1), special(3, 5))
add("softmin_dim0", lambda x: F.softmin(x, dim=0), special(4, 2))
add("glu_last", lambda x: F.glu(x, dim=-1), special(3, 6))
add("glu_dim0", lambda x: F.glu(x, dim=0), special(4, 3))
add("logsigmoid", F.logsigmoid, special(4, 5))
add("softsign", F.softsign, special(4, 5))
add("tanhshrink", F.tanhshrink, special(4, 5))
add("hardshrink_default", F.hardshrink, special(4, 5))
add("hardshrink_0_25", lambda x: F.hardshrink(x, 0.25), special(4, 5))
add("softshrink_default", F.softshrink, special(4, 5))
add("softshrink_1", lambda x: F.softshrink(x, 1.0), special(4, 5))
add("threshold_0_5_to_minus_1", lambda x: F.threshold(x, 0.5, -1.0), special(4, 5))
add("prelu_shared_4d", F.prelu, special(2, 3, 2, 2), [torch.tensor([0.25], dtype=D, requires_grad=True)])
add("prelu_per_channel_4d", F.prelu, special(2, 3, 2, 2), [torch.tensor([0.1, -0.2, 0.3], dtype=D, requires_grad=True)])
add("prelu_per_channel_2d", F.prelu, special(4, 3), [torch.tensor([0.5, 0.25, 2.0], dtype=D, requires_grad=True)])
add("prelu_1d", F.prelu, special(5), [torch.tensor([0.3], dtype=D, requires_grad=True)])
add("prelu_per_channel_3d", F.prelu, special(2, 3, 4), [torch.tensor([0.1, 0.2, -0.3], dtype=D, requires_grad=True)])

with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_activations_more.json", "w") as fh:
    json.dump({"torch": torch.__version__, "cases": cases}, fh, separators=(",", ":"))
    fh.write("\n")
print(len(cases), "cases")
