"""Writes tests/data/reference/torch_lr_schedules.json: the lr of each param group after every
step() of PyTorch's ExponentialLR, CosineAnnealingLR (alone, past two periods, and chained with
ExponentialLR on one optimizer), LambdaLR, LinearLR, ConstantLR, CosineAnnealingWarmRestarts,
PolynomialLR, SequentialLR, CyclicLR (every mode, a custom scale function, and with the momentum
or beta1 it cycles: "momentum_cases") and ChainedScheduler, and of
ReduceLROnPlateau over fixed metric
sequences, for tests/optim/test_lr_scheduler.cpp. Run once by
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
    "linear_start0.25_iters4": run(lambda o: [torch.optim.lr_scheduler.LinearLR(o, start_factor=0.25, total_iters=4)]),
    "linear_default_then_exponential_0.9": run(lambda o: [torch.optim.lr_scheduler.LinearLR(o),
                                                          torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.9)]),
    "constant_0.5_iters4": run(lambda o: [torch.optim.lr_scheduler.ConstantLR(o, factor=0.5, total_iters=4)]),
    "constant_default_then_exponential_0.9": run(lambda o: [torch.optim.lr_scheduler.ConstantLR(o),
                                                            torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.9)]),
    "warm_restarts_t3": run(lambda o: [torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=3, eta_min=0.002)]),
    "warm_restarts_t2_mult2": run(lambda o: [torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=2, T_mult=2)]),
    "sequential_constant2_warm_restarts": run(lambda o: [torch.optim.lr_scheduler.SequentialLR(
        o, [torch.optim.lr_scheduler.ConstantLR(o, factor=0.1, total_iters=2),
            torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=4, T_mult=2, eta_min=0.001)], milestones=[2])]),
    "polynomial_iters6_power2": run(lambda o: [torch.optim.lr_scheduler.PolynomialLR(o, total_iters=6, power=2.0)]),
    "polynomial_default_then_exponential_0.9": run(lambda o: [torch.optim.lr_scheduler.PolynomialLR(o),
                                                              torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.9)]),
    "sequential_linear3_cosine8": run(lambda o: [torch.optim.lr_scheduler.SequentialLR(
        o, [torch.optim.lr_scheduler.LinearLR(o, start_factor=0.2, total_iters=3),
            torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=8, eta_min=0.001)], milestones=[3])]),
    "sequential_exponential_step_linear": run(lambda o: [torch.optim.lr_scheduler.SequentialLR(
        o, [torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.8),
            torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5),
            torch.optim.lr_scheduler.LinearLR(o, start_factor=0.5, total_iters=4)], milestones=[4, 10])]),
    "cyclic_triangular_up3_down5": run(lambda o: [torch.optim.lr_scheduler.CyclicLR(
        o, base_lr=0.01, max_lr=[0.1, 0.05], step_size_up=3, step_size_down=5, cycle_momentum=False)]),
    "cyclic_triangular2_up4": run(lambda o: [torch.optim.lr_scheduler.CyclicLR(
        o, base_lr=[0.02, 0.001], max_lr=0.2, step_size_up=4, mode="triangular2", cycle_momentum=False)]),
    "cyclic_exp_range_up3_down2": run(lambda o: [torch.optim.lr_scheduler.CyclicLR(
        o, base_lr=0.01, max_lr=0.1, step_size_up=3, step_size_down=2, mode="exp_range", gamma=0.95,
        cycle_momentum=False)]),
    "cyclic_scale_fn_iterations": run(lambda o: [torch.optim.lr_scheduler.CyclicLR(
        o, base_lr=0.01, max_lr=0.1, step_size_up=2, scale_fn=lambda x: 1.0 / (1.0 + 0.1 * x),
        scale_mode="iterations", cycle_momentum=False)]),
    # CyclicLR sets the lr to base_lr before initial_lr is recorded: ConstantLR restarts from it.
    "sequential_cyclic_constant": run(lambda o: [torch.optim.lr_scheduler.SequentialLR(
        o, [torch.optim.lr_scheduler.CyclicLR(o, base_lr=0.01, max_lr=0.1, step_size_up=2, cycle_momentum=False),
            torch.optim.lr_scheduler.ConstantLR(o, factor=0.5, total_iters=2)], milestones=[3])]),
    "chained_constant_exponential": run(lambda o: [torch.optim.lr_scheduler.ChainedScheduler([
        torch.optim.lr_scheduler.ConstantLR(o, factor=0.1, total_iters=2),
        torch.optim.lr_scheduler.ExponentialLR(o, gamma=0.9)])]),
    "chained_linear_step_polynomial": run(lambda o: [torch.optim.lr_scheduler.ChainedScheduler([
        torch.optim.lr_scheduler.LinearLR(o, start_factor=0.5, total_iters=3),
        torch.optim.lr_scheduler.StepLR(o, step_size=4, gamma=0.5),
        torch.optim.lr_scheduler.PolynomialLR(o, total_iters=20, power=1.5)])]),
}


def run_momentum(kind, make, lrs=(0.1, 0.03)):
    """Like run(), with the momentum (SGD) or beta1 (Adam) of each group recorded too."""
    params = [torch.nn.Parameter(torch.zeros(1)) for _ in lrs]
    groups = [{"params": [p], "lr": lr} for p, lr in zip(params, lrs)]
    opt = torch.optim.SGD(groups, momentum=0.5) if kind == "sgd" else torch.optim.Adam(groups)
    key = (lambda g: g["momentum"]) if kind == "sgd" else (lambda g: g["betas"][0])
    sched = make(opt)
    out, moms = [[g["lr"] for g in opt.param_groups]], [[key(g) for g in opt.param_groups]]
    for _ in range(STEPS):
        opt.step()
        sched.step()
        out.append([g["lr"] for g in opt.param_groups])
        moms.append([key(g) for g in opt.param_groups])
    return {"optimizer": kind, "lrs": out, "momentums": moms}


momentum_cases = {
    "cyclic_sgd_momentum_up3_down4": run_momentum("sgd", lambda o: torch.optim.lr_scheduler.CyclicLR(
        o, base_lr=0.01, max_lr=0.1, step_size_up=3, step_size_down=4)),
    "cyclic_adam_beta1_triangular2": run_momentum("adam", lambda o: torch.optim.lr_scheduler.CyclicLR(
        o, base_lr=0.001, max_lr=[0.01, 0.004], step_size_up=2, mode="triangular2", base_momentum=0.85,
        max_momentum=0.95)),
    # Appended later: momenta per param group.
    "cyclic_sgd_momentum_per_group": run_momentum("sgd", lambda o: torch.optim.lr_scheduler.CyclicLR(
        o, base_lr=0.01, max_lr=0.1, step_size_up=2, step_size_down=3, base_momentum=[0.8, 0.6],
        max_momentum=[0.9, 0.95])),
    "onecycle_adam_beta1_per_group": run_momentum("adam", lambda o: torch.optim.lr_scheduler.OneCycleLR(
        o, max_lr=[0.1, 0.05], total_steps=STEPS + 1, pct_start=0.4, base_momentum=[0.85, 0.7],
        max_momentum=[0.95, 0.9])),
}

METRICS = [1.0, 0.9, 0.95, 0.93, 0.92, 0.5, 0.6, 0.6, 0.6, 0.6, 0.45, 0.45, 0.45, 0.45, 0.45, 0.45, 0.2,
           0.3, 0.3, 0.3, 0.3, 0.3, float("nan"), 0.3, 0.3]


def plateau(options, metrics, lrs=(0.1, 0.03)):
    params = [torch.nn.Parameter(torch.zeros(1)) for _ in lrs]
    opt = torch.optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(params, lrs)])
    sched = torch.optim.lr_scheduler.ReduceLROnPlateau(opt, **options)
    out = []
    for m in metrics:
        opt.step()
        sched.step(m)
        out.append([g["lr"] for g in opt.param_groups])
    return {"options": options, "metrics": [m if m == m else "nan" for m in metrics], "lrs": out}


plateaus = {
    "min_rel": plateau(dict(mode="min", factor=0.5, patience=2, threshold=0.1, threshold_mode="rel", cooldown=1,
                            min_lr=[0.01, 0.0]), METRICS),
    "max_abs_eps": plateau(dict(mode="max", factor=0.1, patience=1, threshold=0.01, threshold_mode="abs", cooldown=0,
                                min_lr=0.0009, eps=1e-3), [-m if m == m else m for m in METRICS]),
    "defaults": plateau({}, [1.0] * 25),
}
with open(f"{sys.argv[1]}/torch_lr_schedules.json", "w") as f:
    json.dump({"generator": f"torch {torch.__version__}", "steps": STEPS, "lrs": [0.1, 0.03], "cases": cases,
               "momentum_cases": momentum_cases, "plateau": plateaus}, f, indent=1)
print(len(cases), "cases")
