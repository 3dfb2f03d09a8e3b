// all_reduce throughput of ProcessGroupGloo on this machine: f32, f64, and f16/bf16 on both paths
// (native: 16-bit on the wire; reduce_in_f32: widened to f32 and rounded once), run under the
// launcher:
//   build/launcher/mixgrad-run --nproc-per-node 2 --master-port 0 build/benchmarks/bench_allreduce [--quick] [--mib N] [--rounds R]
// Napkin math: a ring all_reduce of B bytes moves 2(W-1)/W * B per rank ("bus bytes"); the
// reference in the same run is memcpy of B bytes (one rank's memory bandwidth, the ceiling of a
// loopback transport). Every configuration reduces the same number of elements (N MiB of f32),
// so native f16/bf16 move half of f32's bytes and reduce_in_f32 moves f32's bytes plus two
// conversions. The configurations are timed in alternating rounds (the machine is shared and
// noisy); each line shows the best and the median round. Measured on the loaded 2-core machine
// (64 MiB, 2 ranks, 1 thread each): f16/bf16 native 0.48-0.64x f32's time, reduce_in_f32
// 1.39-1.52x; the table is in docs/distributed.md, "Costs".
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "benchmarks/distributed/number_arg.h"
#include "core/error.h"
#include "core/factory.h"
#include "core/parallel.h"
#include "distributed/init.h"
#include "ops/ops.h"

using namespace mg;
using Clock = std::chrono::steady_clock;

namespace {
struct Config {
  const char* name;
  DType dtype;
  bool reduce_in_f32;
};

constexpr const char* kUsage =
    "usage: mixgrad-run --nproc-per-node W --master-port 0 bench_allreduce [--quick] [--mib N] [--rounds R] "
    "[--threads T]\n"
    "  --quick       1 MiB, one round (a smoke run)\n"
    "  --mib N       elements to reduce: N MiB as f32 (1/1024 to 4096; default 64)\n"
    "  --rounds R    alternating rounds of every configuration (1 to 1000; default 3)\n"
    "  --threads T   CPU threads per rank (default: all cores)\n";
}  // namespace

int run(int argc, char** argv) {
  bool quick = false;
  double mib = 64;
  int rounds = 3;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("%s", kUsage);
      return 0;
    }
    if (a == "--quick") {
      quick = true;
      continue;
    }
    if (a != "--mib" && a != "--rounds" && a != "--threads") throw std::invalid_argument(str_cat("unknown flag ", a, "\n", kUsage));
    if (i + 1 >= argc) throw std::invalid_argument(str_cat(a, " needs a value\n", kUsage));
    const char* v = argv[++i];
    const double n = bench::number_arg(a.c_str(), v, a == "--mib" ? 1.0 / 1024 : 1, a == "--mib" ? 4096 : a == "--rounds" ? 1000 : 1024);
    if (a != "--mib" && n != std::floor(n)) throw std::invalid_argument(str_cat(a, " ", v, ": expected a whole number"));
    if (a == "--mib") mib = n;
    if (a == "--rounds") rounds = int(n);
    if (a == "--threads") set_num_threads(int(n));
  }
  if (quick) {
    mib = 1;
    rounds = 1;
  }
  auto pg = distributed::init_process_group({.timeout = std::chrono::seconds(120)});
  const int W = pg->world_size();
  const int reps = quick ? 2 : 5;
  auto timeit = [&](auto&& f) {
    f();  // warm-up
    pg->barrier();
    auto t0 = Clock::now();
    for (int r = 0; r < reps; ++r) f();
    pg->barrier();
    return std::chrono::duration<double>(Clock::now() - t0).count() / reps;
  };
  const int64_t elems = int64_t(mib * (1 << 20) / 4);
  std::vector<char> src(size_t(elems) * 4, 1), dst(size_t(elems) * 4);
  const Config configs[] = {{"f32", DType::F32, false},          {"f16 native", DType::F16, false},
                            {"f16 reduce_in_f32", DType::F16, true}, {"bf16 native", DType::BF16, false},
                            {"bf16 reduce_in_f32", DType::BF16, true}, {"f64", DType::F64, false}};
  constexpr int kConfigs = 6;
  std::vector<std::vector<double>> times(kConfigs + 1);  // the last: memcpy
  std::vector<Tensor> xs;
  for (const Config& c : configs) xs.push_back(ones({elems}, {.dtype = c.dtype}));
  for (int round = 0; round < rounds; ++round) {
    times[kConfigs].push_back(timeit([&] { std::memcpy(dst.data(), src.data(), src.size()); }));
    for (int k = 0; k < kConfigs; ++k) {
      const bool wide = configs[k].reduce_in_f32;
      Tensor& x = xs[std::size_t(k)];
      times[std::size_t(k)].push_back(
          timeit([&] { pg->all_reduce(x, distributed::AllReduceOptions{.reduce_in_f32 = wide}); }));
    }
  }
  auto best = [](std::vector<double> v) { return *std::min_element(v.begin(), v.end()); };
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  if (pg->rank() == 0) {
    const double t_copy = best(times[kConfigs]);
    std::printf("all_reduce sum on Gloo, %d ranks, %lld elements (%.0f MiB as f32), %d reps x %d alternating rounds, %d thread(s)\n",
                W, (long long)elems, mib, reps, rounds, num_threads());
    std::printf("memcpy %.0f MiB: best %.2f ms = %.1f GB/s (reference)\n", mib, t_copy * 1e3, src.size() / t_copy / 1e9);
    std::printf("%-19s %9s %10s %10s %11s %10s %9s\n", "config", "wire MiB", "best ms", "median ms", "algo GB/s",
                "bus GB/s", "x memcpy");
    for (int k = 0; k < kConfigs; ++k) {
      const Config& c = configs[k];
      const double wire = double(elems) * double(c.reduce_in_f32 ? 4 : dtype_size(c.dtype));
      const double s = best(times[std::size_t(k)]);
      std::printf("%-19s %9.1f %10.2f %10.2f %11.2f %10.2f %9.2f\n", c.name, wire / (1 << 20), s * 1e3,
                  median(times[std::size_t(k)]) * 1e3, wire / s / 1e9, 2.0 * (W - 1) / W * wire / s / 1e9, s / t_copy);
    }
  }
  pg->shutdown();
  return 0;
}

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::invalid_argument& e) {  // a bad flag
    std::fprintf(stderr, "bench_allreduce: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {  // no launcher environment (MASTER_ADDR unset), a peer lost
    std::fprintf(stderr, "bench_allreduce: %s\n", e.what());
    return 1;
  }
}
