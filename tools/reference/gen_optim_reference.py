#!/usr/bin/env python3
"""Writes tests/data/reference/optim.txt: optimizer, scheduler and clipping references from PyTorch.

Run once by a developer, by hand, when a case is added or changed; never by the build or the tests
(tests/optim/ only reads the text file, so the tests need no Python):

    apt-get install -y python3-torch          # Debian 12: PyTorch 1.13.1 (CPU)
    /usr/bin/python3 tools/reference/gen_optim_reference.py [--out tests/data/reference]

Everything is float64 on the CPU from fixed seeds; running it again reproduces the file bit for bit
on the same torch. The format is gen_reference.py's (its RefWriter writes it; read by
tests/reference/reference_file.h): "tensor <name> <f64|i64> <rank> <dims...>" then one line of values.

Cases (names "<case>.<tensor>"):

* Optimizers: the first five steps of SGD, Adam, AdamW (torch.optim, foreach=False, i.e. the
  single-tensor code) and LAMB on a fixed quadratic problem with two parameters
      loss = sum(a1 * (w1 - c1)^2) / 2 + sum(a2 * (w2 - c2)^2) / 2,   grad wk = ak * (wk - ck)
  w1 [3, 4], w2 [5]; the C++ test recomputes the gradients with the same formula each step.
  PyTorch has no LAMB: lamb_step() below is the paper's / Apex FusedLAMB's formula in plain torch
  tensor math (Adam direction with bias correction, decoupled weight decay added to the update,
  per-tensor trust ratio ||w|| / ||u||, 1 when either norm is 0; no global gradient clipping).
  Per case: kind [] (i64: 0 SGD, 1 Adam, 2 AdamW, 3 LAMB, 4 RMSprop, 5 Adagrad, 6 Adamax, 7 NAdam, 8 RAdam,
  9 Adadelta); opt.<option> [] (f64, mixgrad's option
  names, booleans 0/1) for all parameters; group1.<option> [] when w2 sits in a second param group
  with these overrides; w1.init, a1, c1, w2.init, a2, c2; wk.steps [5 (or a case's own count), ...]
  (the parameter after each step); wk.state.<buffer> (after the last step) and wk.state.step [] (i64);
  NAdam's scalar mu_product is not written (it is checked through the parameters).
* Schedulers: the lr of every group after construction and after each of n steps, [n + 1, groups]
  ("lrs"), for StepLR, MultiStepLR and OneCycleLR on an SGD or Adam optimizer; OneCycle also
  records the cycled momentum ("momentums": SGD's momentum or Adam's beta1). Per case: scheduler []
  (i64: 0 StepLR, 1 MultiStepLR, 2 OneCycleLR), the optimizer (optimizer [] i64 as kind above,
  lrs0 [groups], momentum0 []) and the scheduler's options.
* clip_grad_norm_: three gradients (shared, clip.g1..g3) clipped per case with max_norm [] and
  norm_type [] (inf allowed); per case the returned total_norm [] and the clipped g1..g3.
"""
import argparse
import math
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_reference import RefWriter, q  # noqa: E402  (same folder: the shared writer and rounding)

torch.set_default_dtype(torch.float64)
F64 = torch.float64
STEPS = 5
KINDS = {"sgd": 0, "adam": 1, "adamw": 2, "lamb": 3, "rmsprop": 4, "adagrad": 5, "adamax": 6, "nadam": 7, "radam": 8,
         "adadelta": 9, "rprop": 10, "asgd": 11, "adafactor": 12}
TORCH_CLASSES = {"sgd": "SGD", "adam": "Adam", "adamw": "AdamW", "rmsprop": "RMSprop", "adagrad": "Adagrad",
                 "adamax": "Adamax", "nadam": "NAdam", "radam": "RAdam", "adadelta": "Adadelta", "rprop": "Rprop", "asgd": "ASGD",
                 "adafactor": "Adafactor"}


def i64(v):
    return torch.tensor(v, dtype=torch.int64)


def f64(v):
    return torch.tensor(v, dtype=F64)


# ---- LAMB from the formula ---------------------------------------------------------------------
def lamb_step(params, grads, state, lr, beta1, beta2, eps, weight_decay, bias_correction, maximize=0):
    """One LAMB step in place (You et al. 2019 / Apex FusedLAMB with the trust ratio on every tensor)."""
    for p, g in zip(params, grads):
        g = -g if maximize else g
        st = state.setdefault(id(p), {"step": 0, "exp_avg": torch.zeros_like(p), "exp_avg_sq": torch.zeros_like(p)})
        st["step"] += 1
        t = st["step"]
        m, v = st["exp_avg"], st["exp_avg_sq"]
        m.mul_(beta1).add_(g, alpha=1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        bc1 = 1 - beta1 ** t if bias_correction else 1.0
        bc2 = 1 - beta2 ** t if bias_correction else 1.0
        u = (m / bc1) / ((v / bc2).sqrt() + eps) + weight_decay * p
        w_norm = p.norm().item()
        u_norm = u.norm().item()
        ratio = w_norm / u_norm if (w_norm != 0 and u_norm != 0) else 1.0
        p.add_(u, alpha=-(lr * ratio))


def torch_kwargs(kind, opt):
    """mixgrad option names -> torch.optim keyword arguments."""
    kw = {}
    for k, v in opt.items():
        if k in ("beta1", "beta2"):
            continue
        kw[k] = bool(v) if k in ("nesterov", "amsgrad", "maximize", "centered", "decoupled_weight_decay") else v
    if "beta1" in opt:
        kw["betas"] = (opt["beta1"], opt["beta2"])
    for ours, theirs in ((("etaminus", "etaplus"), "etas"), (("step_size_min", "step_size_max"), "step_sizes")):
        if ours[0] in opt:
            kw.pop(ours[0]), kw.pop(ours[1])
            kw[theirs] = (opt[ours[0]], opt[ours[1]])
    if "eps1" in opt:  # Adafactor's eps=(eps1, eps2); mixgrad's eps1 -1 is PyTorch's None
        e1 = kw.pop("eps1")
        kw["eps"] = (None if e1 < 0 else e1, kw.pop("eps2"))
    if kind != "lamb":
        kw["foreach"] = False
    return kw


# ---- optimizers ----------------------------------------------------------------------------------
def gen_optimizers(w):
    w.comment("""
Optimizers: five steps on loss = sum(a1 (w1 - c1)^2)/2 + sum(a2 (w2 - c2)^2)/2 (grad = a (w - c)).""")
    torch.manual_seed(2024)
    a1, c1 = q(torch.rand(3, 4) * 1.5 + 0.25), q(torch.randn(3, 4))
    a2, c2 = q(torch.rand(5) * 1.5 + 0.25), q(torch.randn(5))
    w1_0, w2_0 = q(torch.randn(3, 4)), q(torch.randn(5))
    sgd = lambda lr, momentum=0.0, dampening=0.0, nesterov=0, weight_decay=0.0: dict(
        lr=lr, momentum=momentum, dampening=dampening, nesterov=nesterov, weight_decay=weight_decay)
    adam = lambda lr, beta1=0.9, beta2=0.999, eps=1e-8, weight_decay=0.0, amsgrad=0: dict(
        lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad)
    lamb = lambda lr, beta1=0.9, beta2=0.999, eps=1e-6, weight_decay=0.01, bias_correction=1: dict(
        lr=lr, beta1=beta1, beta2=beta2, eps=eps, weight_decay=weight_decay, bias_correction=bias_correction)
    write_cases(w, [
        # name, kind, options, group-1 overrides (None: one group), w2 starts at zero
        ("sgd_plain", "sgd", sgd(0.1), None, False),
        ("sgd_momentum", "sgd", sgd(0.1, momentum=0.9), None, False),
        ("sgd_dampening", "sgd", sgd(0.1, momentum=0.9, dampening=0.3), None, False),
        ("sgd_nesterov_wd", "sgd", sgd(0.05, momentum=0.9, nesterov=1, weight_decay=0.01), None, False),
        ("sgd_weight_decay", "sgd", sgd(0.1, weight_decay=0.2), None, False),
        ("sgd_two_groups", "sgd", sgd(0.1, momentum=0.5), dict(lr=0.01, momentum=0.9, weight_decay=0.1), False),
        ("adam", "adam", adam(0.1), None, False),
        ("adam_amsgrad", "adam", adam(0.1, beta2=0.5, amsgrad=1), None, False),
        ("adam_wd", "adam", adam(0.05, beta1=0.8, beta2=0.99, eps=1e-6, weight_decay=0.1), None, False),
        ("adam_amsgrad_wd", "adam", adam(0.1, beta2=0.6, weight_decay=0.1, amsgrad=1), None, False),
        ("adamw", "adamw", adam(0.1, weight_decay=0.1), None, False),
        ("adamw_amsgrad", "adamw", adam(0.1, beta1=0.85, beta2=0.5, weight_decay=0.05, amsgrad=1), None, False),
        ("adamw_two_groups", "adamw", adam(0.1, weight_decay=0.1), dict(lr=0.01, weight_decay=0.0), False),
        ("lamb", "lamb", lamb(0.1), None, False),
        ("lamb_no_decay_no_bias_correction", "lamb", lamb(0.05, weight_decay=0.0, bias_correction=0), None, False),
        ("lamb_zero_param", "lamb", lamb(0.1, beta1=0.8, beta2=0.9, weight_decay=0.1), None, True),
        ("lamb_two_groups", "lamb", lamb(0.1), dict(lr=0.02, weight_decay=0.0), False),
    ], a1, c1, a2, c2, w1_0, w2_0)


def write_cases(w, cases, a1, c1, a2, c2, w1_0, w2_0):
    """Five steps of each case on the quadratic problem, written as the module docstring says."""
    for name, kind, opt, group1, zero_w2, *rest in cases:
        steps_of_case = rest[0] if rest else STEPS  # a sixth element: more steps than STEPS
        w1 = w1_0.clone()
        w2 = torch.zeros(5) if zero_w2 else w2_0.clone()
        w.comment(f"case {name}: {kind} {opt}" + (f", w2 in group 1 with {group1}" if group1 else "")
                  + (", w2 starts at 0" if zero_w2 else ""))
        w.tensor(f"{name}.kind", i64(KINDS[kind]))
        for k, v in opt.items():
            w.tensor(f"{name}.opt.{k}", f64(float(v)))
        for k, v in (group1 or {}).items():
            w.tensor(f"{name}.group1.{k}", f64(float(v)))
        w.tensor(f"{name}.w1.init", w1)
        w.tensor(f"{name}.a1", a1)
        w.tensor(f"{name}.c1", c1)
        w.tensor(f"{name}.w2.init", w2)
        w.tensor(f"{name}.a2", a2)
        w.tensor(f"{name}.c2", c2)
        params = [w1, w2]
        if kind == "lamb":
            state = {}
        else:
            cls = getattr(torch.optim, TORCH_CLASSES[kind])
            if group1:
                g1 = dict(opt, **group1)
                groups = [{"params": [w1]}, dict({"params": [w2]}, **torch_kwargs(kind, g1))]
            else:
                groups = [{"params": params}]
            optimizer = cls(groups, **torch_kwargs(kind, opt))
        steps = [[], []]
        for _ in range(steps_of_case):
            grads = [a1 * (w1 - c1), a2 * (w2 - c2)]
            if kind == "lamb":
                with torch.no_grad():
                    if group1:
                        lamb_step([w1], grads[:1], state, **opt)
                        lamb_step([w2], grads[1:], state, **dict(opt, **group1))
                    else:
                        lamb_step(params, grads, state, **opt)
            else:
                for p, g in zip(params, grads):
                    p.grad = g.clone()
                optimizer.step()
            for k, p in enumerate(params):
                steps[k].append(p.detach().clone())
        for k, p in enumerate(params):
            w.tensor(f"{name}.w{k + 1}.steps", torch.stack(steps[k]))
            st = state[id(p)] if kind == "lamb" else optimizer.state[p]
            for key in sorted(st):
                v = st[key]
                if v is None:  # SGD without momentum keeps momentum_buffer = None
                    continue
                if key == "mu_product":  # NAdam's running product: mixgrad recomputes it from the step
                    continue
                if key == "step":
                    w.tensor(f"{name}.w{k + 1}.state.step", i64(int(v)))
                else:
                    w.tensor(f"{name}.w{k + 1}.state.{key}", v)
            if opt.get("amsgrad"):
                # The case must exercise amsgrad: the running max differs from the current v.
                assert not torch.equal(st["max_exp_avg_sq"], st["exp_avg_sq"]), name


# ---- schedulers ----------------------------------------------------------------------------------
def gen_schedulers(w):
    w.comment("""
Schedulers: lrs [n + 1, groups] = the lr of each group after construction and after each step.""")

    def make_opt(kind, lrs, momentum):
        ps = [torch.zeros(2, requires_grad=True) for _ in lrs]
        groups = [{"params": [p], "lr": lr} for p, lr in zip(ps, lrs)]
        if kind == "sgd":
            return torch.optim.SGD(groups, lr=lrs[0], momentum=momentum)
        return torch.optim.Adam(groups, lr=lrs[0], betas=(momentum, 0.999))

    def momentum_of(opt, kind):
        return [g["momentum"] if kind == "sgd" else g["betas"][0] for g in opt.param_groups]

    def record(name, kind, lrs0, momentum0, sched_code, make_sched, n, options):
        opt = make_opt(kind, lrs0, momentum0)
        sched = make_sched(opt)
        lrs, moms = [sched.get_last_lr()], [momentum_of(opt, kind)]
        for _ in range(n):
            opt.step()
            sched.step()
            lrs.append(sched.get_last_lr())
            moms.append(momentum_of(opt, kind))
        w.comment(f"case {name}: {kind} lrs {lrs0} momentum {momentum0}; {options}")
        w.tensor(f"{name}.scheduler", i64(sched_code))
        w.tensor(f"{name}.optimizer", i64(KINDS[kind]))
        w.tensor(f"{name}.lrs0", f64(lrs0))
        w.tensor(f"{name}.momentum0", f64(momentum0))
        for k, v in options.items():
            w.tensor(f"{name}.{k}", i64(v) if k in INT_OPTIONS else f64(v))
        w.tensor(f"{name}.lrs", f64(lrs))
        w.tensor(f"{name}.momentums", f64(moms))

    INT_OPTIONS = {"step_size", "milestones", "total_steps", "anneal", "cycle_momentum", "three_phase"}
    S = torch.optim.lr_scheduler
    record("steplr", "sgd", [0.1, 0.02], 0.9, 0, lambda o: S.StepLR(o, step_size=3, gamma=0.5), 12,
           dict(step_size=3, gamma=0.5))
    record("multisteplr", "sgd", [0.1, 0.03], 0.0, 1, lambda o: S.MultiStepLR(o, milestones=[2, 5, 5, 9], gamma=0.1),
           12, dict(milestones=[2, 5, 5, 9], gamma=0.1))
    # OneCycle options: max_lr [groups], total_steps, pct_start, anneal (i64 0 cos, 1 linear),
    # cycle_momentum, base_momentum, max_momentum, div_factor, final_div_factor, three_phase (i64 0/1).
    onecycle = [
        ("onecycle_sgd", "sgd", [0.1, 0.05], 0.9,
         dict(max_lr=[0.1, 0.05], total_steps=20, pct_start=0.3, anneal=0, cycle_momentum=1, base_momentum=0.85,
              max_momentum=0.95, div_factor=25.0, final_div_factor=1e4, three_phase=0)),
        ("onecycle_adam_linear_three_phase", "adam", [0.001], 0.9,
         dict(max_lr=[0.01], total_steps=15, pct_start=0.25, anneal=1, cycle_momentum=1, base_momentum=0.8,
              max_momentum=0.9, div_factor=10.0, final_div_factor=100.0, three_phase=1)),
        ("onecycle_no_momentum", "sgd", [0.1], 0.9,
         dict(max_lr=[0.2], total_steps=10, pct_start=0.4, anneal=0, cycle_momentum=0, base_momentum=0.85,
              max_momentum=0.95, div_factor=10.0, final_div_factor=100.0, three_phase=0)),
    ]
    for name, kind, lrs0, mom0, o in onecycle:
        def make(opt, o=o):
            return S.OneCycleLR(opt, max_lr=o["max_lr"], total_steps=o["total_steps"], pct_start=o["pct_start"],
                                anneal_strategy="cos" if o["anneal"] == 0 else "linear",
                                cycle_momentum=bool(o["cycle_momentum"]), base_momentum=o["base_momentum"],
                                max_momentum=o["max_momentum"], div_factor=o["div_factor"],
                                final_div_factor=o["final_div_factor"], three_phase=bool(o["three_phase"]))
        # PyTorch allows last_epoch == total_steps: total_steps steps after construction.
        record(name, kind, lrs0, mom0, 2, make, o["total_steps"], o)


# ---- clip_grad_norm_ -----------------------------------------------------------------------------
def gen_clip(w):
    w.comment("""
clip_grad_norm_(params, max_norm, norm_type): total_norm and the clipped gradients g1..g3.""")
    torch.manual_seed(7)
    g1, g2, g3 = q(torch.randn(3, 4) * 2), q(torch.randn(5) * 2), q(torch.randn(2, 2, 2) * 2)
    w.tensor("clip.g1", g1)
    w.tensor("clip.g2", g2)
    w.tensor("clip.g3", g3)
    cases = [("clip_norm2", 1.0, 2.0), ("clip_norm_inf", 0.5, math.inf), ("clip_norm1", 2.0, 1.0),
             ("clip_norm3", 1.5, 3.0), ("clip_norm2_no_clip", 100.0, 2.0)]
    for name, max_norm, norm_type in cases:
        ps = [torch.zeros_like(g, requires_grad=True) for g in (g1, g2, g3)]
        for p, g in zip(ps, (g1, g2, g3)):
            p.grad = g.clone()
        total = torch.nn.utils.clip_grad_norm_(ps, max_norm, norm_type)
        w.comment(f"case {name}: max_norm {max_norm}, norm_type {norm_type}")
        w.tensor(f"{name}.max_norm", f64(max_norm))
        w.tensor(f"{name}.norm_type", f64(norm_type))
        w.tensor(f"{name}.total_norm", total)
        for k, p in enumerate(ps):
            w.tensor(f"{name}.g{k + 1}", p.grad)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    default_out = os.path.normpath(os.path.join(here, "..", "..", "tests", "data", "reference"))
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=default_out, help="output folder (default: %(default)s)")
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    torch.set_num_threads(1)  # deterministic summation order
    w = RefWriter("optim", """
Optimizers (SGD, Adam, AdamW from torch.optim; LAMB from its formula), learning-rate schedulers
(StepLR, MultiStepLR, OneCycleLR) and clip_grad_norm_. See tools/reference/gen_optim_reference.py.""")
    w.lines[1] = f"# generated by tools/reference/gen_optim_reference.py with torch {torch.__version__}, float64, CPU"
    gen_optimizers(w)
    gen_schedulers(w)
    gen_clip(w)
    w.save(os.path.join(args.out, "optim.txt"))


if __name__ == "__main__":
    main()
