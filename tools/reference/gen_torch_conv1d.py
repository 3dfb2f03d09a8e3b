"""Writes tests/data/reference/torch_conv1d.json: PyTorch's 1-D convolution and pooling on f64
[N, C, L] inputs, with the gradients of sum(y * r) for a fixed random r, for
tests/ops/test_conv1d.cpp:
  conv       F.conv1d with stride, padding, dilation, groups, with and without bias (grads of x, w, b)
  same       F.conv1d(padding="same"): odd and even kernels, dilation, groups
  module     nn.Conv1d with padding_mode zeros / reflect / replicate / circular, explicit padding
             and padding="same" (even kernel, dilation); its weight and bias are stored
  transpose  F.conv_transpose1d with stride, padding, output_padding, dilation, groups
  max_pool   F.max_pool1d (kernel, stride, padding, dilation, ceil_mode; stride 0 = None)
  avg_pool   F.avg_pool1d (count_include_pad, ceil_mode; stride 0 = None)
  adaptive   F.adaptive_avg_pool1d, output sizes dividing L, not dividing it, above L/2 and above L
Pooling stores the input gradient only; randn inputs have no ties for max pooling. Run once by
hand; the tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_conv1d.py tests/data/reference
"""
import json
import sys

import torch
import torch.nn.functional as F

torch.set_num_threads(1)
torch.manual_seed(17)
D = torch.float64
N = 2
flat = lambda t: t.detach().reshape(-1).tolist()


def grads(y, inputs):
    r = torch.randn(y.shape, dtype=D)
    return r, torch.autograd.grad((y * r).sum(), inputs)


conv = []
# in, out, kernel, stride, padding, dilation, groups, bias, L
for cin, cout, k, s, p, d, g, bias, length in ((3, 4, 3, 1, 0, 1, 1, True, 9),
                                              (2, 4, 3, 2, 1, 1, 1, True, 10),
                                              (3, 2, 2, 1, 2, 3, 1, False, 11),
                                              (4, 4, 3, 2, 1, 2, 2, True, 11),
                                              (4, 4, 3, 1, 1, 1, 4, False, 8),
                                              (2, 3, 4, 3, 2, 1, 1, True, 11)):
    x = torch.randn(N, cin, length, dtype=D, requires_grad=True)
    w = torch.randn(cout, cin // g, k, dtype=D, requires_grad=True)
    b = torch.randn(cout, dtype=D, requires_grad=True) if bias else None
    y = F.conv1d(x, w, b, stride=s, padding=p, dilation=d, groups=g)
    r, gs = grads(y, (x, w, b) if bias else (x, w))
    c = {"stride": s, "padding": p, "dilation": d, "groups": g, "x_shape": list(x.shape), "x": flat(x),
         "w_shape": list(w.shape), "w": flat(w), "y_shape": list(y.shape), "y": flat(y), "r": flat(r),
         "gx": flat(gs[0]), "gw": flat(gs[1])}
    if bias:
        c.update(b=flat(b), gb=flat(gs[2]))
    conv.append(c)

same = []
# in, out, kernel, dilation, groups, L
for cin, cout, k, d, g, length in ((3, 4, 3, 1, 1, 7),    # odd kernel: 1 each side
                                   (2, 4, 4, 1, 2, 8),    # even: 1 left, 2 right
                                   (3, 2, 3, 2, 1, 9),    # dilated odd: 2 each side
                                   (2, 3, 2, 3, 1, 6),    # dilated even: 1 left, 2 right
                                   (3, 3, 3, 4, 3, 6)):   # dilated kernel (9) longer than L
    x = torch.randn(N, cin, length, dtype=D, requires_grad=True)
    w = torch.randn(cout, cin // g, k, dtype=D, requires_grad=True)
    b = torch.randn(cout, dtype=D, requires_grad=True)
    y = F.conv1d(x, w, b, padding="same", dilation=d, groups=g)
    assert y.shape[2] == length
    r, (gx, gw, gb) = grads(y, (x, w, b))
    same.append({"dilation": d, "groups": g, "x_shape": list(x.shape), "x": flat(x), "w_shape": list(w.shape),
                 "w": flat(w), "b": flat(b), "y_shape": list(y.shape), "y": flat(y), "r": flat(r), "gx": flat(gx),
                 "gw": flat(gw), "gb": flat(gb)})

module = []
# in, out, kernel, stride, padding (int or "same"), dilation, groups, bias, mode, L
for cin, cout, k, s, p, d, g, bias, mode, length in ((3, 4, 3, 1, 1, 1, 1, True, "reflect", 7),
                                                    (2, 3, 3, 2, 2, 1, 1, True, "replicate", 8),
                                                    (2, 4, 3, 1, 2, 2, 2, True, "circular", 7),
                                                    (3, 2, 4, 1, "same", 1, 1, True, "reflect", 7),
                                                    (2, 2, 2, 1, "same", 3, 1, False, "circular", 6),
                                                    (4, 2, 3, 2, 1, 2, 2, False, "zeros", 9)):
    layer = torch.nn.Conv1d(cin, cout, k, stride=s, padding=p, dilation=d, groups=g, bias=bias,
                            padding_mode=mode).double()
    x = torch.randn(N, cin, length, dtype=D, requires_grad=True)
    y = layer(x)
    params = (x, layer.weight, layer.bias) if bias else (x, layer.weight)
    r, gs = grads(y, params)
    c = {"in": cin, "out": cout, "kernel": k, "stride": s, "padding": p, "dilation": d, "groups": g, "bias": bias,
         "mode": mode, "x_shape": list(x.shape), "x": flat(x), "w": flat(layer.weight), "y_shape": list(y.shape),
         "y": flat(y), "r": flat(r), "gx": flat(gs[0]), "gw": flat(gs[1])}
    if bias:
        c.update(b=flat(layer.bias), gb=flat(gs[2]))
    module.append(c)

transpose = []
# in, out, kernel, stride, padding, output_padding, dilation, groups, bias, L
for cin, cout, k, s, p, op, d, g, bias, length in ((3, 2, 3, 2, 1, 1, 1, 1, True, 5),
                                                  (4, 4, 3, 3, 2, 2, 1, 2, True, 4),
                                                  (2, 3, 2, 1, 0, 1, 2, 1, False, 6),
                                                  (2, 4, 4, 2, 1, 0, 2, 2, True, 5)):
    x = torch.randn(N, cin, length, dtype=D, requires_grad=True)
    w = torch.randn(cin, cout // g, k, dtype=D, requires_grad=True)
    b = torch.randn(cout, dtype=D, requires_grad=True) if bias else None
    y = F.conv_transpose1d(x, w, b, stride=s, padding=p, output_padding=op, groups=g, dilation=d)
    r, gs = grads(y, (x, w, b) if bias else (x, w))
    c = {"in": cin, "out": cout, "kernel": k, "stride": s, "padding": p, "output_padding": op, "dilation": d,
         "groups": g, "x_shape": list(x.shape), "x": flat(x), "w_shape": list(w.shape), "w": flat(w),
         "y_shape": list(y.shape), "y": flat(y), "r": flat(r), "gx": flat(gs[0]), "gw": flat(gs[1])}
    if bias:
        c.update(b=flat(b), gb=flat(gs[2]))
    transpose.append(c)


def pool_case(x, y, extra):
    r, (gx,) = grads(y, (x,))
    return {**extra, "x_shape": list(x.shape), "x": flat(x), "y_shape": list(y.shape), "y": flat(y), "r": flat(r),
            "gx": flat(gx)}


max_pool = []
# kernel, stride (0: None), padding, dilation, ceil_mode, L
for k, s, p, d, ceil, length in ((2, 0, 0, 1, False, 10),
                                 (3, 2, 1, 1, False, 11),
                                 (3, 1, 1, 2, False, 9),
                                 (2, 0, 0, 1, True, 11),    # a last window half outside
                                 (3, 2, 1, 1, True, 10),
                                 (3, 3, 1, 1, True, 5),     # ceil's last window would start in the padding: dropped
                                 (4, 3, 2, 2, True, 12)):
    x = torch.randn(N, 2, length, dtype=D, requires_grad=True)
    y = F.max_pool1d(x, k, s or None, p, d, ceil_mode=ceil)
    max_pool.append(pool_case(x, y, {"kernel": k, "stride": s, "padding": p, "dilation": d, "ceil_mode": ceil}))

avg_pool = []
# kernel, stride (0: None), padding, count_include_pad, ceil_mode, L
for k, s, p, inc, ceil, length in ((3, 0, 0, True, False, 10),
                                   (3, 2, 1, True, False, 11),
                                   (3, 2, 1, False, False, 11),
                                   (4, 3, 2, True, True, 9),
                                   (4, 3, 2, False, True, 10),
                                   (2, 0, 0, True, True, 11),
                                   (3, 3, 1, True, True, 5)):
    x = torch.randn(N, 2, length, dtype=D, requires_grad=True)
    y = F.avg_pool1d(x, k, s or None, p, ceil_mode=ceil, count_include_pad=inc)
    avg_pool.append(pool_case(x, y, {"kernel": k, "stride": s, "padding": p, "count_include_pad": inc,
                                     "ceil_mode": ceil}))

adaptive = []
# L, output
for length, out in ((10, 5), (10, 3), (10, 7), (7, 4), (9, 1), (5, 8), (6, 6)):
    x = torch.randn(N, 2, length, dtype=D, requires_grad=True)
    y = F.adaptive_avg_pool1d(x, out)
    adaptive.append(pool_case(x, y, {"output": out}))

with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_conv1d.json", "w") as fh:
    json.dump({"torch": torch.__version__, "conv": conv, "same": same, "module": module, "transpose": transpose,
               "max_pool": max_pool, "avg_pool": avg_pool, "adaptive": adaptive}, fh, separators=(",", ":"))
    fh.write("\n")
print(len(conv), "conv,", len(same), "same,", len(module), "module,", len(transpose), "transpose,", len(max_pool),
      "max_pool,", len(avg_pool), "avg_pool,", len(adaptive), "adaptive cases")
