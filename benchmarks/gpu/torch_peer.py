#!/usr/bin/env python3
"""The PyTorch peer of bench_cuda: the same ops, shapes and dtypes on the same GPU, timed the same
way (CUDA events around 20 back-to-back calls after a warm-up, best of 5 batches), in GB/s of the
bytes each call must read and write, argsort in elements sorted per second, and GEMMs (torch.matmul) in TFLOP/s of 2 n^3 flops, convolutions (torch.nn.functional.conv2d and
torch.nn.grad, i.e. cuDNN) in TFLOP/s of 2 N O C kH kW Ho Wo flops. Writes
one JSON object per row (name, dtype, shape, value, unit) so benchmarks/gpu/check.sh can put the
figure beside mixgrad's. Like mixgrad, f16/bf16 GEMMs keep split-K sums in f32 (the reduced-
precision reduction flags are off) and f32 is strict except in the "gemm (tf32)" row.

    python3 benchmarks/gpu/torch_peer.py [--quick] [--json FILE]
    python3 benchmarks/gpu/torch_peer.py --resnet50-conv [--quick] [--json FILE]

--resnet50-conv measures instead the peer of bench_cudnn_conv: forward, input gradient and weight
gradient of each distinct ResNet-50 conv shape at batch 256 (--quick: 8, first 3 shapes), f16 and
bf16, channels-last tensors, torch.backends.cudnn.benchmark = True, the same timing (one call
first, best of 5 batches of 10 calls) and the same row names.
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


# benchmarks/bench_cudnn_conv.cpp's table: (name, C, H, O, k, stride); padding k // 2.
RESNET50_CONVS = [
    ("conv1 7x7/2", 3, 224, 64, 7, 2),
    ("l1 1x1 64>64", 64, 56, 64, 1, 1), ("l1 3x3 64", 64, 56, 64, 3, 1),
    ("l1 1x1 64>256", 64, 56, 256, 1, 1), ("l1 1x1 256>64", 256, 56, 64, 1, 1),
    ("l2 1x1 256>128", 256, 56, 128, 1, 1), ("l2 3x3/2 128", 128, 56, 128, 3, 2),
    ("l2 1x1 128>512", 128, 28, 512, 1, 1), ("l2 ds 256>512/2", 256, 56, 512, 1, 2),
    ("l2 1x1 512>128", 512, 28, 128, 1, 1), ("l2 3x3 128", 128, 28, 128, 3, 1),
    ("l3 1x1 512>256", 512, 28, 256, 1, 1), ("l3 3x3/2 256", 256, 28, 256, 3, 2),
    ("l3 1x1 256>1024", 256, 14, 1024, 1, 1), ("l3 ds 512>1024/2", 512, 28, 1024, 1, 2),
    ("l3 1x1 1024>256", 1024, 14, 256, 1, 1), ("l3 3x3 256", 256, 14, 256, 3, 1),
    ("l4 1x1 1024>512", 1024, 14, 512, 1, 1), ("l4 3x3/2 512", 512, 14, 512, 3, 2),
    ("l4 1x1 512>2048", 512, 7, 2048, 1, 1), ("l4 ds 1024>2048/2", 1024, 14, 2048, 1, 2),
    ("l4 1x1 2048>512", 2048, 7, 512, 1, 1), ("l4 3x3 512", 512, 7, 512, 3, 1),
]


def resnet50_convs(args):
    dev = torch.device("cuda:0")
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = False
    n, reps = (8, 2) if args.quick else (256, 10)
    layers = RESNET50_CONVS[:3] if args.quick else RESNET50_CONVS
    cl = torch.channels_last
    out = []
    print(f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}, {torch.cuda.get_device_name(0)}; "
          f"batch {n}, channels-last, cudnn.benchmark, best of 5 x {reps} calls")
    for dtype, tdt in [("f16", torch.float16), ("bf16", torch.bfloat16)]:
        for name, c, h, o, k, stride in layers:
            pad = k // 2
            ho = (h + 2 * pad - k) // stride + 1
            x = torch.randn(n, c, h, h, device=dev).to(tdt).contiguous(memory_format=cl)
            w = torch.randn(o, c, k, k, device=dev).to(tdt).contiguous(memory_format=cl)
            g = torch.randn(n, o, ho, ho, device=dev).to(tdt).contiguous(memory_format=cl)
            flops = 2.0 * n * o * c * k * k * ho * ho
            shape = f"[{n}, {c}, {h}] {k}x{k} O{o}"
            for direction, fn in [
                    ("fwd", lambda: torch.nn.functional.conv2d(x, w, stride=stride, padding=pad)),
                    ("dgrad", lambda: torch.nn.grad.conv2d_input(x.shape, w, g, stride=stride, padding=pad)),
                    ("wgrad", lambda: torch.nn.grad.conv2d_weight(x, w.shape, g, stride=stride, padding=pad))]:
                value = flops / (ms_per_call(fn, reps) * 1e-3) / 1e12
                row = {"name": f"r50 {name} {direction}", "dtype": dtype, "shape": shape, "value": value,
                       "unit": "TFLOP/s"}
                out.append(row)
                print(f"{row['name']:<28} {dtype:<5} {shape:<28} {value:8.1f} TFLOP/s", flush=True)
                if args.json:  # rows so far survive check.sh's time limit
                    with open(args.json, "w") as f:
                        f.writelines(json.dumps(r) + "\n" for r in out)
            del x, w, g
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json", default="")
    parser.add_argument("--resnet50-conv", action="store_true")
    args = parser.parse_args()
    if args.resnet50_conv:
        resnet50_convs(args)  # writes --json itself, row by row
        return
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
    # argsort (stable, as mixgrad's) in elements sorted per second: bench_cuda's rows of a
    # vocabulary and one long row.
    sort_rows, flat_log2 = (8, 16) if args.quick else (256, 24)
    srt = a[: sort_rows * 32768].to(torch.bfloat16).view(sort_rows, 32768)
    for dtype, t, shp in [("bf16", srt, f"[{sort_rows}, 32768]"), ("f32", a[: 1 << flat_log2], f"2^{flat_log2}")]:
        ms = ms_per_call(lambda: torch.argsort(t, dim=-1, stable=True), 1 if args.quick else 3)
        value = t.numel() / (ms * 1e-3) / 1e9
        out.append({"name": "argsort", "dtype": dtype, "shape": shp, "value": value, "unit": "Gelem/s"})
        print(f"{'argsort':<22} {dtype:<6} {shp:<18} {value:10.1f} Gelem/s")
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
