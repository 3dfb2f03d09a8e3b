"""Writes tests/data/reference/torch_layer_options.json: layer options a PyTorch user sets, in f64
with the gradients of sum(y * r) w.r.t. the input and every parameter:
  - nn.Embedding(scale_grad_by_freq=True), with and without a padding_idx, repeated indices;
  - nn.Conv3d(padding="same") (odd and even kernels, dilation) and padding_mode reflect,
    replicate, circular (explicit padding and "same"), batched and unbatched;
  - nn.AvgPool3d(divisor_override=...) with padding and ceil_mode;
  - nn.LPPool3d (appended later: p = 2 and 3, stride, ceil_mode, unbatched);
for tests/nn/test_layer_options.cpp. Run once by hand; the tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_layer_options.py tests/data/reference
"""
import json
import sys

import torch

torch.manual_seed(29)
torch.set_num_threads(1)
D = torch.float64
flat = lambda t: t.detach().reshape(-1).tolist()

cases = []


def add(name, kind, kw, module, x):
    params = dict(module.named_parameters())
    y = module(x)
    r = torch.randn(y.shape, dtype=D)
    wrt = ([x] if x.is_floating_point() else []) + list(params.values())
    grads = torch.autograd.grad((y * r).sum(), wrt)
    names = (["input"] if x.is_floating_point() else []) + list(params.keys())
    cases.append({"name": name, "kind": kind, "kw": kw, "x": flat(x), "x_shape": list(x.shape),
                  "params": {k: flat(v) for k, v in params.items()}, "y": flat(y), "y_shape": list(y.shape),
                  "r": flat(r), "grads": {n: flat(g) for n, g in zip(names, grads)}})
    print(name, list(y.shape))


def embedding(name, V, dim, padding_idx, idx):
    m = torch.nn.Embedding(V, dim, padding_idx=padding_idx, scale_grad_by_freq=True).double()
    add(name, "embedding", {"num": V, "dim": dim, "padding_idx": padding_idx}, m, torch.tensor(idx))


embedding("embedding_freq", 7, 3, None, [[1, 3, 3, 6], [3, 0, 1, 3]])
embedding("embedding_freq_padding", 6, 4, 2, [[2, 5, 5, 2, 1], [0, 5, 2, 4, 4]])


def conv3d(name, cin, cout, kernel, dilation, groups, padding, padding_mode, x):
    m = torch.nn.Conv3d(cin, cout, kernel, padding=padding, dilation=dilation, groups=groups,
                        padding_mode=padding_mode).double()
    x.requires_grad_(True)
    add(name, "conv3d", {"in": cin, "out": cout, "kernel": kernel, "dilation": dilation, "groups": groups,
                         "padding": padding, "padding_mode": padding_mode}, m, x)


t = lambda *s: torch.randn(*s, dtype=D)
conv3d("conv3d_same_odd", 2, 3, [3, 3, 3], [1, 1, 1], 1, "same", "zeros", t(2, 2, 4, 5, 3))
conv3d("conv3d_same_even_dilated", 2, 4, [2, 3, 4], [2, 1, 1], 2, "same", "zeros", t(1, 2, 5, 4, 6))
conv3d("conv3d_reflect", 2, 2, [3, 2, 3], [1, 1, 1], 1, [1, 1, 2], "reflect", t(2, 2, 4, 3, 5))
conv3d("conv3d_replicate_same", 3, 2, [2, 3, 3], [1, 2, 1], 1, "same", "replicate", t(1, 3, 3, 6, 4))
conv3d("conv3d_circular_unbatched", 2, 3, [3, 3, 2], [1, 1, 1], 1, [1, 2, 1], "circular", t(2, 4, 3, 5))


def avg3d(name, kernel, stride, padding, ceil_mode, count_include_pad, divisor, x):
    m = torch.nn.AvgPool3d(kernel, stride, padding, ceil_mode=ceil_mode, count_include_pad=count_include_pad,
                           divisor_override=divisor)
    x.requires_grad_(True)
    add(name, "avg_pool3d", {"kernel": kernel, "stride": stride, "padding": padding, "ceil_mode": ceil_mode,
                             "count_include_pad": count_include_pad, "divisor": divisor}, m, x)


avg3d("avg_pool3d_divisor", [2, 2, 3], [2, 2, 1], [1, 0, 1], False, True, 5, t(2, 2, 5, 4, 6))
avg3d("avg_pool3d_divisor_ceil", [3, 2, 2], [2, 2, 2], [1, 1, 0], True, False, 7, t(1, 3, 6, 5, 5))



# Appended later (the cases above keep their random draws).
def lp3d(name, p, kernel, stride, ceil_mode, x):
    m = torch.nn.LPPool3d(p, kernel, stride, ceil_mode=ceil_mode)
    x.requires_grad_(True)
    add(name, "lp_pool3d", {"norm_type": p, "kernel": kernel, "stride": stride, "ceil_mode": ceil_mode}, m, x)


lp3d("lp_pool3d_p2", 2.0, [2, 2, 2], [2, 2, 2], False, t(2, 2, 4, 5, 4))
lp3d("lp_pool3d_p3_strided_ceil", 3.0, [2, 3, 2], [1, 2, 2], True, t(1, 3, 3, 6, 5).abs())
lp3d("lp_pool3d_unbatched", 1.5, [3, 2, 2], [2, 1, 2], False, t(2, 5, 3, 4).abs())

with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_layer_options.json", "w") as fh:
    json.dump({"torch": torch.__version__, "cases": cases}, fh, separators=(",", ":"))
    fh.write("\n")
print(len(cases), "cases")
