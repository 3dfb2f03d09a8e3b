"""Writes tests/data/reference/torch_grid_sample.json: torch.nn.functional.grid_sample (4-D: bilinear,
nearest and bicubic; 5-D: trilinear and nearest; zeros, border and reflection padding;
align_corners both ways; grids reaching past the border) and affine_grid (4-D and 5-D) in f64, with the gradients of sum(y * r) w.r.t. the input and the grid
(affine_grid: w.r.t. theta), for tests/ops/test_grid_sample.cpp. Run once by hand; the tests need
no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_grid_sample.py tests/data/reference
"""
import json
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(97)
D = torch.float64
flat = lambda t: t.detach().reshape(-1).tolist()
cases = []


def add_case(mode, padding, align, x_shape, grid_shape):
    """One grid_sample case: a random input, a grid reaching past the border, the gradients."""
    x = torch.randn(*x_shape, dtype=D, requires_grad=True)
    grid = (torch.rand(*grid_shape, dtype=D) * 3.2 - 1.6).requires_grad_(True)
    y = F.grid_sample(x, grid, mode=mode, padding_mode=padding, align_corners=align)
    r = torch.randn(y.shape, dtype=D)
    gx, gg = torch.autograd.grad((y * r).sum(), [x, grid])
    cases.append({"mode": mode, "padding": padding, "align_corners": align, "x_shape": list(x.shape),
                  "x": flat(x), "grid_shape": list(grid.shape), "grid": flat(grid), "y_shape": list(y.shape),
                  "y": flat(y), "r": flat(r), "grad_x": flat(gx), "grad_grid": flat(gg)})


PADDINGS = ("zeros", "border", "reflection")
# 4-D bilinear and nearest; then bicubic and 5-D, appended after them so their draws stay
for mode in ("bilinear", "nearest"):
    for padding in PADDINGS:
        for align in (False, True):
            add_case(mode, padding, align, (2, 3, 5, 6), (2, 4, 7, 2))
for padding in PADDINGS:
    for align in (False, True):
        add_case("bicubic", padding, align, (2, 3, 5, 6), (2, 4, 7, 2))
for mode in ("bilinear", "nearest"):  # 5-D: trilinear and nearest
    for padding in PADDINGS:
        for align in (False, True):
            add_case(mode, padding, align, (2, 2, 3, 4, 5), (2, 2, 3, 4, 3))
affine = []
for size, align in (((2, 3, 4, 5), False), ((2, 3, 4, 5), True), ((1, 1, 1, 3), False), ((2, 1, 3, 4, 5), False),
                    ((1, 2, 2, 1, 3), True)):
    nd = len(size) - 2
    theta = torch.randn(size[0], nd, nd + 1, dtype=D, requires_grad=True)
    grid = F.affine_grid(theta, size, align_corners=align)
    r = torch.randn(grid.shape, dtype=D)
    (gt,) = torch.autograd.grad((grid * r).sum(), [theta])
    affine.append({"size": list(size), "align_corners": align, "theta": flat(theta), "grid_shape": list(grid.shape),
                   "grid": flat(grid), "r": flat(r), "grad_theta": flat(gt)})
with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_grid_sample.json", "w") as fh:
    json.dump({"torch": torch.__version__, "cases": cases, "affine": affine}, fh, separators=(",", ":"))
    fh.write("\n")
print(len(cases), "grid_sample cases,", len(affine), "affine_grid cases")
