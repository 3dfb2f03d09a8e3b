#!/usr/bin/env python3
"""bench_amp side by side with PyTorch: the same models, batches and training steps in PyTorch,
run alternately with bench_amp in one run, process by process, so the machine's noise hits both.

Pairs (ours vs PyTorch's) on the CPU:
  O0         vs fp32
  O1 bf16    vs torch.autocast(device, torch.bfloat16)
  O3 bf16    vs model.to(torch.bfloat16) (pure bf16: weights, activations, optimizer state)
and on a GPU (--device cuda; issue 15), every level with f16 and bf16:
  O0 f32 vs fp32, O0 tf32 vs tf32, O1/O2 <d> vs autocast-<d> (+ GradScaler for f16), O3 <d> vs <d>
  (the model cast to <d>, as Apex's O3), PyTorch in its best configuration (cudnn.benchmark, fused
  SGD/AdamW, channels-last ResNets); steps timed between CUDA events, the loss read once after;
  torch.cuda.max_memory_allocated; synchronisations counted by torch.cuda.set_sync_debug_mode.
  The driver writes ours.jsonl and torch.jsonl into --out and has bench_amp --compare pair them
  (ratios, speed-ups over our O0 f32, the targets) into pairs.jsonl, pairs.md and compare.txt.

The models are benchmarks/amp/workload.h's, defined again here layer for layer: the MLP
784-1024-1024-10 (batch 256, SGD lr 0.01 momentum 0.9), the CIFAR-style ResNet-20 with option-A
(zero-padded) shortcuts on 1x28x28 (batch 128, SGD lr 0.05 momentum 0.9 weight decay 5e-4),
BERT-mini MLM (4 post-LN layers of width 256, 4 heads, FFN 1024, GELU, vocab 8192, dropout 0.1,
the decoder tied to the word embeddings; sequence 128, batch 32, logits at every position, AdamW
lr 1e-4 weight decay 0.01); on a GPU also ResNet-50 (3x224x224, batch 256) and BERT-base (vocab
30522, batch 64); --batch overrides. On the CPU a step is zero_grad, forward, loss, (scaled)
backward, (unscale,) optimizer step, then loss.item(); each of N steps is timed alone after a
warm-up, wall (perf_counter) and process CPU time (process_time), and the median is reported. Peak memory: the worker process's peak RSS
(VmHWM; one fresh process per measurement, its counter restarted after the imports, where bench_amp
restarts its own: both count their framework's resident libraries, PyTorch's ~0.5 GiB included) and
on a GPU torch.cuda.max_memory_allocated.

For each configuration the environment variants that matter are tried on both sides in turn —
OMP_WAIT_POLICY unset (libgomp's default: idle workers spin a while before sleeping) and PASSIVE
(they sleep at once) — and each side's best median is kept (each variant's number is recorded too).
PyTorch runs with torch.set_num_threads(threads), bench_amp with the same --threads.

  python3 benchmarks/torch_amp_peer.py --bench-amp build/benchmarks/bench_amp --threads 1 \\
      --models mlp,resnet20,bert-mini --steps 10 --rounds 2 [--json out.jsonl] [--markdown FILE]
  python3 benchmarks/torch_amp_peer.py --device cuda --bench-amp build/benchmarks/bench_amp \\
      --models resnet50,bert-base --rounds 2 --out amp-peer [--group model] [--markdown FILE]

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
            # BERT has no dropout after the feed-forward's GELU (Hugging Face's BertIntermediate;
            # mixgrad's BertModel sets it to 0): PyTorch's layer has one, so it goes.
            for layer in self.encoder:
                layer.dropout = nn.Identity()
            self.transform = nn.Linear(hidden, hidden)
            self.transform_norm = nn.LayerNorm(hidden, eps=eps)
            self.decoder_bias = nn.Parameter(torch.zeros(vocab))
            # mixgrad's bert_init: N(0, 0.02) for every Linear, Embedding and attention
            # projection (in_proj_weight is not a Linear), zero biases.
            for m in self.modules():
                if isinstance(m, (nn.Linear, nn.Embedding)):
                    nn.init.normal_(m.weight, std=0.02)
                    if isinstance(m, nn.Linear) and m.bias is not None:
                        nn.init.zeros_(m.bias)
                elif isinstance(m, nn.MultiheadAttention):
                    nn.init.normal_(m.in_proj_weight, std=0.02)
                    nn.init.zeros_(m.in_proj_bias)

        def forward(self, ids):
            pos = torch.arange(ids.shape[1], device=ids.device)
            h = self.word(ids) + self.position(pos)[None] + self.token_type(torch.zeros_like(ids))
            h = self.dropout(self.norm(h))
            for layer in self.encoder:
                h = layer(h)
            t = self.transform_norm(F.gelu(self.transform(h)))
            return F.linear(t, self.word.weight, self.decoder_bias)  # [B, L, V], tied decoder

    return ResNet, BertMLM


def make_workload(torch, name, device, smoke, batch_override=0):
    """The model, optimizer and fixed batch of bench_amp's workload.h (same sizes, same smoke sizes);
    batch_override > 0 replaces the batch (bench_amp's --batch)."""
    ResNet, BertMLM = build_models(torch)
    nn = torch.nn
    torch.manual_seed(0)
    s = smoke
    if name == "mlp":
        h, batch = (128, 32) if s else (1024, 256)
        batch = batch_override or batch
        model = nn.Sequential(nn.Linear(784, h), nn.ReLU(), nn.Linear(h, h), nn.ReLU(), nn.Linear(h, 10))
        x, y = torch.randn(batch, 784), torch.randint(0, 10, (batch,))
        opt = lambda p, **kw: torch.optim.SGD(p, lr=0.01, momentum=0.9, **kw)
    elif name in ("resnet20", "resnet50"):
        cifar = name == "resnet20"
        depth = (8 if s else 20) if cifar else (18 if s else 50)
        batch = batch_override or ((8 if s else 128) if cifar else (2 if s else 256))
        hw, ch, classes = (28, 1, 10) if cifar else ((64 if s else 224), 3, 1000)
        model = ResNet(cifar, depth, ch, classes)
        x, y = torch.randn(batch, ch, hw, hw), torch.randint(0, classes, (batch,))
        opt = lambda p, **kw: torch.optim.SGD(p, lr=0.05, momentum=0.9, weight_decay=5e-4, **kw)
    elif name in ("bert-mini", "bert-base"):
        if s:
            vocab, hidden, layers, heads, ffn = 1024, (64 if name == "bert-mini" else 128), 1, 2, (256 if name == "bert-mini" else 512)
            batch, seq = (4, 16) if name == "bert-mini" else (2, 16)
        elif name == "bert-mini":
            vocab, hidden, layers, heads, ffn, batch, seq = 8192, 256, 4, 4, 1024, 32, 128
        else:
            vocab, hidden, layers, heads, ffn, batch, seq = 30522, 768, 12, 12, 3072, 64, 128
        batch = batch_override or batch
        model = BertMLM(vocab, hidden, layers, heads, ffn)
        x, y = torch.randint(0, vocab, (batch, seq)), torch.randint(0, vocab, (batch * seq,))
        opt = lambda p, **kw: torch.optim.AdamW(p, lr=1e-4, weight_decay=0.01, **kw)
    else:
        raise SystemExit(f"torch_amp_peer: unknown model '{name}'")
    return model.to(device), opt, x.to(device), y.to(device), batch


def peak_rss_bytes():
    """This process's own peak RSS (VmHWM, as bench_amp reads it). Not ru_maxrss: Linux folds the
    parent's high-water mark from before the exec into it, so a worker started by this driver
    (which imported torch) never read below the driver's ~0.5 GiB."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def reset_peak_rss():
    """Restarts the kernel's VmHWM counter (clear_refs 5) where bench_amp restarts its own: after the
    libraries are loaded, before the workload is built. Both peaks then count the framework's
    resident libraries and the training, not the transients of importing."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def worker(args):
    import torch
    torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    reset_peak_rss()
    model, make_opt, x, y, _ = make_workload(torch, args.model, device, args.smoke, args.batch)
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
           "peak_rss_bytes": peak_rss_bytes(),
           "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY", "(unset)")}
    if cuda:
        rec["peak_device_bytes"] = torch.cuda.max_memory_allocated()
    print(json.dumps(rec))

GPU_MODES = ["fp32", "tf32", "autocast-f16", "autocast-bf16", "f16", "bf16"]


def cuda_worker(args):
    """The GPU side: each mode of --mode (comma-separated) in turn in this process, one JSON line each.

    PyTorch's best configuration for the workload, as its documentation recommends it: cudnn.benchmark,
    channels-last for the ResNets (--memory-format), the fused SGD/AdamW (which also take GradScaler's
    scale and found-inf on the device: no host sync in scaler.step), set_to_none gradients. TF32 only
    in the tf32 mode (matmul and cuDNN); fp32 is strict. Each step is timed between CUDA events with no
    host read inside; the loss is read once after the timed steps. One more step runs under
    torch.cuda.set_sync_debug_mode("warn") and its warnings are counted: the synchronisations PyTorch
    itself reports (a lower bound)."""
    import torch
    torch.set_num_threads(args.threads)
    torch.backends.cudnn.benchmark = True
    modes = [m for m in args.mode.split(",") if m]
    for mode in modes:
        if mode not in GPU_MODES:
            raise SystemExit(f"torch_amp_peer: unknown mode '{mode}'; known: {', '.join(GPU_MODES)}")
    failed = 0
    for mode in modes:
        try:  # one mode failing (e.g. out of memory) leaves the others measured
            line = json.dumps(measure_cuda_mode(torch, args, mode))
            print(line, flush=True)
            if args.append:  # the driver's file, so the rows done survive a stop of the driver
                with open(args.append, "a") as f:
                    f.write(line + "\n")
        except Exception as e:  # noqa: BLE001 - reported, and the exit code says so
            print(f"torch_amp_peer: {args.model} {mode} failed: {type(e).__name__}: {e}", file=sys.stderr, flush=True)
            failed += 1
        torch.cuda.empty_cache()
    return 1 if failed else 0


def measure_cuda_mode(torch, args, mode):
    """One GPU mode of cuda_worker in this process: its JSON record."""
    import warnings
    device = torch.device("cuda")
    tf32 = mode == "tf32"
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model, make_opt, x, y, batch = make_workload(torch, args.model, device, args.smoke, args.batch)
    convnet = x.dim() == 4
    channels_last = convnet and args.memory_format in ("auto", "channels-last")
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    low = {"autocast-f16": torch.float16, "f16": torch.float16}.get(mode, torch.bfloat16)
    if mode in ("f16", "bf16"):  # pure low precision, Apex's O3: weights, activations and optimizer state
        model = model.to(low)
        x = x.to(low) if x.is_floating_point() else x
    use_autocast = mode.startswith("autocast")
    params = list(model.parameters())
    try:
        opt, opt_name = make_opt(params, fused=True), "fused"
    except (TypeError, RuntimeError, ValueError) as e:  # an older PyTorch or a dtype the fused kernel lacks
        opt, opt_name = make_opt(params, foreach=True), f"foreach (fused refused: {e})"
    scaler = torch.amp.GradScaler("cuda") if mode == "autocast-f16" else None

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=low, enabled=use_autocast):
            out = model(x)
            loss = torch.nn.functional.cross_entropy(out.reshape(-1, out.shape[-1]).float(), y)
        if scaler is not None:
            scaler.scale(loss).backward()
            scaler.step(opt)  # fused optimizer: unscale and the inf check inside, no host read
            scaler.update()
        else:
            loss.backward()
            opt.step()
        return loss

    loss_first = step().item()
    for _ in range(max(args.warmup - 1, 0)):
        step()
    torch.cuda.synchronize()
    marks = [torch.cuda.Event(enable_timing=True) for _ in range(args.steps + 1)]
    host, cpu = [], []
    loop0 = time.perf_counter()
    marks[0].record()
    for i in range(args.steps):
        h0, c0 = time.perf_counter(), time.process_time()
        loss = step()
        marks[i + 1].record()
        host.append(time.perf_counter() - h0)
        cpu.append(time.process_time() - c0)
    marks[-1].synchronize()
    loop_wall = time.perf_counter() - loop0
    wall = [marks[i].elapsed_time(marks[i + 1]) / 1e3 for i in range(args.steps)]
    loss_final = loss.item()
    peak = torch.cuda.max_memory_allocated()
    syncs = None
    try:  # one more step, its synchronisations as PyTorch's debug mode reports them
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                step()
            finally:
                torch.cuda.set_sync_debug_mode(0)
        syncs = sum("synchroniz" in str(w.message) for w in caught)
    except Exception as e:  # noqa: BLE001 - the count is optional; the timing stands
        print(f"torch_amp_peer: sync count failed: {e}", file=sys.stderr)
    rec = {"framework": "pytorch", "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
           "device_name": torch.cuda.get_device_name(0), "model": args.model, "mode": mode, "batch": batch,
           "unit": "img" if convnet or args.model == "mlp" else "seq", "timing": "cuda events",
           "memory_format": ("channels-last" if channels_last else "contiguous") if convnet else "-",
           "optimizer": f"{type(opt).__name__} {opt_name}", "grad_scaler": scaler is not None,
           "threads": torch.get_num_threads(), "wall_s": wall, "host_s": host, "cpu_s": cpu,
           "loop_wall_s": loop_wall, "wall_median_s": statistics.median(wall), "wall_min_s": min(wall),
           "wall_max_s": max(wall), "cpu_median_s": statistics.median(cpu),
           "samples_per_s": batch / statistics.median(wall), "peak_device_bytes": peak,
           "syncs_per_step": syncs, "loss_first": loss_first, "loss_final": loss_final,
           "loss_step": max(args.warmup, 1) + args.steps,
           "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "command": shlex.join([os.path.basename(sys.executable)] + sys.argv)}
    return rec


# ---- the driver ----

PAIRS_CPU = [("O0", "f32", "fp32"), ("O1", "bf16", "autocast-bf16"), ("O3", "bf16", "bf16")]
# (level, dtype, PyTorch mode) on a GPU: benchmarks/amp/peer_compare.h's pairing ("tf32": O0 with TF32).
PAIRS_GPU = [("O0", "f32", "fp32"), ("O0", "tf32", "tf32"),
             ("O1", "f16", "autocast-f16"), ("O2", "f16", "autocast-f16"), ("O3", "f16", "f16"),
             ("O1", "bf16", "autocast-bf16"), ("O2", "bf16", "autocast-bf16"), ("O3", "bf16", "bf16")]


def json_lines(text):
    """The JSON objects among a process's output lines (anything else is log)."""
    out = []
    for line in (text or "").splitlines():
        line = line.strip()
        if line.startswith("{"):
            try:
                out.append(json.loads(line))
            except ValueError:
                pass
    return out


def run_logged(cmd, timeout, what):
    """Runs cmd; returns (stdout, ok). A failure or a timeout is printed and keeps the partial output."""
    print(f"  $ {shlex.join(cmd)}", flush=True)
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        print(f"torch_amp_peer: {what} timed out after {timeout}s; what it finished is kept", flush=True)
        return out, False
    if proc.returncode != 0:
        print(f"torch_amp_peer: {what} failed (exit {proc.returncode}); what it finished is kept\n"
              f"{proc.stdout[-3000:]}{proc.stderr[-3000:]}", flush=True)
    return proc.stdout, proc.returncode == 0


def nvidia_smi():
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=30).stdout.strip().splitlines()
        return f"{out[0]} (name, driver)" if out else "nvidia-smi printed nothing"
    except (OSError, subprocess.SubprocessError) as e:
        return f"nvidia-smi failed: {e}"


def gpu_driver(args, torch, models):
    """bench_amp and PyTorch alternately on the GPU, process by process; bench_amp --compare reports."""
    os.makedirs(args.out, exist_ok=True)
    ours_path, torch_path = os.path.join(args.out, "ours.jsonl"), os.path.join(args.out, "torch.jsonl")
    for path in (ours_path, torch_path):
        open(path, "w").close()
    common = ["--warmup", str(args.warmup), "--steps", str(args.steps), "--threads", str(args.threads),
              "--batch", str(args.batch), "--memory-format", args.memory_format]
    failed = []  # processes that exited non-zero: their configurations have no row, so say so

    def ours(model, levels, dtypes, o0):
        tmp = os.path.join(args.out, "ours.tmp.jsonl")
        if os.path.exists(tmp):
            os.unlink(tmp)
        cmd = [args.bench_amp, "--device", "cuda", "--models", model, "--levels", levels, "--dtypes", dtypes,
               "--o0", o0, "--json", tmp] + common + (["--quick"] if args.smoke else [])
        out, ok = run_logged(cmd, args.process_timeout, f"bench_amp {model} {levels}")
        if not ok:
            failed.append(f"bench_amp {model} levels {levels} dtypes {dtypes}")
        print(out[-4000:], flush=True)
        if os.path.exists(tmp):  # bench_amp rewrites it after every configuration
            with open(tmp) as f, open(ours_path, "a") as o:
                o.write(f.read())
            os.unlink(tmp)

    def theirs(model, modes):
        # The worker appends each row to torch.jsonl itself: a stopped worker or driver keeps its rows.
        cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--device", "cuda", "--model", model,
               "--mode", ",".join(modes), "--append", torch_path] + common + (["--smoke"] if args.smoke else [])
        out, ok = run_logged(cmd, args.process_timeout, f"PyTorch {model} {','.join(modes)}")
        if not ok:
            failed.append(f"PyTorch {model} modes {','.join(modes)}")
        for r in json_lines(out):
            print(f"  PyTorch {model:<10} {r['mode']:<14} {1e3 * r['wall_median_s']:9.2f} ms  "
                  f"peak {r['peak_device_bytes'] / 2**20:.0f} MiB  syncs {r['syncs_per_step']}", flush=True)

    for model in models:
        for _ in range(args.rounds):
            if args.group == "model":  # one process per framework per model: cheaper, less alternation
                ours(model, "O0,O1,O2,O3", "f16,bf16", "f32,tf32")
                theirs(model, GPU_MODES)
                continue
            measured = set()
            for level, dtype, mode in PAIRS_GPU:
                ours(model, level, "f16" if dtype == "tf32" else ("bf16" if dtype == "f32" else dtype),
                     dtype if level == "O0" else "f32")
                if mode not in measured:
                    theirs(model, [mode])
                    measured.add(mode)

    note = (f"driver: `{shlex.join([os.path.basename(sys.executable)] + sys.argv)}`; nvidia-smi: {nvidia_smi()}; "
            f"torch {torch.__version__}, cuDNN {torch.backends.cudnn.version()}; {args.warmup} warm-up + {args.steps} "
            f"timed steps, {args.rounds} round(s), one process per {args.group}, mixgrad and PyTorch alternately; "
            f"PyTorch: cudnn.benchmark, fused SGD/AdamW, channels-last ResNets ({args.memory_format}), its default "
            f"reduced-precision GEMM reductions; bench_amp: --cudnn-benchmark on (default)")
    if failed:  # a configuration of ours that failed has no row in the comparison: name it there
        note += "; FAILED (no row, or a partial one): " + "; ".join(failed)
    if args.note:
        note += f"; {args.note}"
    cmd = [args.bench_amp, "--compare", ours_path, "--peer", torch_path, "--json", os.path.join(args.out, "pairs.jsonl"),
           "--markdown", os.path.join(args.out, "pairs.md"), "--note", note]
    out, ok = run_logged(cmd, 120, "bench_amp --compare")
    print(out, flush=True)
    with open(os.path.join(args.out, "compare.txt"), "w") as f:
        f.write(out)
    if ok and args.markdown:
        with open(os.path.join(args.out, "pairs.md")) as f, open(args.markdown, "a") as m:
            m.write(f.read())
    for what in failed:
        print(f"torch_amp_peer: FAILED: {what}", flush=True)
    return 0 if ok and not failed else 1


def run_bounded(cmd, env, timeout, what):
    """Runs one measured process, stopped after `timeout` seconds (a hung one stopped the driver)."""
    try:
        return subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise SystemExit(f"torch_amp_peer: {what} ran longer than --process-timeout {timeout} s: {' '.join(cmd)}")


def run_ours(args, model, level, dtype, wait_policy):
    with tempfile.NamedTemporaryFile(suffix=".jsonl", delete=False) as f:
        path = f.name
    cmd = [args.bench_amp, "--models", model, "--levels", level, "--dtypes", "bf16" if dtype == "f32" else dtype,
           "--threads", str(args.threads), "--warmup", str(args.warmup), "--steps", str(args.steps),
           "--device", args.device, "--json", path] + (["--quick"] if args.smoke else []) + \
          (["--batch", str(args.batch)] if args.batch else [])
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if wait_policy:
        env["OMP_WAIT_POLICY"] = wait_policy
    t0 = time.time()
    proc = run_bounded(cmd, env, args.process_timeout, "bench_amp")
    if proc.returncode != 0:
        raise SystemExit(f"torch_amp_peer: bench_amp failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    with open(path) as f:
        rec = json.loads(f.readline())
    os.unlink(path)
    rec["process_s"] = time.time() - t0
    rec["omp_wait_policy"] = wait_policy or "(unset)"
    return rec


def run_torch(args, model, mode, wait_policy):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker", "--model", model, "--mode", mode,
           "--threads", str(args.threads), "--warmup", str(args.warmup), "--steps", str(args.steps),
           "--device", args.device, "--batch", str(args.batch)] + (["--smoke"] if args.smoke else [])
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if wait_policy:
        env["OMP_WAIT_POLICY"] = wait_policy
    env["OMP_NUM_THREADS"] = str(args.threads)
    proc = run_bounded(cmd, env, args.process_timeout, "the PyTorch worker")
    if proc.returncode != 0:
        raise SystemExit(f"torch_amp_peer: the PyTorch worker failed ({proc.returncode}):\n{proc.stdout}{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


# Issue 16's CPU targets: our step time <= 1.0x PyTorch's for every pair (<= 0.8x for the MLP and
# BERT-mini pairs), and our peak memory <= PyTorch's.
CPU_TIME_TARGET = {"mlp": 0.8, "bert-mini": 0.8}


def cpu_targets_missed(row):
    """The CPU targets a result row misses, one line each (empty: all met)."""
    missed = []
    limit = CPU_TIME_TARGET.get(row["model"], 1.0)
    if row["wall_ratio"] > limit:
        missed.append(f"{row['model']} {row['ours']} vs {row['pytorch']}: step time {row['wall_ratio']:.2f}x "
                      f"PyTorch's (target <= {limit})")
    if row["ours_peak_bytes"] > row["torch_peak_bytes"]:
        missed.append(f"{row['model']} {row['ours']} vs {row['pytorch']}: peak RSS "
                      f"{row['ours_peak_bytes'] / 2**20:.0f} MiB > PyTorch's {row['torch_peak_bytes'] / 2**20:.0f} MiB")
    return missed


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
    p.add_argument("--append", default="", help=argparse.SUPPRESS)  # --worker on cuda: also append rows here
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
    p.add_argument("--batch", type=int, default=0, help="samples per step (0: each model's own)")
    p.add_argument("--memory-format", default="auto", choices=["auto", "contiguous", "channels-last"],
                   help="GPU: the ResNets' layout on both sides (auto: channels-last)")
    p.add_argument("--group", default="config", choices=["config", "model"],
                   help="GPU: one process per configuration (default) or per model and framework (cheaper)")
    p.add_argument("--process-timeout", type=int, default=900, help="seconds per measured process before it is stopped")
    p.add_argument("--out", default="amp-peer", help="GPU: folder for ours.jsonl, torch.jsonl, pairs.jsonl, pairs.md")
    args = p.parse_args()
    if args.threads < 1 or args.steps < 1 or args.warmup < 1 or args.rounds < 1 or args.batch < 0:
        p.error("--threads, --steps, --warmup and --rounds must be at least 1 (bench_amp warms up at least once), "
                "--batch at least 0")
    if args.worker:
        return cuda_worker(args) if args.device == "cuda" else worker(args)
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
    if gpu:
        return gpu_driver(args, torch, models)
    pairs = PAIRS_CPU
    variants = ["", "PASSIVE"]  # OMP_WAIT_POLICY unset (libgomp's default) and PASSIVE
    print(f"torch_amp_peer: {processor()}, {os.cpu_count()} logical CPUs; torch {torch.__version__}; "
          f"{args.threads} thread(s) on both sides (OMP_NUM_THREADS and torch.set_num_threads for PyTorch, "
          f"--threads for bench_amp; each side's best OMP_WAIT_POLICY kept); {args.warmup} warm-up + "
          f"{args.steps} timed steps; {args.rounds} round(s) alternating process by process; "
          f"load average {os.getloadavg()}")
    rows = []
    for model in models:
        for level, dtype, mode in pairs:
            ours, theirs = [], {v: [] for v in variants}
            for _ in range(args.rounds):  # ours, PyTorch, in turn, every variant on both sides
                for v in variants:
                    ours.append(run_ours(args, model, level, dtype, v))
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
                   "ours_best_env": f"OMP_WAIT_POLICY={best_ours['omp_wait_policy']}",
                   "torch_variants_wall_s": {(v or "(unset)"): r["wall_median_s"] for v, r in best_v.items()},
                   "ours_variants_wall_s": {v: min(r["wall_median_s"] for r in ours if r["omp_wait_policy"] == v)
                                            for v in sorted({r["omp_wait_policy"] for r in ours})},
                   "threads": args.threads, "torch": torch.__version__, "commit": best_ours.get("commit", "?"),
                   "machine": best_ours.get("machine", {})}
            row["targets_missed"] = cpu_targets_missed(row) if not gpu else []
            rows.append(row)
            print(f"  {model:<10} {row['ours']:<8} vs {mode:<14} ours {1e3 * row['ours_wall_s']:9.2f} ms  "
                  f"PyTorch {1e3 * row['torch_wall_s']:9.2f} ms  ratio {row['wall_ratio']:.2f}  "
                  f"(ours {row['ours_best_env']}, PyTorch {row['torch_best_env']})",
                  flush=True)
    mem = "peak RSS MiB" if not gpu else "device peak MiB"
    header = ["model", "ours", "PyTorch", "ours ms", "PyTorch ms", "wall ours/PT", "CPU ours/PT",
              f"ours {mem}", f"PT {mem}", "ours loss", "PT loss", "ours best env", "PT best env", "targets"]
    table = [[r["model"], r["ours"], r["pytorch"], f"{1e3 * r['ours_wall_s']:.1f}", f"{1e3 * r['torch_wall_s']:.1f}",
              f"{r['wall_ratio']:.2f}", f"{r['cpu_ratio']:.2f}", f"{r['ours_peak_bytes'] / 2**20:.0f}",
              f"{r['torch_peak_bytes'] / 2**20:.0f}", f"{r['ours_loss']:.4f}", f"{r['torch_loss']:.4f}",
              r["ours_best_env"], r["torch_best_env"], "missed" if r["targets_missed"] else "met"] for r in rows]
    widths = [max(len(h), *(len(t[i]) for t in table)) for i, h in enumerate(header)]
    print("\n" + " | ".join(h.ljust(w) for h, w in zip(header, widths)))
    print("-+-".join("-" * w for w in widths))
    for t in table:
        print(" | ".join(c.ljust(w) for c, w in zip(t, widths)))
    missed = [m for r in rows for m in r["targets_missed"]]
    for m in missed:
        print(f"missed: {m}")
    print("ratio < 1: mixgrad is faster. Losses differ by design (different initial weights and dropout streams).")
    print("targets (issue 16): step time <= 1.0x PyTorch's (0.8x for mlp and bert-mini), peak RSS <= PyTorch's"
          + ("; smoke sizes (--smoke): not the targets' sizes" if args.smoke else ""))
    machine = rows[0]["machine"] if rows else {}
    isa = f"{machine.get('features', '?')}; oneDNN ISA {machine.get('onednn_isa', '?')}; bf16 kernels {machine.get('bf16_kernels', '?')}"
    if args.json:
        with open(args.json, "w") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
    if args.markdown:
        with open(args.markdown, "a") as f:
            sizes = " (smoke sizes, --smoke: not the targets' sizes)" if args.smoke else ""
            f.write(f"\n## bench_amp vs PyTorch{sizes}, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n\n")
            f.write(f"- machine: {processor()}, {os.cpu_count()} logical CPUs; torch {torch.__version__}; "
                    f"{args.threads} thread(s) each; commit {rows[0]['commit'] if rows else '?'}\n")
            f.write(f"- ISA: {isa}\n")
            f.write(f"- command: `{shlex.join([os.path.basename(sys.executable)] + sys.argv)}`\n")
            if args.note:
                f.write(f"- note: {args.note}\n")
            f.write("\n| " + " | ".join(header) + " |\n|" + "|".join(" --- " for _ in header) + "|\n")
            for t in table:
                f.write("| " + " | ".join(t) + " |\n")
            if missed:
                f.write("\n" + "".join(f"- missed: {m}\n" for m in missed))


if __name__ == "__main__":
    sys.exit(main())
