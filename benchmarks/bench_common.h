// What every bench_* program shares: the result row and its table/JSON output, best-of-N timing,
// the FMA-peak reference loop, the load average, and the common flags
// (--quick, --threads N, --json FILE, --help).
#pragma once
#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace bench {

// One measurement, printed as a table row and written as one JSON line.
struct Row {
  std::string name, dtype, shape;
  double value = 0;
  std::string unit, reference;
  double reference_value = 0;
  double ratio = 0;  // value / reference_value (0: no reference)
};

struct Config {
  bool quick = false;
  int threads = 2;
  std::string json;
};

inline double seconds_best_of(int reps, const std::function<void()>& fn) {
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

inline volatile double g_sink = 0;

// ---- the FMA peak: 12 independent vector accumulators per thread, so the loop is bound by FMA
// throughput, not latency. GFLOP/s counts 2 flops per lane per FMA over all threads.
constexpr int kAcc = 12;

__attribute__((target("avx512f"))) inline double fma_loop_avx512(int64_t iters) {
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

__attribute__((target("avx2,fma"))) inline double fma_loop_avx2(int64_t iters) {
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

inline Row fma_peak(const Config& cfg, int reps) {
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

// The host is shared: the load average says how much the numbers can be trusted.
inline void print_load_average() {
  if (std::FILE* f = std::fopen("/proc/loadavg", "r")) {
    char buf[128] = {0};
    if (std::fgets(buf, sizeof buf, f)) std::printf("load average at start: %s\n", buf);
    std::fclose(f);
  }
}

inline void print_table(const std::vector<Row>& rows) {
  std::printf("%-26s %-6s %-20s %12s %-8s %-26s %12s %8s\n", "name", "dtype", "shape", "value", "unit",
              "reference", "ref value", "ratio");
  for (const Row& r : rows) {
    char ref[32] = "";
    if (!r.reference.empty()) std::snprintf(ref, sizeof ref, "%.1f", r.reference_value);
    std::printf("%-26s %-6s %-20s %12.1f %-8s %-26s %12s %7.1f%%\n", r.name.c_str(), r.dtype.c_str(),
                r.shape.c_str(), r.value, r.unit.c_str(), r.reference.c_str(), ref, 100.0 * r.ratio);
  }
}

inline bool write_json(const std::string& path, const std::vector<Row>& rows) {
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

// Parses the common flags. Returns -1 to go on, else the exit code (0 after --help, 2 on a bad flag).
inline int parse_args(int argc, char** argv, const char* program, Config& cfg) {
  auto usage = [&](std::FILE* f) {
    std::fprintf(f,
                 "usage: %s [--quick] [--threads N] [--json FILE]\n"
                 "  --quick       small sizes and few repetitions (a smoke run)\n"
                 "  --threads N   worker threads (default 2)\n"
                 "  --json FILE   also write one JSON object per measurement per line\n"
                 "  --help        this text\n",
                 program);
  };
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
        std::fprintf(stderr, "%s: --threads expects a positive integer, got '%s'\n", program, argv[i]);
        return 2;
      }
      cfg.threads = int(n);
    } else {
      std::fprintf(stderr, "%s: unknown or incomplete argument '%s'\n", program, arg.c_str());
      usage(stderr);
      return 2;
    }
  }
  return -1;
}

// memcpy of `bytes` split over `threads` threads, best of `reps`: the memory-bound reference.
// GB/s counts bytes read + bytes written, like the ops measured against it.
inline double memcpy_gbps(int64_t bytes, int threads, int reps) {
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

}  // namespace bench
