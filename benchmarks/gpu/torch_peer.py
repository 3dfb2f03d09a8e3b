#!/usr/bin/env python3
"""The PyTorch peer of bench_cuda: the same ops, shapes and dtypes on the same GPU, timed the same
way (CUDA events around 20 back-to-back calls after a warm-up, best of 5 batches), in GB/s of the
bytes each call must read and write, and GEMMs (torch.matmul) in TFLOP/s of 2 n^3 flops, convolutions (torch.nn.functional.conv2d and
torch.nn.grad, i.e. cuDNN) in TFLOP/s of 2 N O C kH kW Ho Wo flops. Writes
one JSON object per row (name, dtype, shape, value, unit) so benchmarks/gpu/check.sh can put the
figure beside mixgrad's. Like mixgrad, f16/bf16 GEMMs keep split-K sums in f32 (the reduced-
precision reduction flags are off) and f32 is strict except in the "gemm (tf32)" row.

    python3 benchmarks/gpu/torch_peer.py [--quick] [--json FILE]
"""
import argparse
import json

import torch


def ms_per_call(fn, reps):
    fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end) / reps)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    log2 = 20 if args.quick else 28
    n, reps = 1 << log2, 3 if args.quick else 20
    shape = f"2^{log2}"
    dev = torch.device("cuda:0")
    torch.backends.cuda.matmul.allow_tf32 = False
    for flag in ("allow_fp16_reduced_precision_reduction", "allow_bf16_reduced_precision_reduction"):
        try:
            setattr(torch.backends.cuda.matmul, flag, False)
        except AttributeError:  # an older torch without the flag
            pass
    a, b = torch.randn(n, device=dev), torch.randn(n, device=dev)
    h, g = a.to(torch.bfloat16), b.to(torch.bfloat16)
    m = a.view(n // 4096, 4096)
    gelu = torch.nn.functional.gelu
    side = 1 << (log2 // 2)
    sq = a.view(side, side)
    lse_rows = 32 if args.quick else 4096
    lse = a[: lse_rows * 32768].to(torch.bfloat16).view(lse_rows, 32768)
    rows = [
        ("add", "f32", shape, 12.0 * n, lambda: torch.add(a, b)),
        ("gelu (erf)", "f32", shape, 8.0 * n, lambda: gelu(a)),
        ("cast f32->bf16", "bf16", shape, 6.0 * n, lambda: a.to(torch.bfloat16)),
        ("mul", "bf16", shape, 6.0 * n, lambda: torch.mul(h, g)),
        ("transpose copy", "f32", f"[4096, {n // 4096}]", 8.0 * n, lambda: m.t().contiguous()),
        ("sum", "f32", shape, 4.0 * n, lambda: torch.sum(a)),
        ("sum dim 0", "f32", f"[{side}, {side}]", 4.0 * n, lambda: torch.sum(sq, dim=0)),
        ("logsumexp rows", "bf16", f"[{lse_rows}, 32768]", 2.0 * lse_rows * 32768, lambda: torch.logsumexp(lse, dim=1)),
        ("softmax rows", "bf16", f"[{lse_rows}, 32768]", 4.0 * lse_rows * 32768, lambda: torch.softmax(lse, dim=1)),
    ]
    out = []
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name(0)}")
    for name, dtype, shp, traffic, fn in rows:
        ms = ms_per_call(fn, reps)
        value = traffic / (ms * 1e-3) / 1e9
        out.append({"name": name, "dtype": dtype, "shape": shp, "value": value, "unit": "GB/s"})
        print(f"{name:<22} {dtype:<6} {shp:<18} {value:10.1f} GB/s")
    # GEMMs: bf16/f16 at 8192^3, f32 (strict and TF32) at 4096^3; --quick: 1024^3.
    big, f32n = (1024, 1024) if args.quick else (8192, 4096)
    for name, dtype, tdt, size, tf32 in [("gemm", "bf16", torch.bfloat16, big, False),
                                          ("gemm", "f16", torch.float16, big, False),
                                          ("gemm", "f32", torch.float32, f32n, False),
                                          ("gemm (tf32)", "f32", torch.float32, f32n, True)]:
        x = torch.randn(size, size, device=dev).to(tdt)
        y = torch.randn(size, size, device=dev).to(tdt)
        torch.backends.cuda.matmul.allow_tf32 = tf32
        ms = ms_per_call(lambda: torch.matmul(x, y), reps)
        torch.backends.cuda.matmul.allow_tf32 = False
        value = 2.0 * size ** 3 / (ms * 1e-3) / 1e12
        shp = f"{size}^3"
        out.append({"name": name, "dtype": dtype, "shape": shp, "value": value, "unit": "TFLOP/s"})
        print(f"{name:<22} {dtype:<6} {shp:<18} {value:10.1f} TFLOP/s")
        del x, y
    # Convolutions: the ResNet-50 3x3 conv of bench_cuda (cuDNN here: the part-2 target), each
    # direction in TFLOP/s of 2 N O C 9 Ho Wo flops.
    n = 8 if args.quick else 64
    flops = 2.0 * n * 128 * 128 * 9 * 28 * 28
    shp = f"[{n}, 128, 28, 28] 3x3"
    for dtype, tdt in [("bf16", torch.bfloat16), ("f32", torch.float32)]:
        x = torch.randn(n, 128, 28, 28, device=dev).to(tdt)
        w = torch.randn(128, 128, 3, 3, device=dev).to(tdt)
        g = torch.randn(n, 128, 28, 28, device=dev).to(tdt)
        torch.backends.cudnn.allow_tf32 = False
        for name, fn in [("conv2d fwd", lambda: torch.nn.functional.conv2d(x, w, padding=1)),
                         ("conv2d dgrad", lambda: torch.nn.grad.conv2d_input(x.shape, w, g, padding=1)),
                         ("conv2d wgrad", lambda: torch.nn.grad.conv2d_weight(x, w.shape, g, padding=1))]:
            ms = ms_per_call(fn, reps)
            value = flops / (ms * 1e-3) / 1e12
            out.append({"name": name, "dtype": dtype, "shape": shp, "value": value, "unit": "TFLOP/s"})
            print(f"{name:<22} {dtype:<6} {shp:<18} {value:10.1f} TFLOP/s")
        del x, w, g
    if args.json:
        with open(args.json, "w") as f:
            for r in out:
                f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
