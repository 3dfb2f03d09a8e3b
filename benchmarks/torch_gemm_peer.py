#!/usr/bin/env python3
"""bench_gemm's shapes in PyTorch: torch.mm on the GEMMs of bench_amp's MLP (784-1024-1024-10,
batch 256) and BERT-mini (32 x 128 tokens, width 256, FFN 1024, vocab 8192), the forward product
and both backward products of each linear layer, with the same operand layouts (x @ W^T, dY @ W,
dY^T @ x as transposed views), in f32 (MKL inside PyTorch's x86 wheels) and bf16. Prints GFLOP/s
(2nkm / best of N) beside the column names of bench_gemm, so the two tables line up. Optional:
nothing in the build or tests needs it.

    OMP_WAIT_POLICY=PASSIVE /work/venv-torch/bin/python benchmarks/torch_gemm_peer.py --threads 1
"""
import argparse
import time

import torch


def shapes(scale):
    out = []
    def linear(model, rows, fin, fout):
        out.append((model, "fwd", rows, fin, fout, "N", "T"))
        out.append((model, "dX", rows, fout, fin, "N", "N"))
        out.append((model, "dW", fout, rows, fin, "T", "N"))
    linear("mlp", 256 // scale, 784 // scale, 1024 // scale)
    linear("mlp", 256 // scale, 1024 // scale, 1024 // scale)
    t, h, f, v = 4096 // scale, 256 // scale, 1024 // scale, 8192 // scale
    linear("bert", t, h, h)
    linear("bert", t, h, f)
    linear("bert", t, f, h)
    linear("bert", t, h, v)
    return out


def operand(rows, cols, trans, dtype):
    # 'T': the transposed view of a row-major [cols, rows] matrix, as autograd hands it over.
    return torch.randn(cols, rows).to(dtype).t() if trans == "T" else torch.randn(rows, cols).to(dtype)


def best(fn, reps):
    fn()
    t = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {args.threads} thread(s), best of {args.reps}, "
          f"cpu capability {torch.backends.cpu.get_cpu_capability()}, mkl {torch.backends.mkl.is_available()}")
    print(f"{'model':5} {'prod':4} {'n x k x m (ta tb)':18} {'f32':>8} {'bf16':>8}")
    for model, what, n, k, m, ta, tb in shapes(8 if args.quick else 1):
        row = []
        for dtype in (torch.float32, torch.bfloat16):
            a, b = operand(n, k, ta, dtype), operand(k, m, tb, dtype)
            t = best(lambda: torch.mm(a, b), args.reps)
            row.append(2.0 * n * k * m / t / 1e9)
        print(f"{model:5} {what:4} {f'{n}x{k}x{m} {ta}{tb}':18} {row[0]:8.1f} {row[1]:8.1f}")


if __name__ == "__main__":
    main()
