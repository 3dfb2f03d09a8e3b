"""Writes tests/data/reference/torch_fold.json: torch.nn.functional.unfold and fold with kernels,
dilations, paddings and strides (overlapping, gapped and padded blocks), batched and unbatched, in
f64 with the gradients of sum(y * r), and in f32 (fold's sums in PyTorch's order: bit for bit),
for tests/nn/test_fold.cpp. Run once by hand; the tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_fold.py tests/data/reference
"""
import json
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(71)
torch.set_num_threads(1)
flat = lambda t: t.detach().reshape(-1).tolist()

# name, op, image shape (N, C, H, W or C, H, W), kernel, dilation, padding, stride, dtype
CASES = (
    ("unfold_3x3", "unfold", [2, 3, 5, 6], (3, 3), (1, 1), (0, 0), (1, 1), torch.float64),
    ("unfold_2x3_dilated_padded_strided", "unfold", [2, 2, 7, 8], (2, 3), (2, 1), (1, 2), (2, 3), torch.float64),
    ("unfold_unbatched_stride_gaps", "unfold", [3, 6, 5], (2, 2), (1, 1), (0, 1), (3, 2), torch.float64),
    ("fold_3x3_overlap", "fold", [2, 3, 5, 6], (3, 3), (1, 1), (0, 0), (1, 1), torch.float64),
    ("fold_2x3_dilated_padded_strided", "fold", [2, 2, 7, 8], (2, 3), (2, 1), (1, 2), (2, 3), torch.float64),
    ("fold_unbatched_padded_overlap", "fold", [2, 4, 5], (3, 2), (1, 2), (2, 1), (1, 2), torch.float64),
    ("fold_stride_larger_than_kernel", "fold", [1, 2, 9, 7], (2, 2), (1, 1), (0, 0), (3, 3), torch.float64),
    ("fold_f32_overlap_padded", "fold", [2, 3, 9, 9], (3, 3), (1, 1), (1, 1), (1, 1), torch.float32),
    ("unfold_f32", "unfold", [1, 2, 6, 6], (3, 2), (1, 2), (1, 0), (2, 1), torch.float32),
    # Appended later: padding wider than the blocks' span (taps partly or wholly in the padding), every
    # block in the padding, and blocks that tile the image (stride = kernel: the permute path).
    ("fold_padding_wider_than_span", "fold", [1, 2, 4, 4], (5, 5), (1, 1), (2, 2), (4, 4), torch.float64),
    ("fold_taps_past_the_image", "fold", [2, 1, 3, 3], (7, 7), (1, 1), (2, 2), (1, 1), torch.float64),
    ("fold_every_block_in_padding", "fold", [1, 2, 1, 1], (2, 2), (1, 1), (2, 2), (4, 4), torch.float64),
    ("fold_tiles_padded", "fold", [2, 3, 5, 7], (2, 3), (1, 1), (1, 1), (2, 3), torch.float64),
    ("fold_tiles_f32", "fold", [1, 2, 4, 6], (2, 3), (1, 1), (0, 0), (2, 3), torch.float32),
)

cases = []
for name, op, image, k, d, p, s, dt in CASES:
    kw = dict(kernel_size=k, dilation=d, padding=p, stride=s)
    if op == "unfold":
        x = torch.randn(image, dtype=dt, requires_grad=True)
        y = F.unfold(x, **kw)
    else:
        # the blocks of an image of this shape
        cols_shape = F.unfold(torch.zeros(image if len(image) == 4 else [1] + image, dtype=dt), **kw).shape
        cols_shape = list(cols_shape) if len(image) == 4 else list(cols_shape[1:])
        x = torch.randn(cols_shape, dtype=dt, requires_grad=True)
        y = F.fold(x, output_size=image[-2:], **kw)
    r = torch.randn(y.shape, dtype=dt)
    (gx,) = torch.autograd.grad((y * r).sum(), [x])
    cases.append({"name": name, "op": op, "dtype": "f64" if dt == torch.float64 else "f32", "image": image,
                  "kernel": k, "dilation": d, "padding": p, "stride": s, "x_shape": list(x.shape),
                  "y_shape": list(y.shape), "x": flat(x), "y": flat(y), "r": flat(r), "grad_x": flat(gx)})
    print(name, list(x.shape), "->", list(y.shape))

with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_fold.json", "w") as fh:
    json.dump({"torch": torch.__version__, "cases": cases}, fh, separators=(",", ":"))
    fh.write("\n")
print(len(cases), "cases")
