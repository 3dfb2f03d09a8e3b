#!/usr/bin/env bash
# The GPU check: on a machine with an NVIDIA GPU and the repository copied over (no network
# needed), configure for the GPU (sm_90 unless MG_CUDA_ARCH says otherwise), build what the check
# needs with every core, run the CUDA tests and the GPU benchmarks, measure PyTorch on the same
# ops when python3 has torch with CUDA, and print a summary table last.
#
#   benchmarks/gpu/check.sh [OUT_DIR]      (or MG_GPU_OUT=dir; default ./gpu-check)
#
# The GPU machine has nvcc, CMake and ninja but not Debian's development packages: run
# scripts/fetch-gpu-deps here first and carry .gpu-deps with the tree (the device tool's carry).
#
# OUT_DIR gets summary.txt, check.log (everything) and gpu-check.tar.gz, which holds those and the
# rest (alone only with MG_GPU_KEEP_FILES=1): tests.xml / ops_amp_tests.xml / nccl_tests.xml / examples_tests.xml (CTest's JUnit),
# bench_cuda_graph.json (eager vs CUDA-graph step times), bench_cuda.json, bench_attention.json (fused attention vs the
# composite), bench_factory.json, bench_pinned.json, torch.json, bench_cudnn_conv.json and
# torch_conv.json (ResNet-50's conv shapes through cuDNN, mixgrad and PyTorch), train_resnet.jsonl (a short
# ResNet-20 O2 f16 run on the GPU), train_resnet50.jsonl (20 NHWC ResNet-50 steps on synthetic
# 224 x 224 images), amp/ (bench_amp's O0-O3 training steps of ResNet-50 b256 and
# BERT-base b64 beside PyTorch's: ours.jsonl, torch.jsonl, pairs.jsonl, pairs.md, compare.txt),
# amp_nchw.jsonl (ResNet-50 O1 f16 contiguous, against the channels-last row).
# Each step has a time limit, and the whole check a budget (MG_GPU_BUDGET seconds, default 540)
# that shortens or skips the steps that would pass it, so it fits one short GPU call; the steps
# run in order of value (tests first, the AMP training steps last), so a cut keeps what came first.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
OUT="${1:-${MG_GPU_OUT:-gpu-check}}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"
LOG="$OUT/check.log"
: > "$LOG"
BUILD="${MG_GPU_BUILD_DIR:-build-gpu}"
ARCH="${MG_CUDA_ARCH:-90}"
JOBS="$(nproc)"
START=$(date +%s)
declare -a SUMMARY

say() { echo "check: $*" | tee -a "$LOG"; }
BUDGET="${MG_GPU_BUDGET:-540}"  # seconds for the whole check; the summary still comes after it
# MG_GPU_SKIP: comma-separated beginnings of step names to leave out, e.g. "tests" for a second call
# on a machine still warm from the first (the kept build folder makes configure and build quick), so
# the budget reaches the benchmarks and the PyTorch peers: MG_GPU_SKIP=tests benchmarks/gpu/check.sh.
SKIP_PREFIXES="${MG_GPU_SKIP:-}"
step() {  # step NAME LIMIT_SECONDS command... : runs it, logs it, records ok/FAILED and the time
  local name="$1" limit="$2"; shift 2
  local t0=$(date +%s)
  local prefix
  for prefix in ${SKIP_PREFIXES//,/ }; do
    if [[ "$name" == "$prefix"* ]]; then
      SUMMARY+=("$(printf '%-28s %-28s %5ss' "$name" "SKIPPED (MG_GPU_SKIP)" 0)")
      say "$name: skipped (MG_GPU_SKIP=$SKIP_PREFIXES)"
      return 125
    fi
  done
  # A program of the build that is not there (its target failed to build): say so, run the rest.
  if [[ "$1" == "$BUILD"/* ]] && [ ! -x "$1" ]; then
    SUMMARY+=("$(printf '%-28s %-28s %5ss' "$name" "SKIPPED (not built)" 0)")
    say "$name: skipped, $1 was not built"
    return 126
  fi
  # The budget: a step gets at most what is left of it, and none when under 20 s are left.
  local left=$(( BUDGET - (t0 - START) ))
  if [ "$left" -lt 20 ]; then
    SUMMARY+=("$(printf '%-28s %-28s %5ss' "$name" "SKIPPED (budget spent)" 0)")
    say "$name: skipped, ${left}s of the ${BUDGET}s budget left"
    return 125
  fi
  [ "$left" -lt "$limit" ] && limit="$left"
  say "== $name (limit ${limit}s)"
  # SIGTERM at the limit, SIGKILL 10 s later for a process that ignores it.
  timeout -k 10 "$limit" "$@" >> "$LOG" 2>&1
  local rc=$?
  local dt=$(( $(date +%s) - t0 ))
  local outcome="ok"
  [ $rc -eq 0 ] || outcome="FAILED (exit $rc$([ $rc -eq 124 ] && echo ', timed out'))"
  SUMMARY+=("$(printf '%-28s %-28s %5ss' "$name" "$outcome" "$dt")")
  say "$name: $outcome in ${dt}s"
  return $rc
}

say "repository $(git rev-parse --short HEAD 2>/dev/null || echo '(no git)') on $(hostname), $(date -u +%FT%TZ)"
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv >> "$LOG" 2>&1 || say "nvidia-smi failed"
NAME_LINE="$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"

# The Debian packages scripts/fetch-gpu-deps downloaded (oneDNN, Eigen, Catch2, nlohmann_json,
# zlib, OpenCL's loader), unpacked into a private root, never into the machine's own folders.
DEPS_ARGS=()
if ls .gpu-deps/*.deb > /dev/null 2>&1; then
  DEPS_ROOT="$PWD/.gpu-deps/root"
  rm -rf "$DEPS_ROOT" && mkdir -p "$DEPS_ROOT"
  for deb in .gpu-deps/*.deb; do dpkg-deb -x "$deb" "$DEPS_ROOT" || say "cannot unpack $deb"; done
  LIBDIR="$DEPS_ROOT/usr/lib/x86_64-linux-gnu"
  # Debian installs the bare libOpenCL.so link with the -dev package only; make sure it is there.
  [ -e "$LIBDIR/libOpenCL.so" ] || ln -sf libOpenCL.so.1 "$LIBDIR/libOpenCL.so"
  # libgloo sits in usr/lib (cmake/gloo.cmake finds it next to its config file). Debian's
  # GlooTargets file names it by absolute path and fails find_package when /usr/lib lacks it, as
  # here: point it into the private root.
  sed -i "s|\"/usr/lib/libgloo|\"$DEPS_ROOT/usr/lib/libgloo|g" "$DEPS_ROOT"/usr/share/cmake/Gloo/GlooTargets-*.cmake 2>/dev/null
  export LD_LIBRARY_PATH="$LIBDIR:$DEPS_ROOT/usr/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  DEPS_ARGS=(-DCMAKE_PREFIX_PATH="$DEPS_ROOT/usr;$DEPS_ROOT/usr/lib/x86_64-linux-gnu/cmake;$DEPS_ROOT/usr/share"
             -DOpenCL_INCLUDE_DIR="$DEPS_ROOT/usr/include" -DOpenCL_LIBRARY="$LIBDIR/libOpenCL.so"
             -DZLIB_INCLUDE_DIR="$DEPS_ROOT/usr/include" -DZLIB_LIBRARY="$LIBDIR/libz.so")
  say "using the packages of .gpu-deps (unpacked into $DEPS_ROOT)"
  FMNIST="$DEPS_ROOT/usr/share/datasets/fashion-mnist"
  [ -d "$FMNIST" ] && export MG_FASHION_MNIST_DIR="$FMNIST"
  [ -f "$DEPS_ROOT/usr/lib/bible.data" ] && export MG_KJV_PATH="$DEPS_ROOT/usr/lib/bible.data"
fi

# cuDNN (required) and NCCL: cmake/cuda.cmake looks in nvcc's toolkit, $CUDNN_ROOT / $NCCL_ROOT
# and the system's folders. Where none has one, take the copy PyTorch's wheels brought
# (nvidia-cudnn-cu13, nvidia-nccl-cu13) through a folder of links: the wheels ship only
# libcudnn.so.9 / libnccl.so.2, and the linker wants the bare .so names.
case "$BUILD" in /*) BUILD_ABS="$BUILD" ;; *) BUILD_ABS="$PWD/$BUILD" ;; esac
TOOLKIT="$(dirname "$(dirname "$(readlink -f "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")")"
for lib in cudnn nccl; do
  header=$([ $lib = cudnn ] && echo cudnn_version.h || echo nccl.h)
  root_var=$([ $lib = cudnn ] && echo CUDNN_ROOT || echo NCCL_ROOT)
  found=0
  for dir in "$TOOLKIT/include" /usr/include /usr/include/x86_64-linux-gnu /usr/local/include; do
    [ -e "$dir/$header" ] && found=1
  done
  [ $found = 1 ] || [ -n "${!root_var:-}" ] && continue
  wheel="$(python3 -c "import nvidia.$lib as m; print(list(m.__path__)[0])" 2>/dev/null)"
  [ -n "$wheel" ] && [ -e "$wheel/include/$header" ] || { say "no $lib in $TOOLKIT nor in python3's wheels"; continue; }
  links="$BUILD_ABS/wheel-$lib"
  rm -rf "$links" && mkdir -p "$links/lib" && ln -s "$wheel/include" "$links/include"
  for so in "$wheel"/lib/lib*.so.*; do
    name="${so##*/}"
    ln -sf "$so" "$links/lib/$name" && ln -sf "$so" "$links/lib/${name%%.so.*}.so"
  done
  export "$root_var=$links" LD_LIBRARY_PATH="$wheel/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  say "$lib: not in $TOOLKIT; using python3's wheel in $wheel"
done

export CCACHE_BASEDIR="$PWD" CCACHE_NOHASHDIR=true
step "configure (sm_$ARCH)" 120 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMG_WITH_CUDA=ON \
  -DCMAKE_CUDA_ARCHITECTURES="$ARCH" -DMG_BUILD_EXAMPLES=ON -DMG_INSTALL=OFF "${DEPS_ARGS[@]}" \
  && grep -a "CUDA backend" "$LOG" | tail -1
# -k 0: a target that fails to build leaves the others built, and each step below runs when its
# program is there (step skips it otherwise).
step "build (-j$JOBS)" 300 cmake --build "$BUILD" -j "$JOBS" --target test_cuda test_ops test_amp test_autograd bench_cuda \
  bench_cudnn_conv bench_factory bench_pinned bench_cuda_graph bench_attention train_resnet train_bert bench_amp test_io \
  test_datasets test_examples_common test_examples_smoke -- -k 0
# The NCCL process group's tests live in tests/distributed, built when Gloo was found (the
# packages of .gpu-deps); without it the check says so and goes on.
DIST_OK=0
if grep -aq "distributed (Gloo): enabled" "$LOG"; then
  step "build distributed tests" 120 cmake --build "$BUILD" -j "$JOBS" --target test_distributed mg_dist_worker mixgrad-run \
    && DIST_OK=1
else
  say "no Gloo (scripts/fetch-gpu-deps downloads it): no distributed/NCCL tests"
fi

if [ -f "$BUILD/build.ninja" ]; then
  # The tests through CTest, one process per test case (8 at a time): a case that crashes or leaves
  # a sticky CUDA error (an illegal address) fails alone, its output in the log, and the others
  # still run and report — a first run on a GPU must not lose every result to one bad kernel.
  # Every CUDA test case (host-only and [gpu]):
  step "tests: CUDA (ctest)" 180 ctest --test-dir "$BUILD" -L '^cuda$' -j 8 --timeout 100 --output-on-failure \
    --output-junit "$OUT/tests.xml"
  # The op table's CUDA-vs-CPU comparisons (forward and gradients), autocast and AMP on CUDA,
  # checkpointing and SaveOnCpu on CUDA (every [gpu] case is selected by some step here:
  # tests/core/test_test_names.cpp checks it):
  step "tests: ops + AMP on CUDA" 150 ctest --test-dir "$BUILD" -L '^(ops|amp|autograd)$' -R 'CUDA' -j 8 --timeout 120 \
    --output-on-failure --output-junit "$OUT/ops_amp_tests.xml"
  # ProcessGroupNccl: the host-side cases and a one-rank group on cuda:0; across 2 processes when
  # the machine has 2 or more GPUs (skipped, code 77, on one).
  [ $DIST_OK -eq 1 ] && step "tests: NCCL process group" 120 ctest --test-dir "$BUILD" -L '^distributed$' \
    -R 'NCCL|Nccl|nccl|gpu2' -j 4 --timeout 110 --output-on-failure --output-junit "$OUT/nccl_tests.xml"
  # The GPU user paths: checkpoints across devices, pinned loader batches, the examples' --device
  # cuda flags, and train_resnet / train_bert on the GPU at every opt level with --resume and
  # --cuda-graph ([gpu] cases of these folders; their CPU cases ran in CI).
  step "tests: examples, io on CUDA" 150 ctest --test-dir "$BUILD" -L '^(io|datasets|examples_common|examples)$' \
    -R 'cuda|CUDA|GPU|gpu|pinned' -j 4 --timeout 140 --output-on-failure --output-junit "$OUT/examples_tests.xml"
  # The summary names two groups of test_cuda's cases: the fused multi-tensor kernels with the
  # sync-free O2 step, and the CUDA graphs (captured steps against eager ones bit for bit, the
  # refused synchronisation). Listing them needs no GPU.
  "$BUILD/tests/test_cuda" -# --list-test-names-only "[#test_cuda_multi_tensor]" > "$OUT/fused_names.txt" 2> /dev/null
  "$BUILD/tests/test_cuda" --list-test-names-only "[graph]" > "$OUT/graph_names.txt" 2> /dev/null
  # Then the time per step of ResNet-20 and BERT-mini O2 f16, eager against graphed.
  step "bench_cuda_graph" 90 "$BUILD/benchmarks/bench_cuda_graph" --json "$OUT/bench_cuda_graph.json"
  step "bench_cuda" 120 "$BUILD/benchmarks/bench_cuda" --json "$OUT/bench_cuda.json"
  # Fused attention against the composite it replaced, BERT-mini's and BERT-base's shapes.
  step "bench_attention" 60 "$BUILD/benchmarks/bench_attention" --device cuda --json "$OUT/bench_attention.json"
  # The factories on the device against the host fill + copy they replaced (its table is in the log).
  step "bench_factory" 90 "$BUILD/benchmarks/bench_factory" --threads "$JOBS" --json "$OUT/bench_factory.json"
  step "bench_pinned" 60 "$BUILD/benchmarks/bench_pinned" --json "$OUT/bench_pinned.json"
  # cuDNN convolution: fwd, dgrad, wgrad of the 23 distinct ResNet-50 conv shapes at batch 256,
  # f16 and bf16, channels-last, benchmark mode (PyTorch's figures: the peer step below).
  step "bench_cudnn_conv" 150 "$BUILD/benchmarks/bench_cudnn_conv" --json "$OUT/bench_cudnn_conv.json"
  # ImageNet-style ResNet-50 NHWC end to end on the GPU (cuDNN convs, native NHWC batch norm and
  # pooling): 20 steps of 128 synthetic 224 x 224 images at O2 f16, channels-last.
  # Each run's accuracy line is looked for in its own part of the log (LOG_AT: the lines before it),
  # so a failed run never shows the line of the run before it.
  LOG_AT=$(wc -l < "$LOG")
  step "train_resnet resnet50 NHWC" 150 "$BUILD/examples/train_resnet" --arch resnet50 --device cuda \
    --opt-level O2 --dtype f16 --channels-last --batch-size 128 --train-examples 2560 --eval-examples 512 \
    --epochs 1 --log-every 5 --metrics "$OUT/train_resnet50.jsonl"
  tail -n "+$((LOG_AT + 1))" "$LOG" | grep -a "final test accuracy" | tail -1 | tee -a "$OUT/train_resnet50.txt"
  # ResNet end to end on the GPU: a short O2 f16 run with dynamic loss scaling on Fashion-MNIST.
  if [ -n "${MG_FASHION_MNIST_DIR:-}" ]; then
    LOG_AT=$(wc -l < "$LOG")
    step "train_resnet on cuda" 90 "$BUILD/examples/train_resnet" --device cuda --opt-level O2 --dtype f16 \
      --epochs 1 --train-examples 12800 --eval-examples 2000 --metrics "$OUT/train_resnet.jsonl"
    tail -n "+$((LOG_AT + 1))" "$LOG" | grep -a "final test accuracy" | tail -1 | tee -a "$OUT/train_resnet.txt"
  else
    say "no Fashion-MNIST (scripts/fetch-gpu-deps downloads it): no ResNet run"
  fi
fi
if python3 -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" >> "$LOG" 2>&1; then
  step "PyTorch peer" 120 python3 benchmarks/gpu/torch_peer.py --json "$OUT/torch.json"
  step "PyTorch conv peer" 150 python3 benchmarks/gpu/torch_peer.py --resnet50-conv --json "$OUT/torch_conv.json"
  # Issue 15: training steps at O0 (f32, TF32), O1/O2/O3 (f16, bf16) of ResNet-50 b256 and BERT-base
  # b64 beside PyTorch's autocast/pure-precision peers, one process per model and framework in turn.
  # Last and the costliest (napkin: 3 x 4.1 GFLOP x 256 = 3.1 TFLOP per ResNet step, 6 x 110M x 8192
  # = 5.4 TFLOP per BERT step; about 60 s of PyTorch steps and cuDNN autotuning for both models, as
  # much again for ours if we match it); every process writes as it goes, so a time limit keeps the rows done.
  if [ -x "$BUILD/benchmarks/bench_amp" ]; then
    step "AMP training vs PyTorch" 270 python3 benchmarks/torch_amp_peer.py --device cuda \
      --bench-amp "$BUILD/benchmarks/bench_amp" --models resnet50,bert-base --group model --rounds 1 \
      --warmup 2 --steps 5 --threads 4 --process-timeout 110 --out "$OUT/amp"
    # Which layout is faster for ResNet-50: the same O1 f16 step in NCHW (the row above ran NHWC).
    step "ResNet-50 O1 f16 NCHW" 60 "$BUILD/benchmarks/bench_amp" --device cuda --models resnet50 --levels O1 \
      --dtypes f16 --memory-format contiguous --warmup 2 --steps 5 --threads 4 --json "$OUT/amp_nchw.jsonl"
    # Cut short by the time limit: pair what both sides finished. The rows of a bench_amp stopped
    # with the driver are still in its own file (whole lines only: it may have been writing).
    if [ ! -f "$OUT/amp/compare.txt" ] && [ -s "$OUT/amp/ours.tmp.jsonl" ]; then
      grep -a '}$' "$OUT/amp/ours.tmp.jsonl" >> "$OUT/amp/ours.jsonl" && rm -f "$OUT/amp/ours.tmp.jsonl"
    fi
    if [ ! -f "$OUT/amp/compare.txt" ] && [ -s "$OUT/amp/ours.jsonl" ] && [ -s "$OUT/amp/torch.jsonl" ]; then
      "$BUILD/benchmarks/bench_amp" --compare "$OUT/amp/ours.jsonl" --peer "$OUT/amp/torch.jsonl" \
        --json "$OUT/amp/pairs.jsonl" --markdown "$OUT/amp/pairs.md" --note "partial: the run hit its time limit" \
        > "$OUT/amp/compare.txt" 2>&1
    fi
  fi
else
  say "PyTorch with CUDA not found: no peer figures"
  # Our side of issue 15's table alone.
  [ -x "$BUILD/benchmarks/bench_amp" ] && mkdir -p "$OUT/amp" && step "AMP training (no peer)" 200 "$BUILD/benchmarks/bench_amp" \
    --device cuda --models resnet50,bert-base --warmup 2 --steps 5 --threads 4 --json "$OUT/amp/ours.jsonl"
fi

# Memory and race checking on the GPU (the toolkit's compute-sanitizer) over the kernel-heavy test
# files, memcheck with the caching allocator off (MG_CUDA_CACHING_ALLOCATOR=0: an access past a
# tensor's end leaves its allocation). Last, as the slowest per result: a first call's budget
# seldom reaches it; a second call on the warm machine does with
# MG_GPU_SKIP=configure,build,tests,bench,train,PyTorch,AMP,ResNet (the build folder is kept).
SANITIZER="$(command -v compute-sanitizer || ls "$TOOLKIT/bin/compute-sanitizer" "$TOOLKIT/compute-sanitizer/compute-sanitizer" 2> /dev/null | head -1)"
if [ -n "$SANITIZER" ] && [ -f "$BUILD/build.ninja" ]; then
  step "memcheck (compute-sanitizer)" 150 env MG_CUDA_CACHING_ALLOCATOR=0 "$SANITIZER" --tool memcheck \
    --error-exitcode 97 "$BUILD/tests/test_cuda" -# \
    "[#test_cuda_elementwise],[#test_cuda_reduce],[#test_cuda_norm],[#test_cuda_multi_tensor],[#test_cuda_nn_ops]"
  step "racecheck (compute-sanitizer)" 120 "$SANITIZER" --tool racecheck --error-exitcode 97 \
    "$BUILD/tests/test_cuda" -# "[#test_cuda_reduce],[#test_cuda_norm],[#test_cuda_attention],[#test_cuda_nn_ops]"
else
  say "no compute-sanitizer next to nvcc ($TOOLKIT): no memcheck or racecheck"
fi

{
  if [ -f "$OUT/bench_cuda.json" ]; then
    python3 - "$OUT/bench_cuda.json" "$OUT/torch.json" <<'PY' 2>/dev/null || cat "$OUT/bench_cuda.json"
import json, os, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
peer = {}
if os.path.exists(sys.argv[2]):
    for l in open(sys.argv[2]):
        if l.strip():
            r = json.loads(l); peer[(r["name"], r["dtype"])] = r["value"]
print(f"{'benchmark':<22} {'dtype':<6} {'shape':<18} {'mixgrad':>10} {'reference':>10} {'of ref':>9} {'PyTorch':>10}")
for r in rows:
    p = peer.get((r["name"], r["dtype"]))
    ref, pct = ("-", "-") if not r.get("reference_value") else (f"{r['reference_value']:.1f}", f"{100 * r['ratio']:.1f}%")
    print(f"{r['name']:<22} {r['dtype']:<6} {r['shape']:<18} {r['value']:>10.1f} {ref:>10} "
          f"{pct:>9} {p if p is None else round(p, 1)!s:>10}  {r['unit']}")
PY
  fi
  if [ -f "$OUT/bench_cudnn_conv.json" ]; then
    # ResNet-50 convs: mixgrad / PyTorch per row, and per (dtype, direction) the geometric mean of
    # those ratios over the 23 shapes (each distinct shape once).
    python3 - "$OUT/bench_cudnn_conv.json" "$OUT/torch_conv.json" <<'PY' 2>/dev/null || cat "$OUT/bench_cudnn_conv.json"
import json, math, os, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
peer = {}
if os.path.exists(sys.argv[2]):
    for l in open(sys.argv[2]):
        if l.strip():
            r = json.loads(l); peer[(r["name"], r["dtype"])] = r["value"]
print(f"{'ResNet-50 conv (batch 256, NHWC)':<30} {'dtype':<5} {'mixgrad':>9} {'PyTorch':>9} {'ratio':>7}  TFLOP/s")
totals = {}
for r in rows:
    p = peer.get((r["name"], r["dtype"]))
    ratio = r["value"] / p if p else None
    print(f"{r['name']:<30} {r['dtype']:<5} {r['value']:>9.1f} {p if p is None else round(p, 1)!s:>9} "
          f"{'-' if ratio is None else f'{ratio:.2f}':>7}")
    if ratio:
        totals.setdefault((r["dtype"], r["name"].split()[-1]), []).append(math.log(ratio))
for (dt, d), logs in sorted(totals.items()):
    print(f"conv {d:<6} {dt:<5}: mixgrad / PyTorch = {math.exp(sum(logs) / len(logs)):.2f} (geometric mean over {len(logs)} shapes)")
PY
  fi
  grep -a "^cuda graph:" "$LOG" | tail -2
  [ -s "$OUT/train_resnet.txt" ] && echo "train_resnet: $(cat "$OUT/train_resnet.txt")"
  [ -s "$OUT/train_resnet50.txt" ] && echo "train_resnet resnet50: $(cat "$OUT/train_resnet50.txt")"
  [ -f "$OUT/amp/compare.txt" ] && { echo "AMP training steps, mixgrad beside PyTorch:"; cat "$OUT/amp/compare.txt"; }
  if [ -f "$OUT/amp_nchw.jsonl" ]; then
    python3 - "$OUT/amp_nchw.jsonl" "$OUT/amp/ours.jsonl" <<'PY' 2>/dev/null || true
import json, os, sys
rows = [json.loads(l) for p in sys.argv[1:] if os.path.exists(p) for l in open(p) if l.strip()]
for r in rows:
    if r["model"] == "resnet50" and r["label"] == "O1 f16":
        print(f"ResNet-50 O1 f16 {r['memory_format']:>13} (ran {r['layout']}): {1e3 * r['wall_median_s']:.1f} ms/step")
PY
  fi
  # The step table last: the device tool returns only the end of the output.
  for xml in "$OUT/tests.xml" "$OUT/ops_amp_tests.xml" "$OUT/nccl_tests.xml" "$OUT/examples_tests.xml"; do
    [ -f "$xml" ] && python3 - "$xml" "$OUT/fused_names.txt" "$OUT/graph_names.txt" <<'PY' 2>/dev/null || true
import os, sys, xml.etree.ElementTree as ET
root = ET.parse(sys.argv[1]).getroot()
suites = [root] if root.tag == "testsuite" else root.findall("testsuite")
cases = [c for s in suites for c in s.iter("testcase")]
def failed(c): return c.find("failure") is not None or c.find("error") is not None
def skipped(c): return c.find("skipped") is not None or c.get("status") in ("notrun", "disabled")
def line(label, group):
    bad = [c for c in group if failed(c)]
    skip = [c for c in group if skipped(c) and not failed(c)]
    print(f"{label}: {len(group)} test cases, {len(bad)} failed, {len(skip)} skipped")
    return bad
bad = line(os.path.basename(sys.argv[1]), cases)
if os.path.basename(sys.argv[1]) == "tests.xml":  # the named groups of test_cuda
    for label, path in (("  fused AMP kernels", sys.argv[2]), ("  CUDA graphs", sys.argv[3])):
        if os.path.isfile(path):
            names = [n.strip() for n in open(path) if n.strip()]
            line(label, [c for c in cases if any((c.get("name") or "").endswith(n) for n in names)])
for c in bad: print("  FAILED:", c.get("name"))
PY
  done
  echo "GPU check summary: ${NAME_LINE:-unknown GPU}, commit $(git rev-parse --short HEAD 2>/dev/null), $(date -u +%F)"
  printf '%-28s %-28s %6s\n' "step" "outcome" "time"
  for line in "${SUMMARY[@]}"; do echo "$line"; done
  echo "total: $(( $(date +%s) - START ))s; full log: $LOG"
} | tee "$OUT/summary.txt"

# The device tool brings back at most 8 files of OUT: what the check wrote goes into one archive,
# and only it, the summary and the log stay (MG_GPU_KEEP_FILES=1 keeps the single files too).
# Named one by one: OUT may be a folder that holds other things.
PACKED=()
for f in tests.xml ops_amp_tests.xml nccl_tests.xml examples_tests.xml fused_names.txt graph_names.txt \
         bench_cuda_graph.json bench_cuda.json bench_attention.json bench_factory.json bench_pinned.json bench_cudnn_conv.json \
         torch.json torch_conv.json train_resnet50.jsonl train_resnet50.txt train_resnet.jsonl train_resnet.txt \
         amp_nchw.jsonl amp/ours.jsonl amp/ours.tmp.jsonl amp/torch.jsonl amp/pairs.jsonl amp/pairs.md amp/compare.txt; do
  [ -f "$OUT/$f" ] && PACKED+=("$f")
done
PACK="$(mktemp)"
if tar -czf "$PACK" -C "$OUT" summary.txt check.log "${PACKED[@]}" 2>> "$LOG"; then
  mv "$PACK" "$OUT/gpu-check.tar.gz"
  if [ "${MG_GPU_KEEP_FILES:-0}" != 1 ]; then
    for f in "${PACKED[@]}"; do rm -f "$OUT/$f"; done
    rmdir "$OUT/amp" 2> /dev/null
  fi
else
  rm -f "$PACK"
fi
