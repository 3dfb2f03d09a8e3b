// bench_ops: op throughput next to the machine's own peers, all measured in the same run (the
// host is shared and noisy, so only same-run ratios mean something):
//   1. FMA peak: a register-resident FMA loop (independent accumulators) on every thread;
//   2. f32 GEMM 2048^3 through mg::matmul: GFLOP/s and % of that peak;
//   3. f16 and bf16 GEMM of the same size: GFLOP/s and ratio to f32 (f32 accumulation);
//   4. mg::add and mg::gelu on 2^24 f32 elements: GB/s vs memcpy of the same traffic;
//   5. mg::to f32 -> f16 and f16 -> f32 on 2^24 elements: GB/s vs memcpy;
//   6. reductions by the summation rule (core/cascade_sum.h) on 2^24 elements: a full sum and
//      variance, row sums [2^10, 2^14] over dim 1, column sums [2^14, 2^10] over dim 0 (the
//      bias-gradient shape) in f32 and bf16: GB/s of input read vs memcpy (read + write).
// Timing: one warm-up call, then the best of N (std::chrono::steady_clock).
//
//   bench_ops [--quick] [--threads N] [--json FILE]
#include <omp.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_common.h"
#include "core/convert.h"
#include "core/parallel.h"
#include "ops/ops.h"

namespace {

using bench::g_sink;
using bench::Row;
using bench::seconds_best_of;

// ---- 2./3. GEMM through mg::matmul ----
double gemm_gflops(int64_t n, mg::DType dtype, int reps) {
  const mg::Tensor a = mg::to(mg::randn({n, n}), dtype);
  const mg::Tensor b = mg::to(mg::randn({n, n}), dtype);
  const double t = seconds_best_of(reps, [&] { g_sink = double(mg::matmul(a, b).numel()); });
  return 2.0 * double(n) * double(n) * double(n) / t / 1e9;
}

// ---- 4./5. memory-bound ops vs memcpy of the same traffic (bench::memcpy_gbps) ----
// The same, into a freshly allocated destination each time (what an op's output costs with a
// non-caching allocator: page faults on first touch).
double memcpy_fresh_gbps(int64_t bytes, int threads, int reps) {
  std::vector<char> src(std::size_t(bytes), 1);
  const double t = seconds_best_of(reps, [&] {
    char* dst = static_cast<char*>(std::aligned_alloc(64, std::size_t((bytes + 63) / 64 * 64)));
#pragma omp parallel num_threads(threads)
    {
      const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
      const int64_t b = bytes * id / nt, e = bytes * (id + 1) / nt;
      std::memcpy(dst + b, src.data() + b, std::size_t(e - b));
    }
    g_sink = double(dst[bytes / 2]);
    std::free(dst);
  });
  return 2.0 * double(bytes) / t / 1e9;
}

double op_gbps(double bytes, int reps, const std::function<mg::Tensor()>& op) {
  const double t = seconds_best_of(reps, [&] { g_sink = double(op().numel()); });
  return bytes / t / 1e9;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Config cfg;
  if (const int rc = bench::parse_args(argc, argv, "bench_ops", cfg); rc >= 0) return rc;

  mg::set_num_threads(cfg.threads);
  const int64_t gemm_n = cfg.quick ? 512 : 2048;
  const int64_t elems = cfg.quick ? (int64_t(1) << 20) : (int64_t(1) << 24);
  const int gemm_reps = cfg.quick ? 2 : 3;
  const int mem_reps = cfg.quick ? 3 : 10;
  const int fma_reps = cfg.quick ? 3 : 5;
  std::printf("bench_ops: %d threads, GEMM %lldx%lldx%lld (best of %d), elementwise 2^%d f32 elements "
              "(best of %d), FMA loop best of %d; bulk convert ISA: %s\n\n",
              cfg.threads, (long long)gemm_n, (long long)gemm_n, (long long)gemm_n, gemm_reps,
              cfg.quick ? 20 : 24, mem_reps, fma_reps, mg::convert_isa());

  bench::print_load_average();

  std::vector<Row> rows;
  try {
    // 1. peak
    const Row peak = bench::fma_peak(cfg, fma_reps);
    rows.push_back(peak);

    // 2./3. GEMM
    const std::string gshape = std::to_string(gemm_n) + "^3";
    const double f32 = gemm_gflops(gemm_n, mg::DType::F32, gemm_reps);
    rows.push_back({"gemm", "f32", gshape, f32, "GFLOP/s", "fma_peak", peak.value, f32 / peak.value});
    for (mg::DType dt : {mg::DType::F16, mg::DType::BF16}) {
      const double v = gemm_gflops(gemm_n, dt, gemm_reps);
      rows.push_back({"gemm", mg::dtype_name(dt), gshape, v, "GFLOP/s", "gemm f32", f32, v / f32});
    }

    // 4./5. memory bound: bytes = read + written
    const std::string eshape = "2^" + std::to_string(cfg.quick ? 20 : 24);
    const double n = double(elems);
    const mg::Tensor x = mg::randn({elems}), y = mg::randn({elems});
    const mg::Tensor xh = mg::to(x, mg::DType::F16);
    const double mc = bench::memcpy_gbps(elems * 4, cfg.threads, mem_reps);
    rows.push_back({"memcpy", "-", eshape + " x 4 B", mc, "GB/s", "", 0, 0});
    const double mcf = memcpy_fresh_gbps(elems * 4, cfg.threads, mem_reps);
    rows.push_back({"memcpy_fresh_dst", "-", eshape + " x 4 B", mcf, "GB/s", "memcpy", mc, mcf / mc});
    const double add = op_gbps(12 * n, mem_reps, [&] { return mg::add(x, y); });
    rows.push_back({"add", "f32", eshape, add, "GB/s", "memcpy", mc, add / mc});
    const double gelu = op_gbps(8 * n, mem_reps, [&] { return mg::gelu(x); });
    rows.push_back({"gelu", "f32", eshape, gelu, "GB/s", "memcpy", mc, gelu / mc});
    const double gelu_t = op_gbps(8 * n, mem_reps, [&] { return mg::gelu(x, mg::GeluApprox::Tanh); });
    rows.push_back({"gelu_tanh", "f32", eshape, gelu_t, "GB/s", "memcpy", mc, gelu_t / mc});
    const double to16 = op_gbps(6 * n, mem_reps, [&] { return mg::to(x, mg::DType::F16); });
    rows.push_back({"to f32->f16", "f32", eshape, to16, "GB/s", "memcpy", mc, to16 / mc});
    const double to32 = op_gbps(6 * n, mem_reps, [&] { return mg::to(xh, mg::DType::F32); });
    rows.push_back({"to f16->f32", "f16", eshape, to32, "GB/s", "memcpy", mc, to32 / mc});

    // 6. reductions: bytes = input read (the output is tiny)
    const int64_t long_side = int64_t(1) << (cfg.quick ? 10 : 14);
    const mg::Tensor wide = mg::reshape(x, {elems / long_side, long_side});  // [2^10, 2^14]
    const mg::Tensor tall = mg::reshape(x, {long_side, elems / long_side});  // [2^14, 2^10]
    const mg::Tensor tall_bf16 = mg::to(tall, mg::DType::BF16);
    auto reduction = [&](const char* name, const char* dtype, const std::string& shape, double bytes,
                         const std::function<mg::Tensor()>& op) {
      const double v = op_gbps(bytes, mem_reps, op);
      rows.push_back({name, dtype, shape, v, "GB/s", "memcpy", mc, v / mc});
    };
    reduction("sum (all)", "f32", eshape, 4 * n, [&] { return mg::sum(x); });
    reduction("var (all)", "f32", eshape, 4 * n, [&] { return mg::var(x); });
    reduction("sum dim 1 (rows)", "f32", mg::shape_str(wide.shape()), 4 * n, [&] { return mg::sum(wide, {1}); });
    reduction("sum dim 0 (columns)", "f32", mg::shape_str(tall.shape()), 4 * n, [&] { return mg::sum(tall, {0}); });
    reduction("sum dim 0 (columns)", "bf16", mg::shape_str(tall.shape()), 2 * n, [&] { return mg::sum(tall_bf16, {0}); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ops: %s\n", e.what());
    return 1;
  }

  bench::print_table(rows);
  std::printf("\ntargets: gemm f32 >= 150 GFLOP/s; f16/bf16 >= 60%% of f32; add/gelu >= 70%% of memcpy\n");
  if (!cfg.json.empty() && !bench::write_json(cfg.json, rows)) {
    std::fprintf(stderr, "bench_ops: cannot write %s\n", cfg.json.c_str());
    return 1;
  }
  return 0;
}
