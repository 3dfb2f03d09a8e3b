"""Writes tests/data/reference/torch_mha_kvdim.json: torch.nn.MultiheadAttention (batch_first) with
kdim and vdim other than embed_dim (its separate q/k/v projection weights), with and without bias
and a key padding mask, on f64 inputs: every parameter, the output, the head-averaged attention
weights and the gradients of sum(out * r) w.r.t. query, key, value and every parameter, for
tests/nn/test_attention_layers.cpp. Run once by hand; the tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_mha_kvdim.py tests/data/reference
"""
import json
import sys

import torch

torch.manual_seed(41)
torch.set_num_threads(1)
D = torch.float64
flat = lambda t: t.detach().reshape(-1).tolist()
cases = []
for e, h, kdim, vdim, bias, masked in ((8, 2, 5, 3, True, False), (6, 3, 6, 4, False, True), (4, 1, 7, 4, True, True)):
    mha = torch.nn.MultiheadAttention(e, h, bias=bias, kdim=kdim, vdim=vdim, batch_first=True).double().eval()
    q = torch.randn(2, 3, e, dtype=D, requires_grad=True)
    k = torch.randn(2, 4, kdim, dtype=D, requires_grad=True)
    v = torch.randn(2, 4, vdim, dtype=D, requires_grad=True)
    mask = torch.tensor([[False, False, True, False], [False, True, False, False]]) if masked else None
    out, w = mha(q, k, v, key_padding_mask=mask, need_weights=True, average_attn_weights=True)
    r = torch.randn(out.shape, dtype=D)
    params = dict(mha.named_parameters())
    grads = torch.autograd.grad((out * r).sum(), [q, k, v] + list(params.values()))
    cases.append({
        "embed_dim": e, "num_heads": h, "kdim": kdim, "vdim": vdim, "bias": bias,
        "key_padding_mask": flat(mask.to(torch.int64)) if masked else None,
        "params": {n: {"shape": list(p.shape), "values": flat(p), "grad": flat(g)}
                   for (n, p), g in zip(params.items(), grads[3:])},
        "q_shape": list(q.shape), "q": flat(q), "k_shape": list(k.shape), "k": flat(k), "v_shape": list(v.shape),
        "v": flat(v), "out_shape": list(out.shape), "out": flat(out), "weights_shape": list(w.shape),
        "weights": flat(w), "r": flat(r), "gq": flat(grads[0]), "gk": flat(grads[1]), "gv": flat(grads[2])})
with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_mha_kvdim.json", "w") as fh:
    json.dump({"torch": torch.__version__, "cases": cases}, fh, separators=(",", ":"))
    fh.write("\n")
print(len(cases), "cases")
