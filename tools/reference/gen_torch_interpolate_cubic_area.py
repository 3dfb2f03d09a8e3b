"""Writes tests/data/reference/torch_interpolate_cubic_area.json: torch.nn.functional.interpolate in
the modes "bicubic" ([N, C, H, W]; align_corners False / True; size or scale_factor, up and down,
recompute_scale_factor, an output size equal to the input's with a scale factor other than 1),
"area" ([N, C, L] and [N, C, H, W], up and down, sizes that do not divide), and on [N, C, D, H, W]
"trilinear", "nearest" and "nearest-exact", on f64 inputs, with the
gradient of x for sum(y * r), for tests/ops/test_interpolate_cubic_area.cpp. Run once by hand; the
tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_interpolate_cubic_area.py tests/data/reference
"""
import json
import sys

import torch
import torch.nn.functional as F

torch.set_num_threads(1)
torch.manual_seed(31)
D = torch.float64
flat = lambda t: t.detach().reshape(-1).tolist()

# name, input shape, size, scale_factor, mode, align_corners, recompute_scale_factor
CASES = (
    ("bicubic_up_2", [1, 2, 4, 5], None, [2.0], "bicubic", False, None),
    ("bicubic_down_size", [2, 1, 7, 6], [3, 4], None, "bicubic", False, None),
    ("bicubic_align_corners_up", [1, 2, 3, 4], [7, 5], None, "bicubic", True, None),
    ("bicubic_align_corners_scale", [1, 1, 5, 4], None, [1.7, 0.6], "bicubic", True, None),
    ("bicubic_scale_recompute", [1, 2, 5, 3], None, [1.3, 2.4], "bicubic", False, True),
    ("bicubic_scale_not_recomputed", [1, 1, 5, 3], None, [1.3, 2.4], "bicubic", False, False),
    ("bicubic_same_size_other_scale", [1, 1, 5, 6], None, [1.1, 1.5], "bicubic", False, False),
    ("bicubic_to_1x1", [1, 2, 4, 3], [1, 1], None, "bicubic", False, None),
    ("area_2d_down", [2, 2, 7, 9], [3, 4], None, "area", None, None),
    ("area_2d_up", [1, 2, 3, 2], [5, 7], None, "area", None, None),
    ("area_2d_scale", [1, 1, 6, 5], None, [0.5], "area", None, None),
    ("area_1d_down", [2, 3, 10], [4], None, "area", None, None),
    ("area_1d_up", [1, 2, 3], [8], None, "area", None, None),
    # Appended later (the cases above keep their random draws): 5-D inputs.
    ("trilinear_up_2", [1, 2, 3, 4, 2], None, [2.0], "trilinear", False, None),
    ("trilinear_size_align_corners", [2, 1, 4, 3, 5], [2, 5, 3], None, "trilinear", True, None),
    ("trilinear_scales_recompute", [1, 1, 3, 5, 4], None, [1.5, 0.6, 1.3], "trilinear", False, True),
    ("nearest_3d", [1, 2, 3, 2, 4], [5, 3, 2], None, "nearest", None, None),
    ("nearest_exact_3d", [1, 1, 4, 3, 3], None, [0.75, 1.7, 2.0], "nearest-exact", None, None),
)

cases = []
for name, shape, size, scale, mode, align, recompute in CASES:
    x = torch.round(torch.randn(*shape, dtype=D) * 1000) / 1000
    x.requires_grad_(True)
    kw = {"mode": mode}
    if align is not None:
        kw["align_corners"] = align
    if recompute is not None:
        kw["recompute_scale_factor"] = recompute
    if size is not None:
        kw["size"] = tuple(size)
    else:
        kw["scale_factor"] = scale[0] if len(scale) == 1 else tuple(scale)
    y = F.interpolate(x, **kw)
    r = torch.round(torch.randn(y.shape, dtype=D) * 1000) / 1000
    (g,) = torch.autograd.grad((y * r).sum(), [x])
    cases.append({"name": name, "mode": mode, "shape": shape, "size": size, "scale_factor": scale,
                  "align_corners": align, "recompute_scale_factor": recompute,
                  "x": flat(x), "y_shape": list(y.shape), "y": flat(y), "r": flat(r), "grad_x": flat(g)})
    print(f"{name}: {shape} -> {list(y.shape)}")

with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_interpolate_cubic_area.json", "w") as fh:
    json.dump({"torch": torch.__version__, "cases": cases}, fh, separators=(",", ":"))
    fh.write("\n")
print(len(cases), "cases")
