"""Writes tests/data/reference/torch_interpolate.json: torch.nn.functional.interpolate in the modes
"nearest", "nearest-exact", "linear" ([N, C, L]) and "bilinear" ([N, C, H, W]), with size or
scale_factor (one value or one per dim, representable or not), align_corners False / True / unset,
recompute_scale_factor, up- and downsampling and output size 1, for tests/ops/test_interpolate.cpp.

  "f64":              f64 inputs: the output and the gradient of x for sum(y * r), r a stored random.
  "f64_forward_only": 1-D nearest / nearest-exact cases where PyTorch's forward and its own backward
                      pick different source elements (see below): the output and the gradient
                      (mixgrad follows the backward's rule in both directions).
  "f32":              the output computed in f32 from x rounded to f32 (the C++ run must pick the same
                      source elements: nearest outputs are copies, so they are compared exactly).

PyTorch 2.15's CPU kernels, as measured by this script's checks (asserted below, so a new PyTorch
that changes them fails here rather than in the C++ tests):
  * output size: floor(double(in) * scale) with the double product rounded first (5 * 1.4 -> 7).
  * linear / bilinear: a dim whose output size equals its input size is copied (the scale_factor
    is ignored there); otherwise the source positions use 1 / scale_factor (or in / out with
    recompute_scale_factor or size) in double for f64 and in float for f32.
  * nearest / nearest-exact 2-D (and every backward, 1-D included): the scale is a float whatever
    the dtype, nearest: out == in -> copy, out == 2 in -> i / 2, else floor(f32(f32(i) * scale));
    nearest-exact: floor(f32((i + 0.5) * double(scale))). (For outputs with H + W > 128 PyTorch
    switches the 2-D forward to its generic kernel, like 1-D's; not covered here.)
  * nearest / nearest-exact 1-D forward (the generic kernel): scale in the dtype's opmath (double
    for f64), no shortcuts: nearest floor(f32(scale * i)), nearest-exact
    floor(f32(max(opmath(scale * (i + 0.5) - 0.5), 0) + 0.5)) -- so a 1-D scale_factor whose output
    size is in or 2 in, or a rare rounding, makes PyTorch's forward and backward disagree.
Run once by hand; the tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_interpolate.py tests/data/reference
"""
import json
import math
import sys

import torch
import torch.nn.functional as F

torch.set_num_threads(1)
torch.manual_seed(29)
D = torch.float64
flat = lambda t: t.detach().reshape(-1).tolist()


def short_randn(*shape):
    # 3-decimal values: short in the JSON, exact as stored (the f64 tensor is built from them)
    return torch.round(torch.randn(*shape, dtype=D) * 1000) / 1000


def call(x, size, scale, mode, align_corners, recompute):
    dims = x.dim() - 2
    kw = {"mode": mode, "align_corners": align_corners, "recompute_scale_factor": recompute}
    if size is not None:
        kw["size"] = size[0] if len(size) == 1 and dims == 2 else tuple(size)
    else:
        kw["scale_factor"] = scale[0] if len(scale) == 1 else tuple(scale)
    return F.interpolate(x, **kw)


def source_maps(shape, size, scale, mode, recompute):
    """For nearest modes: the source index of each output along the last dim, from the forward
    (an arange input) and from the backward (the input gradient of a one-hot r)."""
    L = shape[-1]
    base = torch.arange(L, dtype=D).expand(*shape[:-1], L).contiguous().requires_grad_()
    y = call(base, size, scale, mode, None, recompute)
    line = y[(0,) * (y.dim() - 1)]
    fwd = line.long().tolist()
    bwd = []
    for i in range(len(fwd)):
        r = torch.zeros_like(y)
        r[(0,) * (y.dim() - 1) + (i,)] = 1
        (g,) = torch.autograd.grad((y * r).sum(), (base,))
        bwd.append(g.reshape(-1, L).sum(0).nonzero().reshape(-1).tolist())
    return fwd, [b[0] if len(b) == 1 else b for b in bwd]


def case(name, shape, mode, size=None, scale=None, align_corners=None, recompute=False):
    return dict(name=name, shape=shape, mode=mode, size=size, scale=scale, align_corners=align_corners,
                recompute=recompute)


S1, S2 = (2, 2, 7), (2, 2, 4, 5)
# the f64 set: every case's PyTorch forward and backward agree (asserted)
f64_cases = [
    # nearest
    case("nearest 1-D size 5 -> 7", (2, 2, 5), "nearest", size=[7]),
    case("nearest 1-D size 7 -> 3", S1, "nearest", size=[3]),
    case("nearest 2-D size [4, 5] -> [7, 3]", S2, "nearest", size=[7, 3]),
    case("nearest 2-D one size 6 for both dims", (2, 2, 3, 4), "nearest", size=[6]),
    case("nearest 1-D scale 2", (2, 2, 5), "nearest", scale=[2.0]),
    case("nearest 1-D scale 0.5", S1, "nearest", scale=[0.5]),
    case("nearest 2-D scale 1.5", S2, "nearest", scale=[1.5]),
    case("nearest 2-D scale [1/3, 2.3]", (2, 2, 7, 5), "nearest", scale=[1 / 3, 2.3]),
    case("nearest 1-D scale 17/6: float index arithmetic even in f64", S1, "nearest", scale=[17 / 6]),
    case("nearest 2-D scale [1/3, 17/6]: float index arithmetic even in f64", (2, 2, 7, 7), "nearest",
         scale=[1 / 3, 17 / 6]),
    case("nearest 2-D scale [2.3, 1.3]: output 2 in and in ignore the scale", (2, 2, 3, 3), "nearest",
         scale=[2.3, 1.3]),
    case("nearest 1-D scale 2.3 recompute_scale_factor", (2, 2, 3), "nearest", scale=[2.3], recompute=True),
    case("nearest 2-D scale [1.5, 0.6] recompute_scale_factor", S2, "nearest", scale=[1.5, 0.6], recompute=True),
    case("nearest 1-D scale 1.4: size floor(5 * 1.4) = 7", (2, 2, 5), "nearest", scale=[1.4]),
    # nearest-exact
    case("nearest-exact 1-D size 5 -> 7", (2, 2, 5), "nearest-exact", size=[7]),
    case("nearest-exact 2-D size [4, 5] -> [7, 3]", S2, "nearest-exact", size=[7, 3]),
    case("nearest-exact 1-D scale 3.7: float index arithmetic even in f64", (2, 2, 6), "nearest-exact",
         scale=[3.7]),
    case("nearest-exact 2-D scale [1.5, 1/3]", (2, 2, 4, 7), "nearest-exact", scale=[1.5, 1 / 3]),
    case("nearest-exact 2-D scale [2.3, 0.7] recompute_scale_factor", (2, 2, 3, 7), "nearest-exact",
         scale=[2.3, 0.7], recompute=True),
    # linear
    case("linear size 5 -> 7", (2, 2, 5), "linear", size=[7], align_corners=False),
    case("linear size 7 -> 3 align_corners", S1, "linear", size=[3], align_corners=True),
    case("linear scale 2.3", (2, 2, 4), "linear", scale=[2.3], align_corners=False),
    case("linear scale 0.5 align_corners", S1, "linear", scale=[0.5], align_corners=True),
    case("linear size 1 align_corners", (2, 2, 5), "linear", size=[1], align_corners=True),
    case("linear scale 1.3 recompute_scale_factor", S1, "linear", scale=[1.3], align_corners=False,
         recompute=True),
    # bilinear
    case("bilinear size [4, 5] -> [7, 3]", S2, "bilinear", size=[7, 3], align_corners=False),
    case("bilinear size [4, 5] -> [7, 3] align_corners", S2, "bilinear", size=[7, 3], align_corners=True),
    case("bilinear scale 1.5", S2, "bilinear", scale=[1.5], align_corners=False),
    case("bilinear scale [0.5, 1/3] align_corners", (2, 2, 6, 7), "bilinear", scale=[0.5, 1 / 3],
         align_corners=True),
    case("bilinear scale [1.3, 1.4]: sizes floor(7 * 1.3) = 9, floor(5 * 1.4) = 7", (2, 2, 7, 5), "bilinear",
         scale=[1.3, 1.4], align_corners=False),
    case("bilinear size [1, 4] align_corners", (2, 2, 3, 5), "bilinear", size=[1, 4], align_corners=True),
    case("bilinear scale [1.3, 1.5] align_corners unset: the same-size dim is copied", (2, 2, 3, 4), "bilinear",
         scale=[1.3, 1.5]),
    case("bilinear scale 0.4 down to [1, 2]", (2, 2, 3, 5), "bilinear", scale=[0.4], align_corners=False),
    case("bilinear scale [2.3, 0.7] recompute_scale_factor align_corners", (2, 2, 3, 6), "bilinear",
         scale=[2.3, 0.7], align_corners=True, recompute=True),
]
# PyTorch's 1-D forward and backward disagree on these: the forward is stored, not the gradient
forward_only_cases = [
    case("nearest 1-D scale 2.3 on 3: forward floor(i / 2.3), backward i / 2", (2, 2, 3), "nearest", scale=[2.3]),
    case("nearest 1-D scale 1.1 on 4: forward floor(i / 1.1), backward a copy", (2, 2, 4), "nearest", scale=[1.1]),
    case("nearest-exact 1-D scale 37/12 on 7: forward double scale, backward float", S1, "nearest-exact",
         scale=[37 / 12]),
]
# the f32 set, with the names of the f64 cases whose inputs (rounded to f32) they use, or a case
f32_cases = [
    "nearest 1-D scale 17/6: float index arithmetic even in f64",
    "nearest 2-D scale [1/3, 17/6]: float index arithmetic even in f64",
    "nearest 2-D scale [1/3, 2.3]",
    "nearest 2-D scale [2.3, 1.3]: output 2 in and in ignore the scale",
    "nearest-exact 1-D scale 3.7: float index arithmetic even in f64",
    case("nearest-exact 2-D size [3, 6] -> [2, 37]: float in / out", (2, 2, 3, 6), "nearest-exact", size=[2, 37]),
    case("nearest 1-D scale 1/3", S1, "nearest", scale=[1 / 3]),
    "bilinear scale 1.5",
    "bilinear scale [1.3, 1.4]: sizes floor(7 * 1.3) = 9, floor(5 * 1.4) = 7",
    "linear scale 2.3",
]


def options(c):
    return {"name": c["name"], "mode": c["mode"], "size": c["size"], "scale_factor": c["scale"],
            "align_corners": c["align_corners"], "recompute_scale_factor": c["recompute"]}


def run(c, with_grad):
    x = short_randn(*c["shape"]).requires_grad_()
    y = call(x, c["size"], c["scale"], c["mode"], c["align_corners"], c["recompute"])
    if c["size"] is None and not c["recompute"]:
        dims = x.dim() - 2
        scales = c["scale"] * dims if len(c["scale"]) == 1 else c["scale"]
        assert list(y.shape[2:]) == [int(x.shape[2 + d] * scales[d]) for d in range(dims)]
    out = dict(options(c), x_shape=list(x.shape), x=flat(x), y_shape=list(y.shape), y=flat(y))
    if with_grad:
        r = short_randn(*y.shape)
        (gx,) = torch.autograd.grad((y * r).sum(), (x,))
        out.update(r=flat(r), gx=flat(gx))
    if c["mode"].startswith("nearest"):
        fwd, bwd = source_maps(tuple(c["shape"]), c["size"], c["scale"], c["mode"], c["recompute"])
        assert (fwd == bwd) == with_grad, (c["name"], fwd, bwd)
    return out


f64 = [run(c, True) for c in f64_cases]
forward_only = [run(c, False) for c in forward_only_cases]
for c, out in zip(forward_only_cases, forward_only):
    # PyTorch's backward here follows the 2-D rule, which mixgrad's forward uses too: its gradient.
    x = torch.tensor(out["x"], dtype=torch.float64).reshape(out["x_shape"]).requires_grad_()
    y = call(x, c["size"], c["scale"], c["mode"], c["align_corners"], c["recompute"])
    r = short_randn(*y.shape)
    (gx,) = torch.autograd.grad((y * r).sum(), (x,))
    out.update(r=flat(r), gx=flat(gx))
by_name = {c["name"]: c for c in f64}
assert len(by_name) == len(f64)
f32 = []
for c in f32_cases:
    if isinstance(c, str):
        src = by_name[c]
        x = torch.tensor(src["x"], dtype=D).reshape(src["x_shape"])
        opts = {k: src[k] for k in ("name", "mode", "size", "scale_factor", "align_corners",
                                    "recompute_scale_factor")}
    else:
        x = short_randn(*c["shape"])
        opts = options(c)
    y = call(x.float(), opts["size"], opts["scale_factor"], opts["mode"], opts["align_corners"],
             opts["recompute_scale_factor"])
    assert y.dtype == torch.float32
    f32.append(dict(opts, x_shape=list(x.shape), x=flat(x), y_shape=list(y.shape), y=flat(y.double())))

# spot checks of the behaviours the header lists
assert F.interpolate(torch.zeros(1, 1, 5), scale_factor=1.4).shape[-1] == 7
x = torch.arange(7, dtype=D).reshape(1, 1, 7)
want_double = [math.floor(i * (1.0 / (17 / 6))) for i in range(19)]
assert F.interpolate(x, scale_factor=17 / 6).reshape(-1).long().tolist() != want_double
assert torch.equal(F.interpolate(x, scale_factor=1.05, mode="linear"), x)

with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_interpolate.json", "w") as fh:
    json.dump({"torch": torch.__version__, "f64": f64, "f64_forward_only": forward_only, "f32": f32}, fh,
              separators=(",", ":"))
    fh.write("\n")
print(len(f64), "f64 cases,", len(forward_only), "forward-only f64 cases,", len(f32), "f32 cases")
