// bench_ops: op throughput next to the machine's own peers, all measured in the same run (the
// host is shared and noisy, so only same-run ratios mean something):
//   1. FMA peak: a register-resident FMA loop (independent accumulators) on every thread;
//   2. f32 GEMM 2048^3 through mg::matmul: GFLOP/s and % of that peak;
//   3. f16 and bf16 GEMM of the same size: GFLOP/s and ratio to f32 (f32 accumulation);
//   4. mg::add and mg::gelu on 2^24 f32 elements: GB/s vs memcpy of the same traffic;
//   5. mg::to f32 -> f16 and f16 -> f32 on 2^24 elements: GB/s vs memcpy.
// Timing: one warm-up call, then the best of N (std::chrono::steady_clock).
//
//   bench_ops [--quick] [--threads N] [--json FILE]
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "core/convert.h"
#include "core/parallel.h"
#include "ops/ops.h"

namespace {

struct Config {
  bool quick = false;
  int threads = 2;
  std::string json;
};

struct Row {
  std::string name, dtype, shape;
  double value = 0;
  std::string unit, reference;
  double reference_value = 0;
  double ratio = 0;  // value / reference_value (0: no reference)
};

double seconds_best_of(int reps, const std::function<void()>& fn) {
  fn();  // warm-up
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    fn();
    const auto t1 = std::chrono::steady_clock::now();
    best = std::min(best, std::chrono::duration<double>(t1 - t0).count());
  }
  return best;
}

// ---- 1. FMA peak: 12 independent vector accumulators per thread, so the loop is bound by FMA
// throughput, not latency. Returns GFLOP/s (2 flops per lane per FMA) over all threads.
constexpr int kAcc = 12;

__attribute__((target("avx512f"))) double fma_loop_avx512(int64_t iters) {
  __m512 acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_set1_ps(float(i));
  const __m512 x = _mm512_set1_ps(0.999999f), y = _mm512_set1_ps(1e-6f);
  for (int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm512_fmadd_ps(acc[i], x, y);
  }
  __m512 s = acc[0];
  for (int i = 1; i < kAcc; ++i) s = _mm512_add_ps(s, acc[i]);
  float v[16];
  _mm512_storeu_ps(v, s);
  double total = 0;
  for (float f : v) total += f;
  return total;
}

__attribute__((target("avx2,fma"))) double fma_loop_avx2(int64_t iters) {
  __m256 acc[kAcc];
  for (int i = 0; i < kAcc; ++i) acc[i] = _mm256_set1_ps(float(i));
  const __m256 x = _mm256_set1_ps(0.999999f), y = _mm256_set1_ps(1e-6f);
  for (int64_t it = 0; it < iters; ++it) {
    for (int i = 0; i < kAcc; ++i) acc[i] = _mm256_fmadd_ps(acc[i], x, y);
  }
  __m256 s = acc[0];
  for (int i = 1; i < kAcc; ++i) s = _mm256_add_ps(s, acc[i]);
  float v[8];
  _mm256_storeu_ps(v, s);
  double total = 0;
  for (float f : v) total += f;
  return total;
}

volatile double g_sink = 0;

Row fma_peak(const Config& cfg, int reps) {
  const bool avx512 = __builtin_cpu_supports("avx512f");
  const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  const int lanes = avx512 ? 16 : 8;
  const int64_t iters = cfg.quick ? 2'000'000 : 20'000'000;
  const double t = seconds_best_of(reps, [&] {
    double total = 0;
#pragma omp parallel num_threads(cfg.threads) reduction(+ : total)
    total += avx512 ? fma_loop_avx512(iters) : avx2 ? fma_loop_avx2(iters) : 0.0;
    g_sink = total;
  });
  const double flops = 2.0 * lanes * kAcc * double(iters) * cfg.threads;
  Row r{"fma_peak", "f32", avx512 ? "avx512 x" + std::to_string(kAcc) : "avx2 x" + std::to_string(kAcc)};
  r.value = (avx512 || avx2) ? flops / t / 1e9 : 0.0;
  r.unit = "GFLOP/s";
  return r;
}

// ---- 2./3. GEMM through mg::matmul ----
double gemm_gflops(int64_t n, mg::DType dtype, int reps) {
  const mg::Tensor a = mg::to(mg::randn({n, n}), dtype);
  const mg::Tensor b = mg::to(mg::randn({n, n}), dtype);
  const double t = seconds_best_of(reps, [&] { g_sink = double(mg::matmul(a, b).numel()); });
  return 2.0 * double(n) * double(n) * double(n) / t / 1e9;
}

// ---- 4./5. memory-bound ops vs memcpy of the same traffic ----
// memcpy split over the same threads; GB/s counts bytes read + bytes written, like the ops.
double memcpy_gbps(int64_t bytes, int threads, int reps) {
  std::vector<char> src(std::size_t(bytes), 1), dst(std::size_t(bytes), 0);
  const double t = seconds_best_of(reps, [&] {
#pragma omp parallel num_threads(threads)
    {
      const int64_t nt = omp_get_num_threads(), id = omp_get_thread_num();
      const int64_t b = bytes * id / nt, e = bytes * (id + 1) / nt;
      std::memcpy(dst.data() + b, src.data() + b, std::size_t(e - b));
    }
  });
  g_sink = double(dst[std::size_t(bytes / 2)]);
  return 2.0 * double(bytes) / t / 1e9;
}

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

std::string fmt(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

void print_table(const std::vector<Row>& rows) {
  std::printf("%-22s %-6s %-16s %12s %-8s %-26s %12s %8s\n", "name", "dtype", "shape", "value", "unit",
              "reference", "ref value", "ratio");
  for (const Row& r : rows) {
    std::printf("%-22s %-6s %-16s %12.1f %-8s %-26s %12s %7.1f%%\n", r.name.c_str(), r.dtype.c_str(),
                r.shape.c_str(), r.value, r.unit.c_str(), r.reference.c_str(),
                r.reference.empty() ? "" : fmt(r.reference_value).c_str(), 100.0 * r.ratio);
  }
}

bool write_json(const std::string& path, const std::vector<Row>& rows) {
  std::ofstream out(path);
  if (!out) return false;
  for (const Row& r : rows) {
    out << "{\"name\": \"" << r.name << "\", \"dtype\": \"" << r.dtype << "\", \"shape\": \"" << r.shape
        << "\", \"value\": " << r.value << ", \"unit\": \"" << r.unit << "\", \"reference\": \""
        << r.reference << "\", \"reference_value\": " << r.reference_value << ", \"ratio\": " << r.ratio
        << "}\n";
  }
  return bool(out);
}

void usage(std::FILE* f) {
  std::fprintf(f,
               "usage: bench_ops [--quick] [--threads N] [--json FILE]\n"
               "  --quick       small sizes and few repetitions (a smoke run)\n"
               "  --threads N   worker threads (default 2)\n"
               "  --json FILE   also write one JSON object per measurement per line\n"
               "  --help        this text\n");
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      usage(stdout);
      return 0;
    } else if (arg == "--quick") {
      cfg.quick = true;
    } else if (arg == "--json" && i + 1 < argc) {
      cfg.json = argv[++i];
    } else if (arg == "--threads" && i + 1 < argc) {
      char* end = nullptr;
      const long n = std::strtol(argv[++i], &end, 10);
      if (*end != '\0' || n < 1 || n > 1024) {
        std::fprintf(stderr, "bench_ops: --threads expects a positive integer, got '%s'\n", argv[i]);
        return 2;
      }
      cfg.threads = int(n);
    } else {
      std::fprintf(stderr, "bench_ops: unknown or incomplete argument '%s'\n", arg.c_str());
      usage(stderr);
      return 2;
    }
  }

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

  // The host is shared: the load average says how much the numbers below can be trusted.
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
    char buf[128] = {0};
    if (std::fgets(buf, sizeof buf, f)) std::printf("load average at start: %s\n", buf);
    std::fclose(f);
  }

  std::vector<Row> rows;
  try {
    // 1. peak
    const Row peak = fma_peak(cfg, fma_reps);
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
    const double mc = memcpy_gbps(elems * 4, cfg.threads, mem_reps);
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
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_ops: %s\n", e.what());
    return 1;
  }

  print_table(rows);
  std::printf("\ntargets: gemm f32 >= 150 GFLOP/s; f16/bf16 >= 60%% of f32; add/gelu >= 70%% of memcpy\n");
  if (!cfg.json.empty() && !write_json(cfg.json, rows)) {
    std::fprintf(stderr, "bench_ops: cannot write %s\n", cfg.json.c_str());
    return 1;
  }
  return 0;
}
