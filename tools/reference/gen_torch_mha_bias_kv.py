"""Writes tests/data/reference/torch_mha_bias_kv.json: torch.nn.MultiheadAttention (batch_first) with
add_bias_kv and/or add_zero_attn, with key padding masks (one masking every key of a batch row) and
bool or float attention masks, kdim/vdim equal to embed_dim or not, on f64 inputs: every parameter,
the output, the head-averaged attention weights and the gradients of sum(out * r) w.r.t. query,
key, value and every parameter, for tests/nn/test_attention_layers.cpp. Run once by hand; the
tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_mha_bias_kv.py tests/data/reference
"""
import json
import sys

import torch

torch.manual_seed(43)
torch.set_num_threads(1)
D = torch.float64
flat = lambda t: t.detach().reshape(-1).tolist()
B, L, S = 2, 3, 4
cases = []
# (embed_dim, heads, kdim, vdim, bias, add_bias_kv, add_zero_attn, key padding mask, attn mask kind)
for e, h, kdim, vdim, bias, bias_kv, zero_attn, kpm, am in (
        (8, 2, 8, 8, True, True, False, [[0, 0, 1, 0], [0, 1, 0, 0]], None),
        (6, 3, 6, 6, True, False, True, None, "bool"),
        (4, 2, 5, 3, False, True, True, [[0, 0, 0, 1], [1, 1, 1, 1]], "float3d"),
        (8, 4, 8, 8, True, True, True, [[1, 1, 1, 1], [0, 0, 1, 1]], "bool")):
    mha = torch.nn.MultiheadAttention(e, h, bias=bias, add_bias_kv=bias_kv, add_zero_attn=zero_attn, kdim=kdim,
                                      vdim=vdim, batch_first=True).double().eval()
    q = torch.randn(B, L, e, dtype=D, requires_grad=True)
    k = torch.randn(B, S, kdim, dtype=D, requires_grad=True)
    v = torch.randn(B, S, vdim, dtype=D, requires_grad=True)
    mask = torch.tensor(kpm, dtype=torch.bool) if kpm is not None else None
    if am == "bool":
        attn = torch.triu(torch.ones(L, S, dtype=torch.bool), diagonal=2)
    elif am == "float3d":
        attn = torch.randn(B * h, L, S, dtype=D)
    else:
        attn = None
    out, w = mha(q, k, v, key_padding_mask=mask, attn_mask=attn, need_weights=True, average_attn_weights=True)
    r = torch.randn(out.shape, dtype=D)
    params = dict(mha.named_parameters())
    grads = torch.autograd.grad((out * r).sum(), [q, k, v] + list(params.values()))
    cases.append({
        "embed_dim": e, "num_heads": h, "kdim": kdim, "vdim": vdim, "bias": bias, "add_bias_kv": bias_kv,
        "add_zero_attn": zero_attn, "key_padding_mask": flat(mask.to(torch.int64)) if mask is not None else None,
        "attn_mask_shape": list(attn.shape) if attn is not None else None,
        "attn_mask_bool": attn is not None and attn.dtype == torch.bool,
        "attn_mask": flat(attn.to(D)) if attn is not None else None,
        "params": {n: {"shape": list(p.shape), "values": flat(p), "grad": flat(g)}
                   for (n, p), g in zip(params.items(), grads[3:])},
        "q_shape": list(q.shape), "q": flat(q), "k_shape": list(k.shape), "k": flat(k), "v_shape": list(v.shape),
        "v": flat(v), "out_shape": list(out.shape), "out": flat(out), "weights_shape": list(w.shape),
        "weights": flat(w), "r": flat(r), "gq": flat(grads[0]), "gk": flat(grads[1]), "gv": flat(grads[2])})
with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_mha_bias_kv.json", "w") as fh:
    json.dump({"torch": torch.__version__, "cases": cases}, fh, separators=(",", ":"))
    fh.write("\n")
print(len(cases), "cases")
