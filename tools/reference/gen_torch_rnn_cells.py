"""Writes tests/data/reference/torch_rnn_cells.json: torch.nn.RNNCell (tanh, relu), LSTMCell and
GRUCell in f64, with and without bias, batched and unbatched, with a given or a zero initial
state, run for two steps (the second from the first's state); the final state and the gradients
of sum(h2 r) (+ sum(c2 rc)) with respect to both inputs, the initial state and every parameter,
for tests/nn/test_rnn_cell.cpp. Run once by hand; the tests need no Python:
    python -m venv v && v/bin/pip install torch
    v/bin/python tools/reference/gen_torch_rnn_cells.py tests/data/reference
"""
import json
import sys

import torch

torch.manual_seed(37)
D = torch.float64
flat = lambda t: t.detach().reshape(-1).tolist()


def named(t):
    return None if t is None else {"shape": list(t.shape), "values": flat(t)}


# name, cell, input, hidden, bias, nonlinearity, B (0: unbatched), with an initial state
CASES = (
    ("rnn_tanh_state", "RNNCell", 3, 4, True, "tanh", 2, True),
    ("rnn_relu_no_bias_zero_state", "RNNCell", 3, 4, False, "relu", 3, False),
    ("lstm_state", "LSTMCell", 3, 5, True, "tanh", 2, True),
    ("lstm_no_bias_zero_state", "LSTMCell", 4, 3, False, "tanh", 3, False),
    ("lstm_unbatched_state", "LSTMCell", 3, 4, True, "tanh", 0, True),
    ("gru_state", "GRUCell", 3, 4, True, "tanh", 2, True),
    ("gru_unbatched_zero_state", "GRUCell", 2, 3, True, "tanh", 0, False),
)

cases = []
for name, kind, n_in, hidden, bias, nonlin, B, with_state in CASES:
    kw = {"bias": bias}
    if kind == "RNNCell":
        kw["nonlinearity"] = nonlin
    m = getattr(torch.nn, kind)(n_in, hidden, **kw).double()
    batch = (B,) if B else ()
    xs = [torch.randn(*batch, n_in, dtype=D, requires_grad=True) for _ in range(2)]
    h0 = torch.randn(*batch, hidden, dtype=D, requires_grad=True) if with_state else None
    c0 = torch.randn(*batch, hidden, dtype=D, requires_grad=True) if with_state and kind == "LSTMCell" else None
    if kind == "LSTMCell":
        s = (h0, c0) if with_state else None
        for x in xs:
            s = m(x, s)
        h, c = s
    else:
        h = h0
        for x in xs:
            h = m(x, h)
        c = None
    r = torch.randn(h.shape, dtype=D)
    rc = torch.randn(c.shape, dtype=D) if c is not None else None
    loss = (h * r).sum() + ((c * rc).sum() if c is not None else 0)
    params = list(m.named_parameters())
    wrt = xs + ([h0] if h0 is not None else []) + ([c0] if c0 is not None else []) + [p for _, p in params]
    grads = list(torch.autograd.grad(loss, wrt))
    cases.append({
        "name": name, "cell": kind, "input_size": n_in, "hidden_size": hidden, "bias": bias, "nonlinearity": nonlin,
        "params": [{"name": n, "shape": list(p.shape), "values": flat(p), "grad": flat(g)}
                   for (n, p), g in zip(params, grads[len(wrt) - len(params):])],
        "x": [named(x) for x in xs], "h0": named(h0), "c0": named(c0), "h": named(h), "c": named(c),
        "r": flat(r), "rc": None if rc is None else flat(rc),
        "grad_x": [flat(g) for g in grads[:2]],
        "grad_h0": flat(grads[2]) if h0 is not None else None,
        "grad_c0": flat(grads[3]) if c0 is not None else None})
    print(f"{name}: h {list(h.shape)}")

with open(f"{sys.argv[1] if len(sys.argv) > 1 else '.'}/torch_rnn_cells.json", "w") as fh:
    json.dump({"torch": torch.__version__, "cases": cases}, fh, separators=(",", ":"))
    fh.write("\n")
print(len(cases), "cases")
