#!/usr/bin/env python3
"""Writes tests/data/reference/optim_extra.txt: maximize, Adam's decoupled_weight_decay, RMSprop,
Adagrad, Adamax, NAdam, RAdam, Adadelta, Rprop, ASGD, Adafactor and Muon against a current PyTorch (torch.optim, foreach=False: the single-tensor code).

Run once by a developer, by hand, when a case is added or changed; never by the build or the tests:

    pip install torch                              # 2.6 or later (Adam's decoupled_weight_decay)
    python3 tools/reference/gen_torch_optim_extra.py [--out tests/data/reference]

The problem, the file format and the per-case tensors are gen_optim_reference.py's (its write_cases),
so tests/optim/test_optimizers.cpp runs these cases with the same code as optim.txt's. LAMB, which
PyTorch lacks, comes from that script's formula (lamb_step) with the gradient negated for maximize.
Every option of each case is written, so none falls back to a default.
"""
import argparse
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_optim_reference import RefWriter, i64, q, write_cases  # noqa: E402

torch.set_default_dtype(torch.float64)


def sgd(lr, momentum=0.0, dampening=0.0, nesterov=0, weight_decay=0.0, maximize=0):
    return dict(lr=lr, momentum=momentum, dampening=dampening, nesterov=nesterov, weight_decay=weight_decay,
                maximize=maximize)


def adam(lr, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, amsgrad=0, maximize=0, **extra):
    return dict(lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad,
                maximize=maximize, **extra)


def lamb(lr, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.01, bias_correction=1, maximize=0):
    return dict(lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay,
                bias_correction=bias_correction, maximize=maximize)


def rmsprop(lr, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=0, maximize=0):
    return dict(lr=lr, alpha=alpha, eps=eps, weight_decay=weight_decay, momentum=momentum, centered=centered,
                maximize=maximize)


def adagrad(lr, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10, maximize=0):
    return dict(lr=lr, lr_decay=lr_decay, weight_decay=weight_decay,
                initial_accumulator_value=initial_accumulator_value, eps=eps, maximize=maximize)


def adamax(lr, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, maximize=0):
    return dict(lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay, maximize=maximize)


def nadam(lr, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, momentum_decay=4e-3, decoupled_weight_decay=0,
          maximize=0):
    return dict(lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay, momentum_decay=momentum_decay,
                decoupled_weight_decay=decoupled_weight_decay, maximize=maximize)


def radam(lr, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, decoupled_weight_decay=0, maximize=0):
    return dict(lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay,
                decoupled_weight_decay=decoupled_weight_decay, maximize=maximize)


def adadelta(lr, rho=0.9, eps=1e-6, weight_decay=0.0, maximize=0):
    return dict(lr=lr, rho=rho, eps=eps, weight_decay=weight_decay, maximize=maximize)


def asgd(lr, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0.0, maximize=0):
    return dict(lr=lr, lambd=lambd, alpha=alpha, t0=t0, weight_decay=weight_decay, maximize=maximize)


def rprop(lr, etaminus=0.5, etaplus=1.2, step_size_min=1e-6, step_size_max=50.0, maximize=0):
    return dict(lr=lr, etaminus=etaminus, etaplus=etaplus, step_size_min=step_size_min, step_size_max=step_size_max,
                maximize=maximize)


def adafactor(lr, beta2_decay=-0.8, eps1=-1.0, eps2=1e-3, d=1.0, weight_decay=0.0, maximize=0):
    return dict(lr=lr, beta2_decay=beta2_decay, eps1=eps1, eps2=eps2, d=d, weight_decay=weight_decay,
                maximize=maximize)


def run_steps(opt, params, grads, steps):
    """Steps opt `steps` times with grads[k][t] on params[k]; returns each parameter's values after
    every step, stacked ([steps, ...])."""
    history = [[] for _ in params]
    for t in range(steps):
        for k, p in enumerate(params):
            p.grad = grads[k][t].clone()
        opt.step()
        for k, p in enumerate(params):
            history[k].append(p.detach().clone())
    return [torch.stack(h) for h in history]


def adafactor_shapes(w):
    """Adafactor on a 3-D parameter (factored over its last two dimensions, per leading index), a
    [1, 5] matrix and a 0-d parameter, with seeded gradients: what the quadratic problem's [3, 4]
    and [5] parameters do not reach. Written as adafactor_shapes.p<k>.{init,grads,steps,state.*}."""
    w.comment("""
Adafactor on shapes [2, 3, 4], [1, 5] and [] with seeded gradients (grads [steps, ...]) and options
lr 0.05, weight_decay 0.1, d 1.2: steps [steps, ...] are the parameters after each step.""")
    torch.manual_seed(2026)
    shapes = [(2, 3, 4), (1, 5), ()]
    steps = 6
    params = [q(torch.randn(s)) for s in shapes]
    grads = [[q(torch.randn(s) * (1.0 + 0.5 * t)) for t in range(steps)] for s in shapes]
    inits = [p.clone() for p in params]
    opt = torch.optim.Adafactor(params, lr=0.05, weight_decay=0.1, d=1.2, foreach=False)
    history = run_steps(opt, params, grads, steps)
    for k, p in enumerate(params):
        n = f"adafactor_shapes.p{k}"
        w.tensor(f"{n}.init", inits[k])
        w.tensor(f"{n}.grads", torch.stack(grads[k]))
        w.tensor(f"{n}.steps", history[k])
        st = opt.state[p]
        for key in sorted(st):
            if key == "step":
                w.tensor(f"{n}.state.step", i64(int(st[key])))
            elif st[key] is not None:
                w.tensor(f"{n}.state.{key}", st[key])


def ns_f64(grad, ns_coefficients, ns_steps, eps):
    """Muon's Newton-Schulz iteration (torch.optim._muon's order: normalise, then X = a X + (b G +
    c G G) X with G = X X^T, transposed when tall) in float64 instead of bfloat16."""
    a, b, c = ns_coefficients
    x = grad.to(torch.float64, copy=True)
    tall = x.size(0) > x.size(1)
    if tall:
        x = x.T
    x = x / x.norm().clamp(min=eps)
    for _ in range(ns_steps):
        g = x @ x.T
        x = torch.addmm(x, torch.addmm(g, g, g, beta=b, alpha=c), x, beta=a)
    return x.T if tall else x


def muon_cases(w):
    """torch.optim.Muon on a wide [3, 4], a tall [5, 2] (iterated transposed) and a square [6, 6]
    matrix with seeded gradients, a [4, 3] one whose gradients are 1e-6 times smaller (its norm
    under eps 1e-3: the floor of the normalisation) and a [2, 2] one with zero gradients (no update
    but the decay), 6 steps, four option sets; each once as PyTorch runs it (the
    iteration in bfloat16: muon.<case>.bf16.p<k>.steps) and once with the iteration in float64
    (muon.<case>.f64.p<k>.steps), the rest of the step unchanged."""
    import torch.optim._muon as muon_module
    w.comment("""
Muon on shapes [3, 4], [5, 2], [6, 6], [4, 3] (gradients 1e-6 smaller) and [2, 2] (zero gradients) with
seeded gradients (grads [steps, ...]); steps [steps, ...] are
the parameters after each step, with PyTorch's bfloat16 Newton-Schulz iteration (bf16) or the same
iteration in float64 (f64). Options per case: lr, weight_decay, momentum, nesterov, ns_a, ns_b, ns_c,
eps, ns_steps, adjust_lr (0 original, 1 match_rms_adamw, 2 spectral_unclamped).""")
    cases = [
        ("default", dict(lr=0.02), dict(lr=0.02, weight_decay=0.1, momentum=0.95, nesterov=1, ns=(3.4445, -4.7750, 2.0315),
                                         eps=1e-7, ns_steps=5, adjust_lr=0)),
        ("plain_match_rms", dict(lr=0.05, weight_decay=0.05, momentum=0.9, nesterov=False,
                                 adjust_lr_fn="match_rms_adamw"),
         dict(lr=0.05, weight_decay=0.05, momentum=0.9, nesterov=0, ns=(3.4445, -4.7750, 2.0315), eps=1e-7, ns_steps=5,
              adjust_lr=1)),
        ("spectral_custom", dict(lr=0.03, weight_decay=0.0, momentum=0.5, ns_coefficients=(2.0, -1.5, 0.5), eps=1e-3,
                                 ns_steps=3, adjust_lr_fn="spectral_unclamped"),
         dict(lr=0.03, weight_decay=0.0, momentum=0.5, nesterov=1, ns=(2.0, -1.5, 0.5), eps=1e-3, ns_steps=3,
              adjust_lr=2)),
        ("no_momentum", dict(lr=0.01, weight_decay=0.2, momentum=0.0),
         dict(lr=0.01, weight_decay=0.2, momentum=0.0, nesterov=1, ns=(3.4445, -4.7750, 2.0315), eps=1e-7, ns_steps=5,
              adjust_lr=0)),
    ]
    shapes = [(3, 4), (5, 2), (6, 6), (4, 3), (2, 2)]
    scales = [1.0, 1.0, 1.0, 1e-6, 0.0]
    steps = 6
    torch.manual_seed(2027)
    inits = [q(torch.randn(s)) for s in shapes]
    grads = [[q(torch.randn(s) * (1.0 + 0.5 * t)) * scale for t in range(steps)] for s, scale in zip(shapes, scales)]
    for k in range(len(shapes)):
        w.tensor(f"muon.p{k}.init", inits[k])
        w.tensor(f"muon.p{k}.grads", torch.stack(grads[k]))
    original = muon_module._zeropower_via_newtonschulz
    for name, torch_opts, ours in cases:
        w.tensor(f"muon.{name}.options", torch.tensor([ours["lr"], ours["weight_decay"], ours["momentum"],
                                                       ours["nesterov"], *ours["ns"], ours["eps"], ours["ns_steps"],
                                                       ours["adjust_lr"]], dtype=torch.float64))
        for variant in ("bf16", "f64"):
            muon_module._zeropower_via_newtonschulz = original if variant == "bf16" else ns_f64
            params = [p.clone().requires_grad_() for p in inits]
            history = run_steps(torch.optim.Muon(params, **torch_opts), params, grads, steps)
            for k in range(len(shapes)):
                w.tensor(f"muon.{name}.{variant}.p{k}.steps", history[k])
    muon_module._zeropower_via_newtonschulz = original


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_out = os.path.normpath(os.path.join(here, "..", "..", "tests", "data", "reference"))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=default_out, help="output folder (default: %(default)s)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    w = RefWriter("optim_extra", """
maximize (SGD, Adam, AdamW, LAMB), Adam's decoupled_weight_decay, RMSprop, Adagrad, Adamax, NAdam, RAdam, Adadelta, Rprop, ASGD, Adafactor and Muon from torch.optim
(LAMB from its formula). See tools/reference/gen_torch_optim_extra.py.""")
    w.lines[1] = f"# generated by tools/reference/gen_torch_optim_extra.py with torch {torch.__version__}, float64, CPU"
    w.comment("""
Optimizers: five steps on loss = sum(a1 (w1 - c1)^2)/2 + sum(a2 (w2 - c2)^2)/2 (grad = a (w - c)).""")
    torch.manual_seed(2025)
    a1, c1 = q(torch.rand(3, 4) * 1.5 + 0.25), q(torch.randn(3, 4))
    a2, c2 = q(torch.rand(5) * 1.5 + 0.25), q(torch.randn(5))
    w1_0, w2_0 = q(torch.randn(3, 4)), q(torch.randn(5))
    write_cases(w, [
        # name, kind, options, group-1 overrides (None: one group), w2 starts at zero
        ("sgd_maximize", "sgd", sgd(0.1, momentum=0.9, weight_decay=0.1, maximize=1), None, False),
        ("sgd_maximize_group", "sgd", sgd(0.1, momentum=0.5), dict(maximize=1), False),
        ("adam_maximize", "adam", adam(0.1, beta2=0.5, weight_decay=0.1, maximize=1), None, False),
        ("adam_decoupled", "adam", adam(0.1, weight_decay=0.1, decoupled_weight_decay=1), None, False),
        ("adam_decoupled_group", "adam", adam(0.05, weight_decay=0.2),
         dict(decoupled_weight_decay=1, maximize=1), False),
        ("adamw_maximize", "adamw", adam(0.1, weight_decay=0.1, maximize=1), None, False),
        ("lamb_maximize", "lamb", lamb(0.1, weight_decay=0.05, maximize=1), None, False),
        ("rmsprop", "rmsprop", rmsprop(0.05), None, False),
        ("rmsprop_momentum_wd", "rmsprop", rmsprop(0.02, alpha=0.9, weight_decay=0.1, momentum=0.8), None, False),
        ("rmsprop_centered", "rmsprop", rmsprop(0.05, centered=1), None, False),
        # alpha 0.45: the lerp's weight 1 - alpha is >= 0.5, ATen's other branch (at 0.3 sq - ga^2
        # cancels so far that PyTorch's own f32 run is 4e-6 off its f64 one)
        ("rmsprop_centered_momentum_maximize", "rmsprop",
         rmsprop(0.01, alpha=0.45, eps=1e-4, momentum=0.5, centered=1, maximize=1), None, False),
        ("rmsprop_two_groups", "rmsprop", rmsprop(0.05, momentum=0.9),
         dict(lr=0.01, momentum=0.0, centered=1, weight_decay=0.05), False),
        ("adagrad", "adagrad", adagrad(0.1), None, False),
        ("adagrad_decay_wd_init", "adagrad",
         adagrad(0.2, lr_decay=0.1, weight_decay=0.05, initial_accumulator_value=0.2, eps=1e-6), None, False),
        ("adagrad_maximize", "adagrad", adagrad(0.1, lr_decay=0.01, maximize=1), None, False),
        # Not initial_accumulator_value per group: PyTorch fills every group's sums with the
        # constructor's value; mixgrad uses the group's (docs/optim.md).
        ("adagrad_two_groups", "adagrad", adagrad(0.1, initial_accumulator_value=0.5),
         dict(lr=0.3, lr_decay=0.2, maximize=1), False),
        # Appended later: Adamax, NAdam, RAdam, Adadelta (torch.optim 2.15).
        ("adamax", "adamax", adamax(0.1), None, False),
        ("adamax_wd_maximize_group", "adamax", adamax(0.05, beta1=0.8, beta2=0.9, weight_decay=0.1),
         dict(lr=0.2, maximize=1), False),
        ("nadam", "nadam", nadam(0.1), None, False),
        ("nadam_wd_momentum_decay", "nadam", nadam(0.05, beta2=0.9, weight_decay=0.1, momentum_decay=0.05), None,
         False),
        ("nadam_decoupled_maximize", "nadam", nadam(0.05, weight_decay=0.2, decoupled_weight_decay=1, maximize=1),
         None, False),
        # rho_t passes 5 at step 6 (about t for beta2 near 1), so these run 8 steps: the first 5
        # un-rectified, the rest rectified
        ("radam_both_branches", "radam", radam(0.1), None, False, 8),
        ("radam_decoupled_wd", "radam", radam(0.05, beta2=0.99, weight_decay=0.1, decoupled_weight_decay=1), None,
         False, 8),
        ("radam_wd_maximize_group", "radam", radam(0.05, beta2=0.95, weight_decay=0.05), dict(maximize=1, lr=0.1),
         False, 8),
        ("adadelta", "adadelta", adadelta(1.0), None, False),
        ("adadelta_rho_wd_maximize", "adadelta", adadelta(0.5, rho=0.6, eps=1e-4, weight_decay=0.1, maximize=1), None,
         False),
        # Appended later: Rprop. lr 0.3 overshoots most minima within the steps, so signs flip (the
        # step shrinks, the gradient is zeroed); the second's bounds clamp both ways.
        ("rprop", "rprop", rprop(0.3), None, False, 8),
        ("rprop_bounds_maximize_group", "rprop", rprop(0.2, etaminus=0.3, etaplus=1.9, step_size_min=0.05,
                                                        step_size_max=0.4), dict(lr=0.5, maximize=1), False, 8),
        # Appended later: ASGD. t0 2 and 4: the average starts within the 8 steps (mu != 1 from
        # update t0 + 2 on); lambd and alpha large enough that eta's decay shows in f32.
        ("asgd", "asgd", asgd(0.1, lambd=0.05, t0=2), None, False, 8),
        ("asgd_wd_maximize_group", "asgd", asgd(0.05, lambd=0.2, alpha=0.5, t0=4, weight_decay=0.1),
         dict(lr=0.2, maximize=1), False, 8),
        # Appended later: Adafactor. Defaults (eps1 the dtype's epsilon); the update clipped by d
        # (RMS(u) reaches 1.07 from step 2 on with beta2_decay -0.5); alpha at its eps2 floor
        # (lr 0.3, eps2 0.5) and, with w2 starting at zero, RMS(p) = 0; eps1 1.5 clamps both
        # mean(R) and V (the squared gradients are near 1); two groups.
        ("adafactor", "adafactor", adafactor(1e-2), None, False, 8),
        ("adafactor_clipped_wd_maximize", "adafactor",
         adafactor(0.05, beta2_decay=-0.5, weight_decay=0.1, maximize=1), None, False, 8),
        ("adafactor_eps2_floor_zero_start", "adafactor", adafactor(0.3, eps2=0.5, d=1.5), None, True, 8),
        ("adafactor_eps1_clamps", "adafactor", adafactor(0.1, eps1=1.5), None, False, 8),
        ("adafactor_two_groups", "adafactor", adafactor(0.02, eps1=0.05), dict(lr=0.2, beta2_decay=-0.3, d=2.0,
                                                                                 weight_decay=0.05), False, 8),
    ], a1, c1, a2, c2, w1_0, w2_0)
    adafactor_shapes(w)
    muon_cases(w)
    w.save(os.path.join(args.out, "optim_extra.txt"))


if __name__ == "__main__":
    main()
