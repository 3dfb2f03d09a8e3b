"""Writes tests/data/reference/torch_rnn.json: torch.nn.RNN (tanh, relu), LSTM and GRU in f64 with
their default initialisation, 1 and 2 layers, bidirectional, batch_first, without bias, with and
without h0/c0, T = 1 and B = 1; for each case the options, every named parameter (name, shape,
values) in named_parameters() order, x, h0/c0 (or null), output, h_n, c_n, stored random weights
r_out, r_h, r_c, and the gradients of
    L = sum(output * r_out) + sum(h_n * r_h) (+ sum(c_n * r_c))
with respect to x, h0, c0 (when given) and every parameter, for tests/nn/test_rnn.cpp. Dropout 0,
eval mode. Run once by hand; the tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_rnn.py tests/data/reference
"""
import json
import sys

import torch

torch.manual_seed(23)
torch.set_num_threads(1)
D = torch.float64
flat = lambda t: t.detach().reshape(-1).tolist()


def named(t):
    return None if t is None else {"shape": list(t.shape), "values": flat(t)}


# name, mode, input, hidden, layers, bias, batch_first, bidirectional, nonlinearity, T, B, with h0 (and c0)
# [, proj_size (LSTM)]
CASES = (
    ("rnn_tanh_1layer", "RNN", 3, 4, 1, True, False, False, "tanh", 5, 3, False),
    ("rnn_relu_2layers_h0", "RNN", 3, 4, 2, True, False, False, "relu", 4, 2, True),
    ("lstm_1layer", "LSTM", 3, 4, 1, True, False, False, "tanh", 5, 3, False),
    ("lstm_2layers_bidirectional_h0_c0", "LSTM", 3, 4, 2, True, False, True, "tanh", 4, 2, True),
    ("lstm_batch_first_no_bias", "LSTM", 3, 4, 1, False, True, False, "tanh", 4, 3, False),
    ("gru_1layer", "GRU", 3, 4, 1, True, False, False, "tanh", 5, 3, False),
    ("gru_2layers_bidirectional_batch_first_h0", "GRU", 3, 4, 2, True, True, True, "tanh", 3, 2, True),
    ("lstm_T1_h0_c0", "LSTM", 3, 4, 1, True, False, False, "tanh", 1, 2, True),
    ("gru_T1_bidirectional_h0", "GRU", 3, 4, 1, True, False, True, "tanh", 1, 3, True),
    ("rnn_tanh_B1_bidirectional_batch_first_h0", "RNN", 3, 4, 1, True, True, True, "tanh", 4, 1, True),
    # Appended later (the cases above keep their random draws): LSTM with a projection.
    ("lstm_proj_2layers_bidirectional_h0_c0", "LSTM", 3, 5, 2, True, False, True, "tanh", 4, 2, True, 2),
    ("lstm_proj_batch_first_no_bias", "LSTM", 3, 4, 1, False, True, False, "tanh", 3, 3, False, 3),
    # Appended later: packed sequences (pack_padded_sequence with these lengths and enforce_sorted,
    # the output padded back to T by pad_packed_sequence).
    ("lstm_packed_2layers_bidirectional_h0_c0", "LSTM", 3, 4, 2, True, False, True, "tanh", 5, 3, True, 0, [5, 3, 2], True),
    ("gru_packed_bidirectional_batch_first_unsorted", "GRU", 3, 4, 1, True, True, True, "tanh", 4, 3, False, 0, [2, 4, 1], False),
    ("rnn_relu_packed_2layers_h0", "RNN", 3, 4, 2, True, False, False, "relu", 4, 2, True, 0, [4, 1], True),
    ("lstm_proj_packed_bidirectional_batch_first_unsorted_h0_c0", "LSTM", 3, 5, 1, True, True, True, "tanh", 4, 3, True, 2, [3, 4, 2], False),
    # Appended later: unbatched 2-D input (B = 0 here: x [T, in], h0/c0 [layers * dirs, features]).
    ("lstm_unbatched_proj_bidirectional_2layers_h0_c0", "LSTM", 3, 4, 2, True, True, True, "tanh", 5, 0, True, 2),
    ("gru_unbatched", "GRU", 3, 4, 1, True, False, False, "tanh", 4, 0, False),
)

cases = []
for name, mode, n_in, hidden, layers, bias, batch_first, bidir, nonlin, T, B, with_h0, *rest in CASES:
    proj = rest[0] if rest else 0
    lengths = rest[1] if len(rest) > 1 else None
    enforce_sorted = rest[2] if len(rest) > 2 else True
    kw = dict(num_layers=layers, bias=bias, batch_first=batch_first, bidirectional=bidir, dropout=0.0)
    if proj:
        kw["proj_size"] = proj
    if mode == "RNN":
        kw["nonlinearity"] = nonlin
    m = getattr(torch.nn, mode)(n_in, hidden, **kw).double().eval()
    dirs = 2 if bidir else 1
    batch = (B,) if B else ()  # B = 0: unbatched
    x = torch.randn(*((T, n_in) if not B else (B, T, n_in) if batch_first else (T, B, n_in)), dtype=D, requires_grad=True)
    h0 = torch.randn(layers * dirs, *batch, proj or hidden, dtype=D, requires_grad=True) if with_h0 else None
    c0 = torch.randn(layers * dirs, *batch, hidden, dtype=D, requires_grad=True) if with_h0 and mode == "LSTM" else None
    inp = x
    if lengths is not None:
        inp = torch.nn.utils.rnn.pack_padded_sequence(x, lengths, batch_first=batch_first, enforce_sorted=enforce_sorted)
    if mode == "LSTM":
        out, (h_n, c_n) = m(inp, (h0, c0)) if with_h0 else m(inp)
    else:
        out, h_n = m(inp, h0) if with_h0 else m(inp)
        c_n = None
    if lengths is not None:
        out, _ = torch.nn.utils.rnn.pad_packed_sequence(out, batch_first=batch_first, total_length=T)
    r_out = torch.randn(out.shape, dtype=D)
    r_h = torch.randn(h_n.shape, dtype=D)
    r_c = torch.randn(c_n.shape, dtype=D) if c_n is not None else None
    loss = (out * r_out).sum() + (h_n * r_h).sum() + ((c_n * r_c).sum() if c_n is not None else 0)
    params = list(m.named_parameters())
    wrt = [x] + ([h0] if h0 is not None else []) + ([c0] if c0 is not None else []) + [p for _, p in params]
    grads = list(torch.autograd.grad(loss, wrt))
    gx = grads.pop(0)
    gh0 = grads.pop(0) if h0 is not None else None
    gc0 = grads.pop(0) if c0 is not None else None
    cases.append({
        "name": name, "mode": mode,
        "options": {"input_size": n_in, "hidden_size": hidden, "num_layers": layers, "bias": bias,
                    "batch_first": batch_first, "bidirectional": bidir, "nonlinearity": nonlin, "dropout": 0.0,
                    "proj_size": proj},
        "lengths": lengths, "enforce_sorted": enforce_sorted,
        "params": [{"name": n, "shape": list(p.shape), "values": flat(p), "grad": flat(g)}
                   for (n, p), g in zip(params, grads)],
        "x": named(x), "h0": named(h0), "c0": named(c0),
        "output": named(out), "h_n": named(h_n), "c_n": named(c_n),
        "r_out": flat(r_out), "r_h": flat(r_h), "r_c": None if r_c is None else flat(r_c),
        "grad_x": flat(gx), "grad_h0": None if gh0 is None else flat(gh0),
        "grad_c0": None if gc0 is None else flat(gc0)})

    # Sanity (not stored): the same module in f32 against this f64 reference, the margin the
    # C++ f32 check relies on.
    if lengths is not None:
        print(f"{name}: {len(params)} parameters, packed lengths {lengths}, output {list(out.shape)}")
        continue
    m32 = getattr(torch.nn, mode)(n_in, hidden, **kw).float().eval()
    m32.load_state_dict(m.state_dict())
    args = () if not with_h0 else (((h0.float(), c0.float()),) if mode == "LSTM" else (h0.float(),))
    out32 = m32(x.detach().float(), *args)[0].double()
    err = ((out32 - out).abs() / (out.abs() + 1e-6)).max().item()
    print(f"{name}: {len(params)} parameters, output {list(out.shape)}, f32 max rel error {err:.1e}")

with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_rnn.json", "w") as fh:
    json.dump({"torch": torch.__version__, "cases": cases}, fh, separators=(",", ":"))
    fh.write("\n")
print(len(cases), "cases")
