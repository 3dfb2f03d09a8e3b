"""Writes tests/data/reference/torch_transformer.json: torch.nn.TransformerDecoderLayer,
TransformerEncoder, TransformerDecoder and Transformer (batch_first, f64, train mode with dropout 0)
with post- and pre-norm, ReLU and GELU, with and without bias, and every kind of mask (a causal
float mask from generate_square_subsequent_mask, a bool attention mask, key padding masks of the
source, target and memory). For each case: the options, every named parameter (name, shape,
values) in named_parameters() order, the inputs, the masks, the output, stored random weights r,
and the gradients of L = sum(y * r) with respect to the inputs and every parameter, for
tests/nn/test_transformer_stack.cpp. Run once by hand; the tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_transformer.py tests/data/reference
"""
import json
import sys

import torch

torch.manual_seed(61)
torch.set_num_threads(1)
D = torch.float64
flat = lambda t: t.detach().reshape(-1).tolist()
E, H, F = 8, 2, 12  # d_model, nhead, dim_feedforward


def mask_json(m):
    if m is None:
        return None
    # JSON has no infinities: -inf is written as null.
    return {"bool": m.dtype == torch.bool, "shape": list(m.shape),
            "values": [None if v == float("-inf") else v for v in flat(m.to(D))]}


def layer_kw(activation, norm_first, bias):
    return dict(d_model=E, nhead=H, dim_feedforward=F, dropout=0.0, activation=activation, batch_first=True,
                norm_first=norm_first, bias=bias, dtype=D)


def pad_mask(b, n, lengths):
    return torch.arange(n).unsqueeze(0).expand(b, n) >= torch.tensor(lengths).unsqueeze(1)


# name, kind, activation, norm_first, bias, layers (encoder, decoder), final norm, B, L (target), S (source),
# masks: a subset of src_mask, tgt_mask, memory_mask, src_pad, tgt_pad, memory_pad
CASES = (
    ("decoder_layer_post_norm_causal_padding", "decoder_layer", "relu", False, True, (0, 1), False, 2, 4, 5,
     ("tgt_mask", "tgt_pad", "memory_pad")),
    ("decoder_layer_pre_norm_gelu_no_bias_bool_memory_mask", "decoder_layer", "gelu", True, False, (0, 1), False, 2,
     3, 4, ("memory_mask",)),
    ("encoder_2_layers_norm_causal_padding", "encoder", "relu", False, True, (2, 0), True, 3, 0, 5,
     ("src_mask", "src_pad")),
    ("encoder_2_layers_pre_norm_gelu", "encoder", "gelu", True, True, (2, 0), False, 2, 0, 4, ()),
    ("decoder_2_layers_norm_every_mask", "decoder", "relu", False, True, (0, 2), True, 2, 4, 3,
     ("tgt_mask", "memory_mask", "tgt_pad", "memory_pad")),
    ("transformer_post_norm_every_mask", "transformer", "relu", False, True, (2, 2), True, 2, 4, 5,
     ("src_mask", "tgt_mask", "memory_mask", "src_pad", "tgt_pad", "memory_pad")),
    ("transformer_pre_norm_gelu_no_bias", "transformer", "gelu", True, False, (1, 2), True, 2, 3, 4,
     ("tgt_mask",)),
)

cases = []
for name, kind, act, norm_first, bias, (n_enc, n_dec), final_norm, B, L, S, masks in CASES:
    kw = layer_kw(act, norm_first, bias)
    if kind == "decoder_layer":
        m = torch.nn.TransformerDecoderLayer(**kw)
    elif kind == "encoder":
        norm = torch.nn.LayerNorm(E, bias=bias, dtype=D) if final_norm else None
        m = torch.nn.TransformerEncoder(torch.nn.TransformerEncoderLayer(**kw), n_enc, norm=norm,
                                        enable_nested_tensor=False)
    elif kind == "decoder":
        norm = torch.nn.LayerNorm(E, bias=bias, dtype=D) if final_norm else None
        m = torch.nn.TransformerDecoder(torch.nn.TransformerDecoderLayer(**kw), n_dec, norm=norm)
    else:
        m = torch.nn.Transformer(num_encoder_layers=n_enc, num_decoder_layers=n_dec, **kw)
    # Distinct values everywhere (deep-copied layers start equal; LayerNorm starts at 1 and 0).
    with torch.no_grad():
        for n, p in m.named_parameters():
            gamma = "norm" in n and n.endswith("weight")
            p.copy_(torch.randn(p.shape, dtype=D) * (0.4 if p.dim() > 1 else 0.2) + (1.0 if gamma else 0.0))
    m.train()
    src = torch.randn(B, S, E, dtype=D, requires_grad=True)
    tgt = torch.randn(B, L, E, dtype=D, requires_grad=True) if L else None
    mk = {}
    if "src_mask" in masks:
        mk["src_mask"] = torch.nn.Transformer.generate_square_subsequent_mask(S, dtype=D)
    if "tgt_mask" in masks:
        mk["tgt_mask"] = torch.nn.Transformer.generate_square_subsequent_mask(L, dtype=D)
    if "memory_mask" in masks:
        mm = torch.rand(L, S) < 0.3
        mm[:, 0] = False  # every query keeps a key
        mk["memory_mask"] = mm
    if "src_pad" in masks:
        mk["src_pad"] = pad_mask(B, S, [S - i for i in range(B)])
    if "tgt_pad" in masks:
        mk["tgt_pad"] = pad_mask(B, L, [L - i for i in range(B)])
    if "memory_pad" in masks:
        mk["memory_pad"] = pad_mask(B, S, [S - 1 - i for i in range(B)])
    g = mk.get
    if kind == "decoder_layer":
        inputs = [tgt, src]
        y = m(tgt, src, tgt_mask=g("tgt_mask"), memory_mask=g("memory_mask"), tgt_key_padding_mask=g("tgt_pad"),
              memory_key_padding_mask=g("memory_pad"))
    elif kind == "encoder":
        inputs = [src]
        y = m(src, mask=g("src_mask"), src_key_padding_mask=g("src_pad"))
    elif kind == "decoder":
        inputs = [tgt, src]
        y = m(tgt, src, tgt_mask=g("tgt_mask"), memory_mask=g("memory_mask"), tgt_key_padding_mask=g("tgt_pad"),
              memory_key_padding_mask=g("memory_pad"))
    else:
        inputs = [src, tgt]
        y = m(src, tgt, src_mask=g("src_mask"), tgt_mask=g("tgt_mask"), memory_mask=g("memory_mask"),
              src_key_padding_mask=g("src_pad"), tgt_key_padding_mask=g("tgt_pad"),
              memory_key_padding_mask=g("memory_pad"))
    r = torch.randn(y.shape, dtype=D)
    named = list(m.named_parameters())
    grads = torch.autograd.grad((y * r).sum(), inputs + [p for _, p in named])
    cases.append({
        "name": name, "kind": kind, "gelu": act == "gelu", "norm_first": norm_first, "bias": bias,
        "encoder_layers": n_enc, "decoder_layers": n_dec, "final_norm": final_norm,
        "B": B, "L": L, "S": S, "d_model": E, "nhead": H, "dim_feedforward": F,
        "params": [{"name": n, "shape": list(p.shape), "values": flat(p)} for n, p in named],
        "src": flat(src), "tgt": flat(tgt) if tgt is not None else None,
        "masks": {k: mask_json(v) for k, v in mk.items()},
        "y": flat(y), "y_shape": list(y.shape), "r": flat(r),
        "grad_inputs": [flat(t) for t in grads[:len(inputs)]],
        "grad_params": [flat(t) for t in grads[len(inputs):]],
    })
    print(name, list(y.shape), len(named), "parameters")

with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_transformer.json", "w") as fh:
    json.dump({"torch": torch.__version__, "cases": cases}, fh, separators=(",", ":"))
    fh.write("\n")
print(len(cases), "cases")
