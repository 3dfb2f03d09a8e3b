"""Writes tests/data/reference/torch_embedding_bag.json: torch.nn.functional.embedding_bag in f64
(sum, mean and max; 1-D input with offsets, an empty bag, include_last_offset; 2-D input;
padding_idx, a bag of padding only; per_sample_weights; scale_grad_by_freq), with the gradients of sum(y * r) with
respect to the weight and the per-sample weights, for tests/nn/test_embedding_bag.cpp. Run once by
hand; the tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_embedding_bag.py tests/data/reference
"""
import json
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(83)
D = torch.float64
flat = lambda t: t.detach().reshape(-1).tolist()
V, E = 7, 4

# name, mode, input, offsets (None: 2-D input), include_last_offset, padding_idx, per-sample weights
CASES = (
    ("sum_offsets_empty_bag", "sum", [1, 2, 4, 5, 4, 3, 2, 6], [0, 3, 3, 5], False, None, False),
    ("mean_2d", "mean", [[0, 2, 4], [5, 5, 1], [6, 0, 3]], None, False, None, False),
    ("max_offsets_include_last", "max", [3, 1, 6, 6, 2, 0, 5], [0, 2, 5, 7], True, None, False),
    ("sum_per_sample_weights_padding", "sum", [1, 3, 0, 2, 3, 6], [0, 2, 4], False, 3, True),
    ("mean_padding_bag_of_padding_empty_last", "mean", [2, 0, 2, 2, 5, 1], [0, 2, 4, 6], False, 2, False),
    ("max_2d_padding", "max", [[1, 4, 4], [6, 6, 6], [0, 5, 2]], None, False, 6, False),
    ("mean_offsets_include_last_empty", "mean", [4, 2, 1, 0], [0, 1, 1, 4], True, None, False),
    ("sum_2d_per_sample_weights", "sum", [[3, 1], [0, 3], [2, 2]], None, False, None, True),
)
# scale_grad_by_freq (sum and mean; PyTorch refuses it with max): each lookup's weight gradient
# divided by how often its index occurs in the whole input, padding entries included.
FREQ_CASES = (
    ("freq_sum_offsets_empty_bag", "sum", [1, 2, 1, 5, 1, 3, 2, 0], [0, 3, 3, 5], False, None, False),
    ("freq_mean_2d_padding", "mean", [[0, 2, 4], [2, 2, 1], [6, 0, 2]], None, False, 2, False),
    ("freq_sum_psw_include_last", "sum", [4, 4, 0, 3, 4], [0, 2, 5], True, None, True),
    ("freq_mean_offsets_padding", "mean", [3, 0, 3, 3, 0, 5, 1], [0, 2, 4], False, 0, False),
)

cases = []
for scale_grad_by_freq, table in ((False, CASES), (True, FREQ_CASES)):
    for name, mode, inp, offs, include_last, pad, with_psw in table:
        weight = torch.randn(V, E, dtype=D, requires_grad=True)
        x = torch.tensor(inp)
        offsets = torch.tensor(offs) if offs is not None else None
        psw = torch.randn(x.shape, dtype=D, requires_grad=True) if with_psw else None
        y = F.embedding_bag(x, weight, offsets, mode=mode, per_sample_weights=psw, include_last_offset=include_last,
                            padding_idx=pad, scale_grad_by_freq=scale_grad_by_freq)
        r = torch.randn(y.shape, dtype=D)
        wrt = [weight] + ([psw] if with_psw else [])
        grads = torch.autograd.grad((y * r).sum(), wrt)
        cases.append({"name": name, "mode": mode, "input": flat(x), "input_shape": list(x.shape), "offsets": offs,
                      "include_last_offset": include_last, "padding_idx": pad, "weight": flat(weight),
                      "psw": flat(psw) if with_psw else None, "y": flat(y), "y_shape": list(y.shape), "r": flat(r),
                      "grad_weight": flat(grads[0]), "grad_psw": flat(grads[1]) if with_psw else None,
                      "scale_grad_by_freq": scale_grad_by_freq})
        print(name, list(y.shape))

with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_embedding_bag.json", "w") as fh:
    json.dump({"torch": torch.__version__, "V": V, "D": E, "cases": cases}, fh, separators=(",", ":"))
    fh.write("\n")
print(len(cases), "cases")
