"""Writes tests/data/reference/torch_margin_losses.json: PyTorch's margin, embedding and likelihood
losses (margin_ranking, hinge_embedding, soft_margin, cosine_embedding, triplet_margin, multi_margin,
multilabel_soft_margin, poisson_nll, gaussian_nll) and cosine_similarity / pairwise_distance, in f64,
for tests/ops/test_margin_losses.cpp. Each case stores its inputs, its options, the output, and the
gradient of sum(output * upstream) (upstream stored for non-scalar outputs, else 1) with respect to
every floating input PyTorch differentiates ("grad_<name>"); an input PyTorch differentiates but
gives no gradient path (the targets of hinge_embedding and cosine_embedding) is listed in
"no_grad_path". Inputs stay away from the kinks (checked below), and every case is also run in f32
and checked against the f64 result with the C++ test's f32 tolerance, with headroom. Run once by
hand; the tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_margin_losses.py tests/data/reference
"""
import json
import math
import sys

import torch
import torch.nn.functional as F

torch.manual_seed(23)
D = torch.float64
N, DIM, C = 5, 4, 4
# The C++ test's f32 tolerance: |got - want| <= F32_REL |want| + F32_ABS (elementwise).
F32_REL, F32_ABS = 2e-5, 1e-5

FNS = {
    "margin_ranking_loss": F.margin_ranking_loss,
    "hinge_embedding_loss": F.hinge_embedding_loss,
    "soft_margin_loss": F.soft_margin_loss,
    "cosine_embedding_loss": F.cosine_embedding_loss,
    "triplet_margin_loss": F.triplet_margin_loss,
    "multi_margin_loss": F.multi_margin_loss,
    "multilabel_soft_margin_loss": F.multilabel_soft_margin_loss,
    "poisson_nll_loss": F.poisson_nll_loss,
    "gaussian_nll_loss": F.gaussian_nll_loss,
    "cosine_similarity": F.cosine_similarity,
    "pairwise_distance": F.pairwise_distance,
}


def flat(t):
    if t.is_floating_point():
        return [float(v) for v in t.detach().reshape(-1).tolist()]
    return [int(v) for v in t.reshape(-1).tolist()]


def far(z, what, gap=1e-3):
    """Asserts no element of z is within gap of 0 (a kink of the loss)."""
    m = float(z.abs().min())
    assert m > gap, f"{what}: {m} is too close to a kink"


def evaluate(fn, tensors, options, grads, dtype):
    """Runs fn on the tensors in `dtype` (those named in grads requiring grad); returns the output and the args."""
    args = {}
    for k, v in tensors.items():
        v = v.to(dtype) if v.is_floating_point() else v
        args[k] = v.clone().requires_grad_(k in grads)
    kwargs = {k: (math.inf if v == "inf" else v) for k, v in options.items()}
    if "weight" in args:
        kwargs["weight"] = args["weight"]
    y = FNS[fn](*(v for k, v in args.items() if k != "weight"), **kwargs)
    return y, args


def case(fn, tensors, options, grads=None):
    """grads: the floating inputs PyTorch differentiates (default: every floating input)."""
    if grads is None:
        grads = [k for k, v in tensors.items() if v.is_floating_point()]
    y, args = evaluate(fn, tensors, options, grads, D)
    upstream = None
    if y.dim() > 0 or options.get("reduction") == "none":
        upstream = torch.randn(y.shape, dtype=D)
    s = (y * upstream).sum() if upstream is not None else y
    gs = torch.autograd.grad(s, [args[k] for k in grads], allow_unused=True)
    out = {"fn": fn, "tensors": list(tensors), "options": options, "output": flat(y), "output_shape": list(y.shape)}
    for k, v in tensors.items():
        out[k] = flat(v)
        out[k + "_shape"] = list(v.shape)
    if upstream is not None:
        out["upstream"] = flat(upstream)
        out["upstream_shape"] = list(upstream.shape)
    out["no_grad_path"] = []
    for k, g in zip(grads, gs):
        if g is None:
            out["no_grad_path"].append(k)
        else:
            assert torch.isfinite(g).all(), f"{fn}: grad {k} not finite"
            out["grad_" + k] = flat(g)
    # the same case in f32 must pass the C++ test's f32 tolerance with headroom (a factor of 4)
    y32, args32 = evaluate(fn, tensors, options, grads, torch.float32)
    s32 = (y32 * upstream.float()).sum() if upstream is not None else y32
    gs32 = torch.autograd.grad(s32, [args32[k] for k in grads], allow_unused=True)
    for name, a, b in [("output", y32, y)] + [("grad_" + k, g32, g) for k, g32, g in zip(grads, gs32, gs)]:
        if b is None:
            continue
        a, b = a.detach().double(), b.detach()
        err = ((a - b).abs() / (F32_REL * b.abs() + F32_ABS)).max()
        worst[0] = max(worst[0], float(err))
        assert err < 0.25, f"{fn} {options} {name}: f32 error {float(err)} of the tolerance"
    return out


def pm1(*shape):
    return torch.randint(0, 2, shape).to(D) * 2 - 1


cases = {}
worst = [0.0]  # the largest f32 error, as a fraction of the f32 tolerance

# ---- margin_ranking_loss: max(0, -y (x1 - x2) + margin) ----
x1, x2, y = torch.randn(6, dtype=D), torch.randn(6, dtype=D), pm1(6)
for red, m in (("mean", 0.0), ("none", 0.3), ("sum", 0.3)):
    far(-y * (x1 - x2) + m, "margin_ranking")
    cases[f"margin_ranking/m{m}/{red}"] = case("margin_ranking_loss", {"x1": x1, "x2": x2, "target": y},
                                               {"margin": m, "reduction": red})
bx1, bx2, by = torch.randn(N, DIM, dtype=D), torch.randn(N, DIM, dtype=D), pm1(N, 1)
far(-by * (bx1 - bx2) + 0.3, "margin_ranking broadcast")
cases["margin_ranking/broadcast_target/m0.3/none"] = case(
    "margin_ranking_loss", {"x1": bx1, "x2": bx2, "target": by}, {"margin": 0.3, "reduction": "none"})
cases["margin_ranking/broadcast_target/m0/mean"] = case(
    "margin_ranking_loss", {"x1": bx1, "x2": bx2, "target": by}, {"margin": 0.0, "reduction": "mean"})

# ---- hinge_embedding_loss: x where y == 1, max(0, margin - x) where y == -1 ----
hx, hy = torch.randn(N, DIM, dtype=D) * 1.5, pm1(N, DIM)
for red, m in (("mean", 1.0), ("none", 0.5), ("sum", 0.5)):
    far(m - hx, "hinge")
    cases[f"hinge_embedding/m{m}/{red}"] = case("hinge_embedding_loss", {"input": hx, "target": hy},
                                                {"margin": m, "reduction": red})
# a target neither 1 nor -1 gets both terms (PyTorch's form, documented in margin_losses.h)
hy0 = hy.clone()
hy0[0, :2] = 0.0
cases["hinge_embedding/target0/m0.5/sum"] = case("hinge_embedding_loss", {"input": hx, "target": hy0},
                                                 {"margin": 0.5, "reduction": "sum"})

# ---- soft_margin_loss: log(1 + exp(-y x)); PyTorch refuses a target requiring grad ----
sx, sy = torch.randn(N, DIM, dtype=D) * 2, pm1(N, DIM)
sx[0, 0] = 40.0  # exp(-y x) far from 1 on both sides: the stable form
sy[0, 0] = -1.0
for red in ("mean", "none", "sum"):
    cases[f"soft_margin/{red}"] = case("soft_margin_loss", {"input": sx, "target": sy}, {"reduction": red},
                                       grads=["input"])

# ---- cosine_embedding_loss: 1 - cos where y == 1, max(0, cos - margin) where y == -1 ----
cx1 = torch.randn(N, DIM, dtype=D)
cx2 = cx1 * torch.tensor([[1.0], [-1.0], [1.0], [-1.0], [1.0]], dtype=D) + torch.randn(N, DIM, dtype=D) * 0.8
cy = torch.tensor([1.0, -1.0, -1.0, 1.0, -1.0], dtype=D)
cos = F.cosine_similarity(cx1, cx2)
for red, m in (("mean", 0.0), ("none", 0.2), ("sum", 0.2)):
    far(cos - m, "cosine_embedding")
    cases[f"cosine_embedding/2d/m{m}/{red}"] = case("cosine_embedding_loss", {"x1": cx1, "x2": cx2, "target": cy},
                                                    {"margin": m, "reduction": red})
u1, u2 = torch.tensor([0.5, -1.0, 2.0, 0.3], dtype=D), torch.tensor([1.0, -0.5, 1.5, -0.7], dtype=D)
far(F.cosine_similarity(u1, u2, dim=0) - 0.2, "cosine_embedding 1-D")
cases["cosine_embedding/1d/m0.2/none"] = case("cosine_embedding_loss",
                                              {"x1": u1, "x2": u2, "target": torch.tensor(-1.0, dtype=D)},
                                              {"margin": 0.2, "reduction": "none"})
cases["cosine_embedding/1d/m0/mean"] = case("cosine_embedding_loss",
                                            {"x1": u1, "x2": u2, "target": torch.tensor(1.0, dtype=D)},
                                            {"margin": 0.0, "reduction": "mean"})

# ---- triplet_margin_loss: max(0, margin + d(a, p) - d(a, n)) ----
ta = torch.randn(N, DIM, dtype=D)
tp = ta + torch.randn(N, DIM, dtype=D) * 0.6
tn = ta + torch.randn(N, DIM, dtype=D) * 1.2
for label, opts in (("p2/m1/mean", {"margin": 1.0, "p": 2.0, "eps": 1e-6, "swap": False, "reduction": "mean"}),
                    ("p1/m0.5/sum", {"margin": 0.5, "p": 1.0, "eps": 1e-6, "swap": False, "reduction": "sum"}),
                    ("p2/m0.5/swap/none", {"margin": 0.5, "p": 2.0, "eps": 1e-6, "swap": True, "reduction": "none"}),
                    ("p1/m0.5/swap/mean", {"margin": 0.5, "p": 1.0, "eps": 1e-6, "swap": True, "reduction": "mean"}),
                    ("p2/m0.5/eps0.1/none", {"margin": 0.5, "p": 2.0, "eps": 0.1, "swap": False, "reduction": "none"})):
    p, eps = opts["p"], opts["eps"]
    dap, dan, dpn = (F.pairwise_distance(u, v, p, eps) for u, v in ((ta, tp), (ta, tn), (tp, tn)))
    if p == 1.0:  # |.| has a kink at 0
        far(ta - tp + eps, "triplet a-p")
        far(ta - tn + eps, "triplet a-n")
        far(tp - tn + eps, "triplet p-n")
    if opts["swap"]:
        far(dan - dpn, "triplet swap min")
        assert bool((dpn < dan).any()) and bool((dpn > dan).any()), "swap must change some rows, not all"
        dan = torch.minimum(dan, dpn)
    z = opts["margin"] + dap - dan
    far(z, "triplet hinge")
    assert bool((z > 0).any()) and bool((z < 0).any()), "some triplets active, some not"
    cases[f"triplet_margin/{label}"] = case("triplet_margin_loss", {"anchor": ta, "positive": tp, "negative": tn}, opts)
cases["triplet_margin/1d/p2/m1/none"] = case(
    "triplet_margin_loss", {"anchor": ta[1], "positive": tp[1], "negative": tn[1]},
    {"margin": 1.0, "p": 2.0, "eps": 1e-6, "swap": False, "reduction": "none"})

# ---- multi_margin_loss: sum_{i != y} w[y] max(0, margin - x[y] + x[i])^p / C; weight not differentiable ----
mx = torch.randn(N, C, dtype=D)
mt = torch.tensor([0, 3, 1, 2, 3])
mw = torch.tensor([0.5, 2.0, 1.0, 1.5], dtype=D)
for label, p, m, w, red in (("p1/m1/mean", 1, 1.0, None, "mean"), ("p2/m0.7/none", 2, 0.7, None, "none"),
                            ("p1/m0.7/weight/sum", 1, 0.7, mw, "sum"), ("p2/m1/weight/mean", 2, 1.0, mw, "mean")):
    far(m - mx.gather(1, mt[:, None]) + mx, "multi_margin")
    t = {"input": mx, "target": mt} | ({"weight": w} if w is not None else {})
    cases[f"multi_margin/{label}"] = case("multi_margin_loss", t, {"p": p, "margin": m, "reduction": red},
                                          grads=["input"])
m1x, m1t = torch.tensor([0.3, -0.8, 1.1, 0.2], dtype=D), torch.tensor(2)
for label, p, m, w, red in (("1d/p1/m1/none", 1, 1.0, None, "none"), ("1d/p2/m0.7/weight/mean", 2, 0.7, mw, "mean")):
    far(m - m1x[2] + m1x, "multi_margin 1-D")
    t = {"input": m1x, "target": m1t} | ({"weight": w} if w is not None else {})
    cases[f"multi_margin/{label}"] = case("multi_margin_loss", t, {"p": p, "margin": m, "reduction": red},
                                          grads=["input"])

# ---- multilabel_soft_margin_loss: weight and target are differentiated by PyTorch ----
lx = torch.randn(N, C, dtype=D) * 1.5
lt = torch.randint(0, 2, (N, C)).to(D)
lw = torch.tensor([1.0, 0.25, 2.0, 0.5], dtype=D)
MLSM = "multilabel_soft_margin_loss"
cases["multilabel_soft_margin/mean"] = case(MLSM, {"input": lx, "target": lt}, {"reduction": "mean"})
cases["multilabel_soft_margin/weight/none"] = case(MLSM, {"input": lx, "target": lt, "weight": lw}, {"reduction": "none"})
cases["multilabel_soft_margin/weight/sum"] = case(MLSM, {"input": lx, "target": lt, "weight": lw}, {"reduction": "sum"})
cases["multilabel_soft_margin/1d/weight/none"] = case(MLSM, {"input": lx[0], "target": lt[0], "weight": lw},
                                                      {"reduction": "none"})

# ---- poisson_nll_loss ----
px = torch.randn(N, DIM, dtype=D) * 0.5
pt = torch.tensor([[0.0, 1.0, 2.0, 3.5], [0.5, 4.0, 0.0, 1.5], [7.0, 0.25, 1.0, 0.0],
                   [2.5, 0.0, 5.0, 1.0], [1.25, 3.0, 0.75, 6.0]], dtype=D)
ppos = pt.clamp_min(0.5)  # every target > 0: PyTorch's target gradient is finite
ppx = torch.rand(N, DIM, dtype=D) * 2 + 0.2  # positive rates for log_input false
pz = ppx.clone()
pz[0, 0] = 0.0  # x + eps with x == 0: eps keeps the log finite
cases["poisson_nll/log/mean"] = case("poisson_nll_loss", {"input": px, "target": pt},
                                     {"log_input": True, "full": False, "eps": 1e-8, "reduction": "mean"})
# full with a target of 0: PyTorch's target gradient there is NaN (0 * log 0 through masked_fill), so
# only the input's gradient is recorded
cases["poisson_nll/log/full/sum"] = case("poisson_nll_loss", {"input": px, "target": pt},
                                         {"log_input": True, "full": True, "eps": 1e-8, "reduction": "sum"},
                                         grads=["input"])
cases["poisson_nll/log/full/positive_target/none"] = case(
    "poisson_nll_loss", {"input": px, "target": ppos},
    {"log_input": True, "full": True, "eps": 1e-8, "reduction": "none"})
cases["poisson_nll/nolog/none"] = case("poisson_nll_loss", {"input": ppx, "target": pt},
                                       {"log_input": False, "full": False, "eps": 1e-8, "reduction": "none"})
cases["poisson_nll/nolog/eps0.01/zero_input/sum"] = case(
    "poisson_nll_loss", {"input": pz, "target": pt},
    {"log_input": False, "full": False, "eps": 0.01, "reduction": "sum"})
cases["poisson_nll/nolog/full/mean"] = case("poisson_nll_loss", {"input": ppx, "target": pt},
                                            {"log_input": False, "full": True, "eps": 1e-8, "reduction": "mean"},
                                            grads=["input"])

# ---- gaussian_nll_loss: var of the input's shape, [N, 1], or [N] (one per row) ----
gx, gt = torch.randn(N, DIM, dtype=D), torch.randn(N, DIM, dtype=D)
gv = torch.rand(N, DIM, dtype=D) + 0.2
for label, var, full, red in (("var_same/mean", gv, False, "mean"), ("var_n1/none", gv[:, :1].clone(), False, "none"),
                              ("var_n/sum", gv[:, 0].clone(), False, "sum"), ("var_same/full/none", gv, True, "none"),
                              ("var_n/full/mean", gv[:, 1].clone(), True, "mean")):
    cases[f"gaussian_nll/{label}"] = case("gaussian_nll_loss", {"input": gx, "target": gt, "var": var},
                                          {"full": full, "eps": 1e-6, "reduction": red})
gvc = gv.clone()
gvc[0, 1] = 1e-8  # below eps: clamped, the gradient passes straight through
gvc[2, 3] = 0.0
far(gx[0, 1] - gt[0, 1], "gaussian clamp", 0.3)
far(gx[2, 3] - gt[2, 3], "gaussian clamp", 0.3)
cases["gaussian_nll/var_clamped/none"] = case("gaussian_nll_loss", {"input": gx, "target": gt, "var": gvc},
                                              {"full": False, "eps": 1e-6, "reduction": "none"})
cases["gaussian_nll/var_clamped/eps0.05/mean"] = case("gaussian_nll_loss", {"input": gx, "target": gt, "var": gvc},
                                                      {"full": True, "eps": 0.05, "reduction": "mean"})

# ---- cosine_similarity: each norm clamped to eps separately (no gradient through the clamp) ----
sa, sb = torch.randn(N, DIM, dtype=D), torch.randn(N, DIM, dtype=D)
cases["cosine_similarity/dim1"] = case("cosine_similarity", {"x1": sa, "x2": sb}, {"dim": 1, "eps": 1e-8})
cases["cosine_similarity/dim0"] = case("cosine_similarity", {"x1": sa, "x2": sb}, {"dim": 0, "eps": 1e-8})
cases["cosine_similarity/broadcast"] = case("cosine_similarity", {"x1": sa, "x2": sb[:1].clone()},
                                            {"dim": 1, "eps": 1e-8})
sz = sa.clone()
sz[2] = 0.0  # a zero row: its norm is clamped to eps; its gradient is x2 / (eps ||x2||) (times upstream)
cases["cosine_similarity/zero_row"] = case("cosine_similarity", {"x1": sz, "x2": sb}, {"dim": 1, "eps": 1e-8})

# ---- pairwise_distance: ||x1 - x2 + eps||_p along the last dim ----
da, db = torch.randn(N, DIM, dtype=D), torch.randn(N, DIM, dtype=D)
far(da - db + 1e-6, "pairwise_distance")
top2 = (da - db + 1e-6).abs().topk(2, dim=1).values
far(top2[:, 0] - top2[:, 1], "pairwise_distance inf tie")
for label, p, keep in (("p2", 2.0, False), ("p1", 1.0, False), ("pinf", "inf", False), ("p2/keepdim", 2.0, True),
                       ("p3/keepdim", 3.0, True)):
    cases[f"pairwise_distance/{label}"] = case("pairwise_distance", {"x1": da, "x2": db},
                                               {"p": p, "eps": 1e-6, "keepdim": keep})
cases["pairwise_distance/broadcast/p2"] = case("pairwise_distance", {"x1": da, "x2": db[:1].clone()},
                                               {"p": 2.0, "eps": 1e-6, "keepdim": False})

with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_margin_losses.json", "w") as fh:
    json.dump({"torch": torch.__version__, "cases": cases}, fh, separators=(",", ":"))
    fh.write("\n")
counts = {}
for c in cases.values():
    counts[c["fn"]] = counts.get(c["fn"], 0) + 1
print(len(cases), "cases:", counts)
print(f"largest f32 error: {worst[0]:.3f} of the tolerance")
