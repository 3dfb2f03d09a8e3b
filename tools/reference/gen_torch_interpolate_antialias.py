"""Writes tests/data/reference/torch_interpolate_antialias.json: torch.nn.functional.interpolate with
antialias=True in the modes "bilinear", "bicubic" and "lanczos" on [N, C, H, W] — shrinking by
whole and fractional factors, enlarging, a dim that keeps its size, align_corners, scale factors
(recomputed or not), heavy shrinking (many taps) — in f64 with the gradient of x for sum(y * r),
and a few in f32 (values only), for tests/ops/test_interpolate_antialias.cpp. Run once by hand; the
tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_interpolate_antialias.py tests/data/reference
"""
import json
import sys

import torch
import torch.nn.functional as F

torch.set_num_threads(1)
torch.manual_seed(53)
flat = lambda t: t.detach().reshape(-1).tolist()

# name, dtype, input shape, size, scale_factor, mode, align_corners, recompute_scale_factor
CASES = (
    ("bilinear_half", "f64", [2, 2, 8, 10], [4, 5], None, "bilinear", False, None),
    ("bilinear_fraction", "f64", [1, 3, 13, 9], [5, 4], None, "bilinear", False, None),
    ("bilinear_up_and_down", "f64", [1, 2, 6, 12], [9, 5], None, "bilinear", False, None),
    ("bilinear_width_kept", "f64", [1, 1, 11, 7], [4, 7], None, "bilinear", False, None),
    ("bilinear_align_corners", "f64", [1, 2, 9, 11], [4, 3], None, "bilinear", True, None),
    ("bilinear_heavy_shrink", "f64", [1, 1, 40, 33], [3, 2], None, "bilinear", False, None),
    ("bicubic_third", "f64", [2, 1, 12, 15], [4, 5], None, "bicubic", False, None),
    ("bicubic_up", "f64", [1, 2, 4, 5], [7, 9], None, "bicubic", False, None),
    ("bicubic_scale_not_recomputed", "f64", [1, 2, 17, 23], None, [0.3, 0.45], "bicubic", False, False),
    ("bicubic_scale_recomputed", "f64", [1, 1, 17, 23], None, [0.3, 0.45], "bicubic", False, True),
    ("bicubic_align_corners", "f64", [1, 1, 10, 14], [3, 6], None, "bicubic", True, None),
    ("lanczos_down", "f64", [2, 2, 14, 11], [5, 4], None, "lanczos", False, None),
    ("lanczos_up", "f64", [1, 1, 5, 6], [8, 13], None, "lanczos", False, None),
    ("lanczos_scale", "f64", [1, 2, 19, 16], None, [0.37], "lanczos", False, False),
    ("bilinear_f32", "f32", [2, 3, 24, 18], [7, 5], None, "bilinear", False, None),
    ("bicubic_f32", "f32", [1, 3, 21, 30], [8, 11], None, "bicubic", False, None),
    ("lanczos_f32", "f32", [1, 2, 25, 20], [6, 9], None, "lanczos", False, None),
)

cases = []
for name, dt, shape, size, scale, mode, align, recompute in CASES:
    x = torch.randn(*shape, dtype=torch.float64 if dt == "f64" else torch.float32)
    x.requires_grad_(True)
    kw = {"mode": mode, "antialias": True}
    if align:
        kw["align_corners"] = align
    if recompute is not None:
        kw["recompute_scale_factor"] = recompute
    if size is not None:
        kw["size"] = tuple(size)
    else:
        kw["scale_factor"] = scale[0] if len(scale) == 1 else tuple(scale)
    y = F.interpolate(x, **kw)
    r = torch.randn(y.shape, dtype=x.dtype)
    (g,) = torch.autograd.grad((y * r).sum(), [x])
    cases.append({"name": name, "dtype": dt, "shape": shape, "size": size, "scale_factor": scale, "mode": mode,
                  "align_corners": align, "recompute_scale_factor": recompute, "x": flat(x), "y": flat(y),
                  "y_shape": list(y.shape), "r": flat(r), "grad_x": flat(g)})
    print(name, list(y.shape))

with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_interpolate_antialias.json", "w") as fh:
    json.dump({"torch": torch.__version__, "cases": cases}, fh, separators=(",", ":"))
    fh.write("\n")
print(len(cases), "cases")
