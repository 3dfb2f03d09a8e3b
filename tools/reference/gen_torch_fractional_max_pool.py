"""Writes tests/data/reference/torch_fractional_max_pool.json: torch.nn.functional.fractional_max_pool2d/3d
with given random samples (`_random_samples`), return_indices=True, for
tests/nn/test_fractional_max_pool.cpp: the pooled values, the indices and the gradient of
sum(y * r) w.r.t. x, in f64 (distinct values; one case of small integers, with ties) and in f32
(the window starts are computed in the input's dtype). Run once by hand; the tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_fractional_max_pool.py tests/data/reference
"""
import json
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(71)
flat = lambda t: t.detach().reshape(-1).tolist()
cases = []
# (dims, kernel, output_size, output_ratio, input shape, dtype, ties)
for dims, k, size, ratio, shape, dt, ties in (
        (2, 2, (5, 4), None, (2, 3, 9, 8), torch.float64, False),
        (2, (3, 2), None, (0.5, 0.7), (1, 2, 11, 10), torch.float64, False),
        (2, 3, (4, 4), None, (3, 7, 6), torch.float64, False),  # unbatched
        (2, 2, (6, 5), None, (2, 2, 8, 7), torch.float64, True),
        (2, 2, (9, 7), None, (4, 3, 17, 13), torch.float32, False),
        (3, 2, (3, 4, 3), None, (1, 2, 6, 7, 5), torch.float64, False),
        (3, (2, 3, 2), None, (0.6, 0.5, 0.75), (2, 1, 7, 9, 8), torch.float64, False),
        (3, 2, (2, 3, 3), None, (2, 5, 6, 5), torch.float64, True),  # unbatched, ties
):
    numel = torch.Size(shape).numel()
    if ties:
        x = torch.randint(0, 3, shape).to(dt)
    else:
        x = (torch.randperm(numel, dtype=torch.float64).reshape(shape) / 7.0 - 3.0).to(dt)
    x.requires_grad_(True)
    batched = len(shape) == dims + 2
    samples = torch.rand(shape[0] if batched else 1, shape[1] if batched else shape[0], dims, dtype=dt)
    fn = F.fractional_max_pool2d if dims == 2 else F.fractional_max_pool3d
    y, i = fn(x, k, output_size=size, output_ratio=ratio, return_indices=True, _random_samples=samples)
    r = torch.randn(y.shape, dtype=dt)
    (g,) = torch.autograd.grad((y * r).sum(), [x])
    cases.append({"dims": dims, "kernel": list(k) if isinstance(k, tuple) else [k] * dims,
                  "output_size": list(size) if size else None, "output_ratio": list(ratio) if ratio else None,
                  "dtype": "f64" if dt == torch.float64 else "f32", "x_shape": list(shape), "x": flat(x),
                  "samples_shape": list(samples.shape), "samples": flat(samples), "y_shape": list(y.shape),
                  "y": flat(y), "indices": flat(i), "r": flat(r), "grad": flat(g)})
# f32 samples where the window starts computed in f32 differ from those computed in f64 (a start
# that lands on an integer in one and just below it in the other): PyTorch uses the input's dtype.
def starts(u, n_in, k, n_out, dt):
    a = torch.tensor(n_in - k, dtype=dt) / torch.tensor(n_out - 1, dtype=dt)
    i = torch.arange(n_out - 1, dtype=dt)
    return (torch.floor((i + u.to(dt)) * a) - torch.floor(u.to(dt) * a)).tolist()
shape, size = (1, 4, 31, 29), (10, 13)
picked = []
while len(picked) < 2 * shape[1]:
    u = torch.rand((), dtype=torch.float32)
    dim_in, dim_out = (shape[3], size[1]) if len(picked) % 2 == 0 else (shape[2], size[0])
    if starts(u, dim_in, 2, dim_out, torch.float32) != starts(u, dim_in, 2, dim_out, torch.float64):
        picked.append(u.item())
samples = torch.tensor(picked, dtype=torch.float32).reshape(1, shape[1], 2)
x = (torch.randperm(torch.Size(shape).numel(), dtype=torch.float64).reshape(shape) / 7.0 - 3.0).float().requires_grad_(True)
y, i = F.fractional_max_pool2d(x, 2, output_size=size, return_indices=True, _random_samples=samples)
r = torch.randn(y.shape, dtype=torch.float32)
(g,) = torch.autograd.grad((y * r).sum(), [x])
cases.append({"dims": 2, "kernel": [2, 2], "output_size": list(size), "output_ratio": None, "dtype": "f32",
              "x_shape": list(shape), "x": flat(x), "samples_shape": list(samples.shape), "samples": flat(samples),
              "y_shape": list(y.shape), "y": flat(y), "indices": flat(i), "r": flat(r), "grad": flat(g)})
with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_fractional_max_pool.json", "w") as fh:
    json.dump({"torch": torch.__version__, "cases": cases}, fh, separators=(",", ":"))
    fh.write("\n")
print(len(cases), "cases")
