#!/usr/bin/env python3
"""bench_amp side by side with PyTorch: the same models, batches and training steps in PyTorch,
run alternately with bench_amp in one run, process by process, so the machine's noise hits both.

Pairs (ours vs PyTorch's):
  O0         vs fp32
  O1 bf16    vs torch.autocast(device, torch.bfloat16)
  O3 bf16    vs model.to(torch.bfloat16) (pure bf16: weights, activations, optimizer state)
  on a GPU also O1 f16 and O2 f16 vs torch.autocast(device, torch.float16) + GradScaler

The models are benchmarks/amp/workload.h's, defined again here layer for layer: the MLP
784-1024-1024-10 (batch 256, SGD lr 0.01 momentum 0.9), the CIFAR-style ResNet-20 with option-A
(zero-padded) shortcuts on 1x28x28 (batch 128, SGD lr 0.05 momentum 0.9 weight decay 5e-4),
BERT-mini MLM (4 post-LN layers of width 256, 4 heads, FFN 1024, GELU, vocab 8192, dropout 0.1,
the decoder tied to the word embeddings; sequence 128, batch 32, logits at every position, AdamW
lr 1e-4 weight decay 0.01); on a GPU also ResNet-50 (3x224x224, batch 64) and BERT-base (vocab
30522). A step is zero_grad, forward, loss, (scaled) backward, (unscale,) optimizer step, then
loss.item(); each of N steps is timed alone after a warm-up, wall (perf_counter) and process CPU
time (process_time), and the median is reported. Peak memory: the worker process's peak RSS
(ru_maxrss; one fresh process per measurement) and on a GPU torch.cuda.max_memory_allocated.

For each PyTorch configuration the environment variants that matter are tried — OMP_WAIT_POLICY
unset and PASSIVE, torch.set_num_threads(threads) — and PyTorch's best median is kept (each
variant's number is printed too). bench_amp runs with the same thread count (its --threads).

  python3 benchmarks/torch_amp_peer.py --bench-amp build/benchmarks/bench_amp --threads 1 \\
      --models mlp,resnet20,bert-mini --steps 10 --rounds 2 [--json out.jsonl] [--markdown FILE]

PyTorch (pip's current release) is optional: nothing in the build or the tests needs it.
The --worker mode is the PyTorch side of one measurement (used by the script itself).
"""
import argparse
import json
import math
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time

# ---- the PyTorch side (imported lazily: the driver runs without torch to report a clear error) ----


def build_models(torch):
    nn = torch.nn
    F = torch.nn.functional

    class PadShortcut(nn.Module):
        """Option A: every other pixel, zero channels added on both sides (as mixgrad's ResNet)."""

        def __init__(self, out, stride):
            super().__init__()
            self.out, self.stride = out, stride

        def forward(self, x):
            if self.stride != 1:
                x = x[:, :, :: self.stride, :: self.stride]
            extra = self.out - x.shape[1]
            if extra == 0:
                return x
            before = extra // 2
            return F.pad(x, (0, 0, 0, 0, before, extra - before))

    def conv(i, o, k, s):
        return nn.Conv2d(i, o, k, stride=s, padding=k // 2, bias=False)

    class BasicBlock(nn.Module):
        def __init__(self, i, o, s, projection):
            super().__init__()
            self.conv1, self.bn1 = conv(i, o, 3, s), nn.BatchNorm2d(o)
            self.conv2, self.bn2 = conv(o, o, 3, 1), nn.BatchNorm2d(o)
            if projection and (s != 1 or i != o):
                self.shortcut = nn.Sequential(conv(i, o, 1, s), nn.BatchNorm2d(o))
            else:
                self.shortcut = PadShortcut(o, s)

        def forward(self, x):
            h = F.relu(self.bn1(self.conv1(x)))
            h = self.bn2(self.conv2(h))
            return F.relu(h + self.shortcut(x))

    class Bottleneck(nn.Module):
        def __init__(self, i, w, s):
            super().__init__()
            o = 4 * w
            self.conv1, self.bn1 = conv(i, w, 1, 1), nn.BatchNorm2d(w)
            self.conv2, self.bn2 = conv(w, w, 3, s), nn.BatchNorm2d(w)
            self.conv3, self.bn3 = conv(w, o, 1, 1), nn.BatchNorm2d(o)
            self.down = nn.Sequential(conv(i, o, 1, s), nn.BatchNorm2d(o)) if (s != 1 or i != o) else None

        def forward(self, x):
            h = F.relu(self.bn1(self.conv1(x)))
            h = F.relu(self.bn2(self.conv2(h)))
            h = self.bn3(self.conv3(h))
            return F.relu(h + (self.down(x) if self.down is not None else x))

    class ResNet(nn.Module):
        def __init__(self, cifar, depth, channels, classes):
            super().__init__()
            if cifar:
                n = (depth - 2) // 6
                blocks, widths, bottleneck = [n, n, n], [16, 32, 64], False
                self.stem = conv(channels, 16, 3, 1)
            else:
                blocks = {18: [2, 2, 2, 2], 50: [3, 4, 6, 3]}[depth]
                widths, bottleneck = [64, 128, 256, 512], depth >= 50
                self.stem = conv(channels, 64, 7, 2)
            self.bn1 = nn.BatchNorm2d(widths[0])
            self.pool = nn.Identity() if cifar else nn.MaxPool2d(3, 2, 1)
            layers, c = [], widths[0]
            for s, (nb, w) in enumerate(zip(blocks, widths)):
                for b in range(nb):
                    stride = 2 if (s > 0 and b == 0) else 1
                    if bottleneck:
                        layers.append(Bottleneck(c, w, stride))
                        c = 4 * w
                    else:
                        layers.append(BasicBlock(c, w, stride, projection=not cifar))
                        c = w
            self.layers = nn.Sequential(*layers)
            self.fc = nn.Linear(c, classes)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

        def forward(self, x):
            h = self.pool(F.relu(self.bn1(self.stem(x))))
            h = self.layers(h)
            return self.fc(torch.flatten(F.adaptive_avg_pool2d(h, 1), 1))

    class BertMLM(nn.Module):
        def __init__(self, vocab, hidden, layers, heads, ffn, dropout=0.1, max_position=512, eps=1e-12):
            super().__init__()
            self.word = nn.Embedding(vocab, hidden)
            self.position = nn.Embedding(max_position, hidden)
            self.token_type = nn.Embedding(2, hidden)
            self.norm = nn.LayerNorm(hidden, eps=eps)
            self.dropout = nn.Dropout(dropout)
            self.encoder = nn.ModuleList(
                nn.TransformerEncoderLayer(hidden, heads, ffn, dropout, activation="gelu", layer_norm_eps=eps,
                                           batch_first=True, norm_first=False)
                for _ in range(layers))
            self.transform = nn.Linear(hidden, hidden)
            self.transform_norm = nn.LayerNorm(hidden, eps=eps)
            self.decoder_bias = nn.Parameter(torch.zeros(vocab))
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, std=0.02)
                    if isinstance(m, nn.Linear) and m.bias is not None:
                        nn.init.zeros_(m.bias)

        def forward(self, ids):
            pos = torch.arange(ids.shape[1], device=ids.device)
            h = self.word(ids) + self.position(pos)[None] + self.token_type(torch.zeros_like(ids))
            h = self.dropout(self.norm(h))
            for layer in self.encoder:
                h = layer(h)
            t = self.transform_norm(F.gelu(self.transform(h)))
            return F.linear(t, self.word.weight, self.decoder_bias)  # [B, L, V], tied decoder

    return ResNet, BertMLM


def make_workload(torch, name, device, smoke):
    """The model, optimizer and fixed batch of bench_amp's workload.h (same sizes, same smoke sizes)."""
    ResNet, BertMLM = build_models(torch)
    nn = torch.nn
    torch.manual_seed(0)
    s = smoke
    if name == "mlp":
        h, batch = (128, 32) if s else (1024, 256)
        model = nn.Sequential(nn.Linear(784, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 10))
        x, y = torch.randn(batch, 784), torch.randint(0, 10, (batch,))
        opt = lambda p: torch.optim.SGD(p, lr=0.01, momentum=0.9)
    elif name in ("resnet20", "resnet50"):
        cifar = name == "resnet20"
        depth = (8 if s else 20) if cifar else (18 if s else 50)
        batch = (8 if s else 128) if cifar else (2 if s else 64)
        hw, ch, classes = (28, 1, 10) if cifar else ((64 if s else 224), 3, 1000)
        model = ResNet(cifar, depth, ch, classes)
        x, y = torch.randn(batch, ch, hw, hw), torch.randint(0, classes, (batch,))
        opt = lambda p: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=5e-4)
    elif name in ("bert-mini", "bert-base"):
        if s:
            vocab, hidden, layers, heads, ffn = 1024, (64 if name == "bert-mini" else 128), 1, 2, (256 if name == "bert-mini" else 512)
            batch, seq = (4, 16) if name == "bert-mini" else (2, 16)
        elif name == "bert-mini":
            vocab, hidden, layers, heads, ffn, batch, seq = 8192, 256, 4, 4, 1024, 32, 128
        else:
            vocab, hidden, layers, heads, ffn, batch, seq = 30522, 768, 12, 12, 3072, 32, 128
        model = BertMLM(vocab, hidden, layers, heads, ffn)
        x, y = torch.randint(0, vocab, (batch, seq)), torch.randint(0, vocab, (batch * seq,))
        opt = lambda p: torch.optim.AdamW(p, lr=1e-4, weight_decay=0.01)
    else:
        raise SystemExit(f"torch_amp_peer: unknown model '{name}'")
    return model.to(device), opt, x.to(device), y.to(device)


def worker(args):
    import torch
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    model, make_opt, x, y = make_workload(torch, args.model, device, args.smoke)
    mode = args.mode
    if mode == "bf16":  # pure bf16: the O3 peer
        model = model.to(torch.bfloat16)
        if x.is_floating_point():
            x = x.to(torch.bfloat16)
    opt = make_opt(model.parameters())
    use_autocast = mode.startswith("autocast")
    low = torch.float16 if mode.endswith("f16") and not mode.endswith("bf16") else torch.bfloat16
    scaler = torch.amp.GradScaler(args.device) if mode == "autocast-f16" else None
    cuda = device.type == "cuda"

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast(device.type, dtype=low, enabled=use_autocast):
            out = model(x)
            loss = torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.unscale_(opt)
            scaler.step(opt)
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss.item()

    if cuda:
        torch.cuda.reset_peak_memory_stats()
    for _ in range(args.warmup):
        step()
    wall, cpu, loss = [], [], float("nan")
    for _ in range(args.steps):
        w0, c0 = time.perf_counter(), time.process_time()
        loss = step()
        wall.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
    rec = {"framework": "pytorch", "torch": torch.__version__, "model": args.model, "mode": mode,
           "threads": torch.get_num_threads(), "wall_s": wall, "cpu_s": cpu,
           "wall_median_s": statistics.median(wall), "cpu_median_s": statistics.median(cpu),
           "loss_final": loss, "loss_step": args.warmup + args.steps,
           "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
           "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(unset)")}
    if cuda:
        rec["peak_device_bytes"] = torch.cuda.max_memory_allocated()
    print(json.dumps(rec))


# ---- the driver ----

PAIRS_CPU = [("O0", "f32", "fp32"), ("O1", "bf16", "autocast-bf16"), ("O3", "bf16", "bf16")]
PAIRS_GPU = PAIRS_CPU + [("O1", "f16", "autocast-f16"), ("O2", "f16", "autocast-f16")]


def run_ours(args, model, level, dtype):
    with tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False) as f:
        path = f.name
    cmd = [args.bench_amp, "--models", model, "--levels", level, "--dtypes", "bf16" if dtype == "f32" else dtype,
           "--threads", str(args.threads), "--warmup", str(args.warmup), "--steps", str(args.steps),
           "--device", args.device, "--json", path] + (["--quick"] if args.smoke else [])
    env = dict(os.environ, OMP_WAIT_POLICY="PASSIVE")
    t0 = time.time()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"torch_amp_peer: bench_amp failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    with open(path) as f:
        rec = json.loads(f.readline())
    os.unlink(path)
    rec["process_s"] = time.time() - t0
    return rec


def run_torch(args, model, mode, wait_policy):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--model", model, "--mode", mode,
           "--threads", str(args.threads), "--warmup", str(args.warmup), "--steps", str(args.steps),
           "--device", args.device] + (["--smoke"] if args.smoke else [])
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if wait_policy:
        env["OMP_WAIT_POLICY"] = wait_policy
    env["OMP_NUM_THREADS"] = str(args.threads)
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"torch_amp_peer: the PyTorch worker failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def processor():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--model", default="mlp", help=argparse.SUPPRESS)
    p.add_argument("--mode", default="fp32", help=argparse.SUPPRESS)
    p.add_argument("--bench-amp", default="build/benchmarks/bench_amp", help="the bench_amp program")
    p.add_argument("--models", default="", help="comma-separated (default: mlp,resnet20,bert-mini; on cuda also resnet50,bert-base)")
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--rounds", type=int, default=2, help="alternations of ours and PyTorch's per pair")
    p.add_argument("--smoke", action="store_true", help="the smoke sizes of bench_amp --quick")
    p.add_argument("--json", default="", help="write one JSON object per pair per line")
    p.add_argument("--markdown", default="", help="append the result table in Markdown to this file")
    p.add_argument("--note", default="", help="a line for the Markdown record")
    args = p.parse_args()
    if args.threads < 1 or args.steps < 1 or args.warmup < 0 or args.rounds < 1:
        p.error("--threads, --steps and --rounds must be at least 1, --warmup at least 0")
    if args.worker:
        return worker(args)
    try:
        import torch
    except ImportError:
        raise SystemExit("torch_amp_peer: PyTorch is not installed (pip install torch); bench_amp alone needs no Python")
    if not os.access(args.bench_amp, os.X_OK):
        raise SystemExit(f"torch_amp_peer: {args.bench_amp} is not an executable; build it (scripts/build) or pass --bench-amp")
    gpu = args.device == "cuda"
    if gpu and not torch.cuda.is_available():
        raise SystemExit("torch_amp_peer: --device cuda but torch.cuda.is_available() is false")
    models = [m for m in args.models.split(",") if m] or (
        ["mlp", "resnet20", "bert-mini"] + (["resnet50", "bert-base"] if gpu else []))
    pairs = PAIRS_GPU if gpu else PAIRS_CPU
    variants = ["", "PASSIVE"]  # OMP_WAIT_POLICY unset (libgomp's default) and PASSIVE
    print(f"torch_amp_peer: {processor()}, {os.cpu_count()} logical CPUs; torch {torch.__version__}; "
          f"{args.threads} thread(s) on both sides (OMP_NUM_THREADS and torch.set_num_threads for PyTorch, "
          f"--threads for bench_amp, which runs with OMP_WAIT_POLICY=PASSIVE); {args.warmup} warm-up + "
          f"{args.steps} timed steps; {args.rounds} round(s) alternating process by process; "
          f"load average {os.getloadavg()}")
    rows = []
    for model in models:
        for level, dtype, mode in pairs:
            ours, theirs = [], {v: [] for v in variants}
            for _ in range(args.rounds):  # ours, PyTorch (every variant), ours, ... in turn
                ours.append(run_ours(args, model, level, dtype))
                for v in variants:
                    theirs[v].append(run_torch(args, model, mode, v))
            best_ours = min(ours, key=lambda r: r["wall_median_s"])
            best_v = {v: min(rs, key=lambda r: r["wall_median_s"]) for v, rs in theirs.items()}
            wp, best_t = min(best_v.items(), key=lambda kv: kv[1]["wall_median_s"])
            row = {"model": model, "ours": f"{level} {dtype}", "pytorch": mode,
                   "ours_wall_s": best_ours["wall_median_s"], "ours_cpu_s": best_ours["cpu_median_s"],
                   "torch_wall_s": best_t["wall_median_s"], "torch_cpu_s": best_t["cpu_median_s"],
                   "wall_ratio": best_ours["wall_median_s"] / best_t["wall_median_s"],
                   "cpu_ratio": best_ours["cpu_median_s"] / best_t["cpu_median_s"],
                   "ours_peak_bytes": best_ours["peak_rss_bytes"] if not gpu else best_ours["peak_tensor_bytes"],
                   "torch_peak_bytes": best_t["peak_rss_bytes"] if not gpu else best_t["peak_device_bytes"],
                   "ours_loss": best_ours["loss_final"], "torch_loss": best_t["loss_final"],
                   "torch_best_env": f"OMP_WAIT_POLICY={wp or '(unset)'}",
                   "torch_variants_wall_s": {(v or "(unset)"): r["wall_median_s"] for v, r in best_v.items()},
                   "threads": args.threads, "torch": torch.__version__, "commit": best_ours.get("commit", "?")}
            rows.append(row)
            print(f"  {model:<10} {row['ours']:<8} vs {mode:<14} ours {1e3 * row['ours_wall_s']:9.2f} ms  "
                  f"PyTorch {1e3 * row['torch_wall_s']:9.2f} ms  ratio {row['wall_ratio']:.2f}  ({row['torch_best_env']})",
                  flush=True)
    mem = "peak RSS MiB" if not gpu else "device peak MiB"
    header = ["model", "ours", "PyTorch", "ours ms", "PyTorch ms", "wall ours/PT", "CPU ours/PT",
              f"ours {mem}", f"PT {mem}", "ours loss", "PT loss", "PT best env"]
    table = [[r["model"], r["ours"], r["pytorch"], f"{1e3 * r['ours_wall_s']:.1f}", f"{1e3 * r['torch_wall_s']:.1f}",
              f"{r['wall_ratio']:.2f}", f"{r['cpu_ratio']:.2f}", f"{r['ours_peak_bytes'] / 2**20:.0f}",
              f"{r['torch_peak_bytes'] / 2**20:.0f}", f"{r['ours_loss']:.4f}", f"{r['torch_loss']:.4f}",
              r["torch_best_env"]] for r in rows]
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(header)]
    print("\n" + " | ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("-+-".join("-" * w for w in widths))
    for t in table:
        print(" | ".join(c.ljust(w) for c, w in zip(t, widths)))
    print("ratio < 1: mixgrad is faster. Losses differ by design (different initial weights and dropout streams).")
    if args.json:
        with open(args.json, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    if args.markdown:
        with open(args.markdown, "a") as f:
            f.write(f"\n## bench_amp vs PyTorch, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n\n")
            f.write(f"- machine: {processor()}, {os.cpu_count()} logical CPUs; torch {torch.__version__}; "
                    f"{args.threads} thread(s) each; commit {rows[0]['commit'] if rows else '?'}\n")
            f.write(f"- command: `{shlex.join([os.path.basename(sys.executable)] + sys.argv)}`\n")
            if args.note:
                f.write(f"- note: {args.note}\n")
            f.write("\n| " + " | ".join(header) + " |\n|" + "|".join(" --- " for _ in header) + "|\n")
            for t in table:
                f.write("| " + " | ".join(t) + " |\n")


if __name__ == "__main__":
    main()
