"""Writes tests/data/reference/torch_ctc.json: torch.nn.functional.ctc_loss in f64 on
log_softmax(logits) — reductions none/sum/mean, padded [N, S] and concatenated 1-D targets,
different input lengths, repeated labels, an empty target, an input of length 0, another blank,
an impossible alignment with zero_infinity, unbatched input — with the gradient with respect to the
logits (through the log_softmax: PyTorch's ctc backward returns a gradient that already includes
it), for tests/ops/test_ctc_loss.cpp. Run once by hand; the tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_ctc.py tests/data/reference
"""
import json
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(113)
torch.set_num_threads(1)
D = torch.float64
flat = lambda t: t.detach().reshape(-1).tolist()

# name, T, N, C, targets (lists), input lengths, blank, reduction, concatenated, zero_infinity, unbatched
CASES = (
    ("mean_padded", 12, 3, 5, [[1, 2, 2], [3], [4, 1, 3, 2]], [12, 9, 11], 0, "mean", False, False, False),
    ("sum_concatenated_repeats", 10, 2, 4, [[1, 1, 2, 2], [3, 3]], [10, 7], 0, "sum", True, False, False),
    ("none_empty_target_and_no_input", 6, 3, 4, [[], [2, 1], []], [6, 5, 0], 0, "none", False, False, False),
    ("none_blank_last_class", 8, 2, 5, [[0, 1, 3], [2]], [8, 6], 4, "none", True, False, False),
    ("mean_zero_infinity_impossible", 5, 2, 4, [[1, 1, 2, 2, 3], [1, 2]], [5, 5], 0, "mean", False, True, False),
    ("none_unbatched", 7, 1, 6, [[5, 2, 2, 4]], [7], 0, "none", True, False, True),
)

# Appended later (a review's cases): masked logits (-inf log-probabilities) with targets that still
# align, and an input of length 0 with a non-empty target under zero_infinity.
CASES = CASES + (
    ("none_masked_logits", 6, 2, 4, [[1, 2, 3], [2]], [6, 5], 0, "none", False, False, False),
    ("sum_zero_infinity_no_input", 5, 2, 4, [[1, 2], [3]], [0, 5], 0, "sum", True, True, False),
)
MASKED = {"none_masked_logits": [(2, 0, [0, 1, 2]), (4, 1, [1, 3])]}  # (t, n, classes set to -inf)

cases = []
for name, T, N, C, targets, in_lens, blank, reduction, concatenated, zero_inf, unbatched in CASES:
    logits = torch.randn(T, N, C, dtype=D) if not unbatched else torch.randn(T, C, dtype=D)
    for t, n, cls in MASKED.get(name, []):
        logits[t, n, cls] = float("-inf")
    logits.requires_grad_(True)
    lp = F.log_softmax(logits, -1)
    tl = [len(t) for t in targets]
    if concatenated or unbatched:
        tgt = torch.tensor([v for t in targets for v in t], dtype=torch.long)
    else:
        S = max(tl)
        tgt = torch.tensor([t + [1] * (S - len(t)) for t in targets], dtype=torch.long)  # padding: any class
    loss = F.ctc_loss(lp, tgt, torch.tensor(in_lens if not unbatched else in_lens[0]),
                      torch.tensor(tl if not unbatched else tl[0]), blank=blank, reduction=reduction,
                      zero_infinity=zero_inf)
    r = torch.randn(loss.shape, dtype=D)
    (g,) = torch.autograd.grad((loss * r).sum(), [logits])
    # JSON has no infinities: a masked logit is written as null.
    logit_values = [None if v == float("-inf") else v for v in flat(logits)]
    cases.append({"name": name, "logits_shape": list(logits.shape), "logits": logit_values,
                  "targets": flat(tgt), "targets_shape": list(tgt.shape), "input_lengths": in_lens,
                  "target_lengths": tl, "blank": blank, "reduction": reduction, "zero_infinity": zero_inf,
                  "loss": flat(loss), "loss_shape": list(loss.shape), "r": flat(r),
                  # PyTorch's gradient at a masked logit is NaN (its backward computes -inf - -inf): null
                  "grad_logits": [None if v != v else v for v in flat(g)]})
    print(name, flat(loss)[:4])

with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_ctc.json", "w") as fh:
    json.dump({"torch": torch.__version__, "cases": cases}, fh, separators=(",", ":"))
    fh.write("\n")
print(len(cases), "cases")
