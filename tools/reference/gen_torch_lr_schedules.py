"""Writes tests/data/reference/torch_lr_schedules.json: the lr of each param group after every
step() of PyTorch's ExponentialLR, CosineAnnealingLR (alone, past two periods, and chained with
ExponentialLR on one optimizer) and LambdaLR, for tests/optim/test_lr_scheduler.cpp. Run once by
hand; the tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_lr_schedules.py tests/data/reference
"""
import json
import sys

import torch

STEPS = 25


def run(make, lrs=(0.1, 0.03)):
    params = [torch.nn.Parameter(torch.zeros(1)) for _ in lrs]
    opt = torch.optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(params, lrs)])
    scheds = make(opt)
    out = [[g["lr"] for g in opt.param_groups]]
    for _ in range(STEPS):
        opt.step()
        for s in scheds:
            s.step()
        out.append([g["lr"] for g in opt.param_groups])
    return out


cases = {
    "exponential_0.9": run(lambda o: [torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.9)]),
    "cosine_tmax5_eta0.01": run(lambda o: [torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=5, eta_min=0.01)]),
    "cosine_tmax7": run(lambda o: [torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=7)]),
    "cosine_tmax4_then_exponential_0.95": run(lambda o: [torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=4, eta_min=0.001),
                                                         torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.95)]),
    "lambda_inverse_and_square": run(lambda o: [torch.optim.lr_scheduler.LambdaLR(
        o, lr_lambda=[lambda t: 1.0 / (1.0 + t), lambda t: 0.97 ** (t * t)])]),
}
with open(f"{sys.argv[1]}/torch_lr_schedules.json", "w") as f:
    json.dump({"generator": f"torch {torch.__version__}", "steps": STEPS, "lrs": [0.1, 0.03], "cases": cases}, f,
              indent=1)
print(len(cases), "cases")
