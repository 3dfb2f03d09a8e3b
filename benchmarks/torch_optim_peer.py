#!/usr/bin/env python3
"""One optimizer step on BERT-mini's parameters: mixgrad's bench_optim beside torch.optim.

Runs `bench_optim --json` (mixgrad's step for every optimizer on BERT-mini MLM's 58 parameters,
11.2M f32 values), builds f32 tensors of the same shapes in PyTorch (the "parameters" row of the
JSON) with gradients of the same scale, and times the same optimizers with the same options: one
warm-up step, then the best of N, wall and process CPU time. PyTorch runs its single-tensor code
(foreach=False, its CPU default) and its foreach code; the faster is kept and named. Rounds
alternate the two programs, each side keeping its best. Optional: never needed by the build or
the tests.

    pip install torch
    python3 benchmarks/torch_optim_peer.py --bench-optim build/benchmarks/bench_optim --threads 1 --rounds 3
"""
import argparse
import json
import os
import subprocess
import tempfile
import time

import torch

# bench_optim's row name -> (torch class, options): bench_optim's options (benchmarks/bench_optim.cpp).
PEERS = {
    "SGD momentum": ("SGD", dict(lr=0.1, momentum=0.9)),
    "Adam": ("Adam", dict(lr=1e-3)),
    "AdamW": ("AdamW", dict(lr=1e-3)),
    "RMSprop": ("RMSprop", dict(lr=1e-2)),
    "Adagrad": ("Adagrad", dict(lr=1e-2)),
    "Adamax": ("Adamax", dict(lr=2e-3)),
    "NAdam": ("NAdam", dict(lr=2e-3)),
    "RAdam": ("RAdam", dict(lr=1e-3)),
    "Adadelta": ("Adadelta", dict(lr=1.0)),
    "Rprop": ("Rprop", dict(lr=1e-2)),
    "ASGD": ("ASGD", dict(lr=1e-2)),
    "Adafactor": ("Adafactor", dict(lr=1e-2)),
    "Muon (hidden matrices)": ("Muon", dict(lr=0.02)),  # on the "muon parameters" row's shapes
}


def run_ours(binary, threads):
    with tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False) as f:
        path = f.name
    try:
        subprocess.run([binary, "--threads", str(threads), "--json", path], check=True, stdout=subprocess.DEVNULL)
        with open(path) as f:
            rows = [json.loads(line) for line in f if line.strip()]
    finally:
        os.unlink(path)
    shapes = next(r for r in rows if r["name"] == "parameters")["shape"].split(",")
    muon_shapes = next(r for r in rows if r["name"] == "muon parameters")["shape"].split(",")
    times = {}
    for r in rows:
        for kind in ("wall", "cpu"):
            if r["name"].endswith(" " + kind):
                times.setdefault(r["name"][: -len(kind) - 1], {})[kind] = r["value"]
    return shapes, muon_shapes, times


def time_torch(shapes, cls_name, options, foreach, reps):
    gen = torch.Generator().manual_seed(1)
    params = []
    for s in shapes:
        dims = [] if s == "scalar" else [int(d) for d in s.split("x")]
        p = torch.randn(dims, generator=gen).requires_grad_()
        p.grad = torch.randn(dims, generator=gen) * 1e-2
        params.append(p)
    extra = {} if cls_name == "Muon" else {"foreach": foreach}  # Muon takes no foreach argument
    opt = getattr(torch.optim, cls_name)(params, **extra, **options)
    opt.step()
    wall = cpu = float("inf")
    for _ in range(reps):
        c0, w0 = time.process_time(), time.perf_counter()
        opt.step()
        wall = min(wall, time.perf_counter() - w0)
        cpu = min(cpu, time.process_time() - c0)
    return 1e3 * wall, 1e3 * cpu


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench-optim", required=True, help="path of mixgrad's bench_optim")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--reps", type=int, default=10)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    ours, theirs = {}, {}
    shapes = None
    for _ in range(args.rounds):
        shapes, muon_shapes, times = run_ours(args.bench_optim, args.threads)
        for name, t in times.items():
            best = ours.setdefault(name, {"wall": float("inf"), "cpu": float("inf")})
            best["wall"], best["cpu"] = min(best["wall"], t["wall"]), min(best["cpu"], t["cpu"])
        for name, (cls_name, options) in PEERS.items():
            for foreach in ((False,) if cls_name == "Muon" else (False, True)):  # Muon has no foreach code
                wall, cpu = time_torch(muon_shapes if cls_name == "Muon" else shapes, cls_name, options, foreach,
                                       args.reps)
                best = theirs.get(name)
                if best is None or wall < best[0]:
                    theirs[name] = (wall, cpu, "foreach" if foreach else "single-tensor")
    print(f"torch {torch.__version__}, {args.threads} thread(s), {args.rounds} alternating rounds, best of "
          f"{args.reps} steps after one warm-up; BERT-mini MLM's {len(shapes)} f32 parameters; "
          f"OMP_WAIT_POLICY={os.environ.get('OMP_WAIT_POLICY', '(unset)')}")
    print("| optimizer | ours ms (wall) | PyTorch ms (wall) | PyTorch code | ratio wall | ratio CPU |")
    print("| --- | --- | --- | --- | --- | --- |")
    for name in ours:
        if name not in theirs:
            print(f"| {name} | {ours[name]['wall']:.2f} | - | - | - | - |")
            continue
        wall, cpu, code = theirs[name]
        print(f"| {name} | {ours[name]['wall']:.2f} | {wall:.2f} | {code} | {ours[name]['wall'] / wall:.2f} | "
              f"{ours[name]['cpu'] / cpu:.2f} |")


if __name__ == "__main__":
    main()
