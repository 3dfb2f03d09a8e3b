// bench_cuda: the CUDA backend's kernels on the GPU. Memory-bound kernels in GB/s of the bytes each
// call must read and write, beside a device-to-device memcpy of the same traffic measured in the
// same run (the memory-bound reference; about 4.3 TB/s measured on an H200): elementwise ops, casts,
// the reductions (sum of 2^28 f32, column sums of [2^14, 2^14] f32, logsumexp over the rows of
// [4096, 32768] bf16) and softmax over the rows of the same [4096, 32768] bf16. argsort in elements
// sorted per second (rows of [256, 32768] bf16, one row of 2^24 f32). Convolutions (a
// ResNet-50 3x3 conv, each direction, beside the GEMM of the same size alone measured in the same
// run) in TFLOP/s. GEMMs (cuBLASLt, mg::mm on square matrices) in TFLOP/s of 2 n^3 flops, with
// no reference column: the device's nominal Tensor Core peak is not something the CUDA runtime
// reports (clock x SMs x a per-SM rate that differs by chip and product), so it is not printed; the
// PyTorch peer measured on the same GPU (benchmarks/gpu/torch_peer.py) is the comparison. Targets
// on an H200: bf16/f16 8192^3 at >= 650 TFLOP/s (nominal dense peak ~989, cuBLAS reaches ~790).
// Timing: CUDA events around `reps` back-to-back calls on the current stream after one warm-up
// call, best of 5 such batches. Without a CUDA device it prints why and exits with 77 (skipped).
//
//   bench_cuda [--quick] [--json FILE]
#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "bench_common.h"
#include "bench_cuda_timing.h"
#include "core/factory.h"
#include "core/storage.h"
#include "cuda/cuda.h"
#include "ops/conv.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "ops/sort.h"

namespace {

using bench::Row;
using namespace mg;


double gbps(double bytes, double ms) { return bytes / (ms * 1e-3) / 1e9; }

// A device-to-device copy of `bytes` (read + written = 2 * bytes of traffic).
double memcpy_gbps(int64_t bytes, int reps) {
  const Device d = Device::cuda(0);
  const Tensor src = empty({bytes}, {.dtype = DType::U8, .device = d});
  const Tensor dst = empty({bytes}, {.dtype = DType::U8, .device = d});
  const double ms = bench::cuda_ms_per_call(reps, [&] { copy_bytes(dst.data_ptr(), d, src.data_ptr(), d, std::size_t(bytes)); });
  return gbps(2.0 * double(bytes), ms);
}

Row row(const std::string& name, const std::string& dtype, const std::string& shape, double value, double ref) {
  Row r{name, dtype, shape};
  r.value = value;
  r.unit = "GB/s";
  r.reference = "d2d memcpy, same bytes";
  r.reference_value = ref;
  r.ratio = ref > 0 ? value / ref : 0;
  return r;
}

// C = A @ B on [n, n] matrices of `dtype` (normal random values), in TFLOP/s; `tf32` sets the
// TF32 switch for the measurement (and restores strict f32 after it).
Row gemm_row(const std::string& name, DType dtype, int64_t n, int reps, bool tf32) {
  const Device d = Device::cuda(0);
  const Tensor a = to(to(randn({n, n}), d), dtype), b = to(to(randn({n, n}), d), dtype);
  cuda::set_allow_tf32(tf32);
  const double ms = bench::cuda_ms_per_call(reps, [&] { (void)mm(a, b); });
  cuda::set_allow_tf32(false);
  const std::string size = std::to_string(n);
  Row r{name, dtype_name(dtype), size + "^3"};
  r.value = 2.0 * double(n) * double(n) * double(n) / (ms * 1e-3) / 1e12;
  r.unit = "TFLOP/s";
  return r;
}

// A measurement that throws (a kernel or library refusing this device) is reported and skipped:
// the others still run, the JSON keeps the rows so far, and the exit code says so.
bool g_failed = false;
void attempt(const char* what, const std::function<void()>& fn) {
  try {
    fn();
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "bench_cuda: %s failed: %s\n", what, e.what());
    g_failed = true;
  }
}

}  // namespace

int main(int argc, char** argv) {
  bench::Config cfg;
  if (const int rc = bench::parse_args(argc, argv, "bench_cuda", cfg); rc >= 0) return rc;
  if (!cuda::is_available()) {
    std::printf("bench_cuda: skipped: %s\n", cuda::unavailable_reason().c_str());
    return 77;
  }
  const cuda::DeviceProperties p = cuda::device_properties(0);
  std::printf("bench_cuda: %s (sm_%d%d, %d SMs, %.1f GiB), driver %d, runtime %d, %s\n", p.name.c_str(), p.major,
              p.minor, p.sm_count, double(p.total_memory) / (1 << 30), p.driver_version, p.runtime_version,
              cuda::blas_library().c_str());
  const int64_t n = cfg.quick ? (int64_t(1) << 20) : (int64_t(1) << 28);
  const int reps = cfg.quick ? 3 : 20;
  const std::string shape = "2^" + std::to_string(cfg.quick ? 20 : 28);
  const Device d = Device::cuda(0);
  std::vector<Row> rows;

  const Tensor a = randn({n}, {.device = d}), b = randn({n}, {.device = d});
  attempt("add", [&] {
    const double traffic = 3.0 * 4 * double(n);
    const double ms = bench::cuda_ms_per_call(reps, [&] { (void)add(a, b); });
    rows.push_back(row("add", "f32", shape, gbps(traffic, ms), memcpy_gbps(int64_t(traffic / 2), reps)));
  });
  attempt("gelu", [&] {
    const double traffic = 2.0 * 4 * double(n);
    const double ms = bench::cuda_ms_per_call(reps, [&] { (void)gelu(a); });
    rows.push_back(row("gelu (erf)", "f32", shape, gbps(traffic, ms), memcpy_gbps(int64_t(traffic / 2), reps)));
  });
  attempt("cast f32->bf16", [&] {
    const double traffic = (4.0 + 2.0) * double(n);
    const double ms = bench::cuda_ms_per_call(reps, [&] { (void)to(a, DType::BF16); });
    rows.push_back(row("cast f32->bf16", "bf16", shape, gbps(traffic, ms), memcpy_gbps(int64_t(traffic / 2), reps)));
  });
  attempt("mul", [&] {
    const Tensor h = to(a, DType::BF16), g = to(b, DType::BF16);
    const double traffic = 3.0 * 2 * double(n);
    const double ms = bench::cuda_ms_per_call(reps, [&] { (void)mul(h, g); });
    rows.push_back(row("mul", "bf16", shape, gbps(traffic, ms), memcpy_gbps(int64_t(traffic / 2), reps)));
  });
  attempt("transpose copy", [&] {
    const int64_t cols = 4096, rows_n = n / cols;
    const Tensor m = a.reshape({rows_n, cols});
    const double traffic = 2.0 * 4 * double(n);
    const double ms = bench::cuda_ms_per_call(reps, [&] { (void)contiguous(m.t()); });
    rows.push_back(row("transpose copy", "f32", "[" + std::to_string(cols) + ", " + std::to_string(rows_n) + "]",
                       gbps(traffic, ms), memcpy_gbps(int64_t(traffic / 2), reps)));
  });
  attempt("gemm", [&] {
    // GEMMs: low precision at 8192^3 (1.1 TFLOP a call), f32 at 4096^3; --quick: 1024^3.
    const int64_t big = cfg.quick ? 1024 : 8192, f32n = cfg.quick ? 1024 : 4096;
    rows.push_back(gemm_row("gemm", DType::BF16, big, reps, false));
    rows.push_back(gemm_row("gemm", DType::F16, big, reps, false));
    rows.push_back(gemm_row("gemm", DType::F32, f32n, reps, false));
    rows.push_back(gemm_row("gemm (tf32)", DType::F32, f32n, reps, true));
  });
  attempt("conv2d", [&] {
    // Convolutions (im2col + cuBLASLt): a ResNet-50 stage-2 3x3 conv, x [N, 128, 28, 28], w [128,
    // 128, 3, 3], padding 1 (N = 64; --quick 8), each direction in TFLOP/s of 2 N O C 9 Ho Wo
    // flops, beside the GEMM of the same size alone (mm [O, C 9] @ [C 9, N Ho Wo]) in the same run:
    // the ratio is what im2col, col2im and the permutes cost on top of the GEMM.
    const int64_t N = cfg.quick ? 8 : 64, C = 128, HW = 28;
    const double flops = 2.0 * double(N) * C * C * 9 * HW * HW;
    const std::string cshape = "[" + std::to_string(N) + ", 128, 28, 28] 3x3";
    for (const DType dt : {DType::BF16, DType::F32}) {
      const Tensor x = to(to(randn({N, C, HW, HW}), d), dt), w = to(to(randn({C, C, 3, 3}), d), dt);
      const Tensor g = to(to(randn({N, C, HW, HW}), d), dt);
      const Tensor ga = to(to(randn({C, C * 9}), d), dt), gb = to(to(randn({C * 9, N * HW * HW}), d), dt);
      const double gemm_tflops = flops / (bench::cuda_ms_per_call(reps, [&] { (void)mm(ga, gb); }) * 1e-3) / 1e12;
      const Conv2dOptions o{.padding = {1, 1}};
      auto conv_row = [&](const std::string& name, const std::function<void()>& fn) {
        Row r{name, dtype_name(dt), cshape};
        r.value = flops / (bench::cuda_ms_per_call(reps, fn) * 1e-3) / 1e12;
        r.unit = "TFLOP/s";
        r.reference = "mm of the same size";
        r.reference_value = gemm_tflops;
        r.ratio = r.value / gemm_tflops;
        return r;
      };
      rows.push_back(conv_row("conv2d fwd", [&] { (void)conv2d(x, w, {}, o); }));
      rows.push_back(conv_row("conv2d dgrad", [&] { (void)conv2d_backward_input(g, w, {HW, HW}, o); }));
      rows.push_back(conv_row("conv2d wgrad", [&] { (void)conv2d_backward_weight(x, g, {3, 3}, o); }));
    }
  });
  // Reductions: a read-only pass, so the memcpy of the same traffic copies half the bytes read.
  attempt("sum", [&] {
    const double traffic = 4.0 * double(n);
    const double ms = bench::cuda_ms_per_call(reps, [&] { (void)sum(a); });
    rows.push_back(row("sum", "f32", shape, gbps(traffic, ms), memcpy_gbps(int64_t(traffic / 2), reps)));
  });
  attempt("sum dim 0", [&] {
    const int64_t side = int64_t(1) << (cfg.quick ? 10 : 14);  // side² = n
    const Tensor m = a.reshape({side, side});
    const double traffic = 4.0 * double(n);
    const double ms = bench::cuda_ms_per_call(reps, [&] { (void)sum(m, {0}); });
    rows.push_back(row("sum dim 0", "f32", "[" + std::to_string(side) + ", " + std::to_string(side) + "]",
                       gbps(traffic, ms), memcpy_gbps(int64_t(traffic / 2), reps)));
  });
  attempt("logsumexp", [&] {
    const int64_t cols = 32768, rows_n = cfg.quick ? 32 : 4096;
    const Tensor h = to(a.slice(0, 0, rows_n * cols), DType::BF16).reshape({rows_n, cols});
    const double traffic = 2.0 * double(rows_n * cols);
    const double ms = bench::cuda_ms_per_call(reps, [&] { (void)logsumexp(h, {1}); });
    rows.push_back(row("logsumexp rows", "bf16", "[" + std::to_string(rows_n) + ", " + std::to_string(cols) + "]",
                       gbps(traffic, ms), memcpy_gbps(int64_t(traffic / 2), reps)));
  });
  attempt("softmax", [&] {
    // Softmax over the rows: every element read once and written once (the kernel's extra passes
    // over a row hit the cache or registers, not memory), so the memcpy copies the same bytes.
    const int64_t cols = 32768, rows_n = cfg.quick ? 32 : 4096;
    const Tensor h = to(a.slice(0, 0, rows_n * cols), DType::BF16).reshape({rows_n, cols});
    const double traffic = 2.0 * 2 * double(rows_n * cols);
    const double ms = bench::cuda_ms_per_call(reps, [&] { (void)softmax(h, 1); });
    rows.push_back(row("softmax rows", "bf16", "[" + std::to_string(rows_n) + ", " + std::to_string(cols) + "]",
                       gbps(traffic, ms), memcpy_gbps(int64_t(traffic / 2), reps)));
  });
  attempt("argsort", [&] {
    // Sorting (stable, as sort/topk/unique/median use it) in elements sorted per second: rows of
    // a vocabulary (top-k sampling over logits) and one long row (unique or median of a tensor).
    const int64_t cols = 32768, rows_n = cfg.quick ? 8 : 256, flat = int64_t(1) << (cfg.quick ? 16 : 24);
    const Tensor h = to(a.slice(0, 0, rows_n * cols), DType::BF16).reshape({rows_n, cols});
    const Tensor f = a.slice(0, 0, flat);
    for (const auto& [input, shape_text] : {std::pair{h, "[" + std::to_string(rows_n) + ", 32768]"},
                                            std::pair{f, "2^" + std::to_string(cfg.quick ? 16 : 24)}}) {
      const Tensor& t = input;  // a plain reference for the lambda (no capture of a structured binding)
      const double ms = bench::cuda_ms_per_call(cfg.quick ? 1 : 3, [&] { (void)argsort(t); });
      Row r{"argsort", dtype_name(t.dtype()), shape_text};
      r.value = double(t.numel()) / (ms * 1e-3) / 1e9;
      r.unit = "Gelem/s";
      rows.push_back(r);
    }
  });
  bench::print_table(rows);
  const cuda::DeviceMemoryStats s = cuda::memory_stats(0);
  std::printf("device memory: peak allocated %.2f GiB, reserved %.2f GiB, %llu cudaMalloc calls\n",
              double(s.peak_allocated) / (1 << 30), double(s.reserved) / (1 << 30),
              static_cast<unsigned long long>(s.num_device_mallocs));
  if (!cfg.json.empty() && !bench::write_json(cfg.json, rows)) {
    std::fprintf(stderr, "bench_cuda: cannot write %s\n", cfg.json.c_str());
    return 1;
  }
  return g_failed ? 1 : 0;
}
