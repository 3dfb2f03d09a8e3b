"""Writes tests/data/reference/torch_conv3d.json: torch.nn.functional.conv3d (stride, padding,
dilation, groups, no bias, unbatched), max_pool3d (padding, dilation, ceil_mode), avg_pool3d
(count_include_pad on and off, ceil_mode), adaptive_avg_pool3d, interpolate(mode="area") on 5-D,
BatchNorm3d (training) and InstanceNorm3d (affine) in f64, with the gradients of sum(y * r) with
respect to every input, for tests/ops/test_conv3d.cpp. Run once by hand; the tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_conv3d.py tests/data/reference
"""
import json
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(101)
torch.set_num_threads(1)
D = torch.float64
flat = lambda t: t.detach().reshape(-1).tolist()
t = lambda *s: torch.randn(*s, dtype=D, requires_grad=True)

cases = []


def add(name, op, fn, args, kw):
    y = fn(*args)
    r = torch.randn(y.shape, dtype=D)
    wrt = [a for a in args if a is not None and a.requires_grad]
    grads = torch.autograd.grad((y * r).sum(), wrt)
    cases.append({"name": name, "op": op, "kw": kw, "shapes": [list(a.shape) if a is not None else None for a in args],
                  "inputs": [flat(a) if a is not None else None for a in args], "y": flat(y),
                  "y_shape": list(y.shape), "r": flat(r), "grads": [flat(g) for g in grads]})
    print(name, list(y.shape))


def conv(name, x, w, b, stride, padding, dilation, groups):
    kw = {"stride": stride, "padding": padding, "dilation": dilation, "groups": groups}
    add(name, "conv3d", lambda x, w, b: F.conv3d(x, w, b, **kw), [x, w, b], kw)


conv("conv3d_3x3x3_padded", t(2, 3, 5, 4, 6), t(4, 3, 3, 3, 3), t(4), [1, 1, 1], [1, 1, 1], [1, 1, 1], 1)
conv("conv3d_strided_dilated_no_bias", t(1, 2, 7, 6, 5), t(3, 2, 2, 3, 2), None, [2, 1, 2], [1, 0, 1], [2, 1, 1], 1)
conv("conv3d_groups", t(2, 4, 4, 5, 3), t(6, 2, 3, 2, 1), t(6), [1, 2, 1], [0, 1, 0], [1, 1, 1], 2)
conv("conv3d_unbatched", t(2, 3, 3, 3), t(2, 2, 2, 2, 2), t(2), [1, 1, 1], [0, 0, 0], [1, 1, 1], 1)


def pool(name, op, fn, x, kw):
    add(name, op, lambda x: fn(x, **kw), [x], kw)


pool("max_pool3d_padded", "max_pool3d", F.max_pool3d, t(2, 2, 5, 6, 5),
     {"kernel_size": [3, 2, 3], "stride": [2, 2, 1], "padding": [1, 1, 1], "dilation": [1, 1, 1], "ceil_mode": False})
pool("max_pool3d_dilated_ceil", "max_pool3d", F.max_pool3d, t(1, 3, 7, 6, 8),
     {"kernel_size": [2, 3, 2], "stride": [2, 2, 3], "padding": [0, 1, 0], "dilation": [2, 1, 2], "ceil_mode": True})
pool("avg_pool3d_include_pad", "avg_pool3d", F.avg_pool3d, t(2, 2, 5, 4, 6),
     {"kernel_size": [3, 2, 3], "stride": [2, 1, 2], "padding": [1, 1, 1], "ceil_mode": False, "count_include_pad": True})
pool("avg_pool3d_exclude_pad_ceil", "avg_pool3d", F.avg_pool3d, t(1, 3, 6, 7, 5),
     {"kernel_size": [2, 3, 3], "stride": [2, 2, 2], "padding": [1, 1, 0], "ceil_mode": True, "count_include_pad": False})
pool("adaptive_avg_pool3d", "adaptive_avg_pool3d", F.adaptive_avg_pool3d, t(2, 2, 7, 5, 6), {"output_size": [3, 4, 2]})
pool("area_5d", "area", F.interpolate, t(1, 2, 6, 5, 7), {"size": [4, 3, 5], "mode": "area"})
pool("max_pool3d_unbatched", "max_pool3d", F.max_pool3d, t(2, 4, 4, 4),
     {"kernel_size": [2, 2, 2], "stride": [2, 2, 2], "padding": [0, 0, 0], "dilation": [1, 1, 1], "ceil_mode": False})

bn = torch.nn.BatchNorm3d(3, dtype=D)
with torch.no_grad():
    bn.weight.copy_(torch.randn(3, dtype=D))
    bn.bias.copy_(torch.randn(3, dtype=D))
add("batch_norm3d_training", "batch_norm3d", lambda x, w, b: F.batch_norm(x, None, None, w, b, True),
    [t(2, 3, 3, 4, 2), bn.weight, bn.bias], {})
add("instance_norm3d_affine", "instance_norm3d", lambda x, w, b: F.instance_norm(x, None, None, w, b),
    [t(2, 3, 3, 2, 4), torch.randn(3, dtype=D, requires_grad=True), torch.randn(3, dtype=D, requires_grad=True)], {})

# Appended later: conv_transpose3d (stride, padding past the kernel's reach, output_padding, dilation, groups).
def conv_t(name, x, w, b, stride, padding, output_padding, dilation, groups):
    kw = {"stride": stride, "padding": padding, "output_padding": output_padding, "dilation": dilation,
          "groups": groups}
    add(name, "conv_transpose3d", lambda x, w, b: F.conv_transpose3d(x, w, b, **kw), [x, w, b], kw)


conv_t("conv_transpose3d_strided", t(2, 3, 3, 4, 2), t(3, 2, 3, 2, 3), t(2), [2, 1, 2], [1, 0, 1], [1, 0, 0],
       [1, 1, 1], 1)
conv_t("conv_transpose3d_dilated_groups_no_bias", t(1, 4, 2, 3, 3), t(4, 3, 2, 3, 2), None, [1, 2, 1], [0, 1, 0],
       [0, 1, 0], [2, 1, 1], 2)
conv_t("conv_transpose3d_padding_crops", t(1, 2, 4, 3, 3), t(2, 2, 2, 2, 2), t(2), [1, 1, 1], [2, 1, 1], [0, 0, 0],
       [1, 1, 1], 1)

# Appended later (a review's cases): a transposed convolution whose padding crops the whole spread
# input before output_padding adds it back (D = 1), H/W dilation, count_include_pad with ceil_mode,
# H/W padding past the transposed kernel's reach, and max pooling of integer values (ties).
conv_t("conv_transpose3d_crop_then_pad", t(1, 1, 1, 2, 2), t(1, 1, 1, 1, 1), t(1), [5, 1, 1], [2, 0, 0], [4, 0, 0],
       [1, 1, 1], 1)
conv("conv3d_hw_dilation", t(1, 2, 4, 7, 7), t(2, 2, 2, 3, 3), t(2), [1, 2, 1], [0, 2, 1], [1, 2, 3], 1)
pool("avg_pool3d_include_pad_ceil", "avg_pool3d", F.avg_pool3d, t(1, 2, 6, 5, 7),
     {"kernel_size": [3, 2, 3], "stride": [2, 2, 2], "padding": [1, 1, 1], "ceil_mode": True, "count_include_pad": True})
conv_t("conv_transpose3d_hw_padding_crops", t(1, 2, 2, 4, 4), t(2, 2, 2, 2, 2), t(2), [1, 2, 2], [0, 2, 3], [0, 1, 0],
       [1, 1, 1], 1)
ties = torch.randint(0, 3, (1, 2, 4, 4, 4)).to(D).requires_grad_(True)
pool("max_pool3d_ties", "max_pool3d", F.max_pool3d, ties,
     {"kernel_size": [2, 2, 2], "stride": [1, 1, 1], "padding": [0, 0, 0], "dilation": [1, 1, 1], "ceil_mode": False})

with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_conv3d.json", "w") as fh:
    json.dump({"torch": torch.__version__, "cases": cases}, fh, separators=(",", ":"))
    fh.write("\n")
print(len(cases), "cases")
