// all_reduce throughput of ProcessGroupGloo on this machine, one line per dtype, run under the
// launcher:
//   build/launcher/mixgrad-run --nproc-per-node 2 --master-port 0 build/benchmarks/bench_allreduce [--quick] [--mib N]
// Napkin math: a ring all_reduce of B bytes moves 2(W-1)/W * B per rank ("bus bytes"); the
// reference in the same run is memcpy of B bytes (one rank's memory bandwidth, the ceiling of a
// loopback transport). f16/bf16 are widened to f32 and reduced in f32 (docs/distributed.md), so
// they move f32's bus bytes plus two conversions. Measured on the loaded 2-core development
// machine (64 MiB, 2 ranks, 1 thread each): f32 113 ms, f16 252-263 ms, bf16 283-319 ms, f64
// 189-214 ms; memcpy 41-58 ms: the 16-bit path costs about 2.2-2.8x f32's time, not the 0.5x
// a native 16-bit transfer would (docs/distributed.md, "Costs").
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/parallel.h"
#include "distributed/init.h"
#include "ops/ops.h"

using namespace mg;
using Clock = std::chrono::steady_clock;

int main(int argc, char** argv) {
  bool quick = false;
  double mib = 64;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--quick") quick = true;
    else if (a == "--mib" && i + 1 < argc) mib = std::atof(argv[++i]);
    else if (a == "--threads" && i + 1 < argc) set_num_threads(std::atoi(argv[++i]));
  }
  if (quick) mib = 1;
  auto pg = distributed::init_process_group({.timeout = std::chrono::seconds(120)});
  const int W = pg->world_size();
  const int reps = quick ? 2 : 10;
  auto timeit = [&](auto&& f) {
    f();  // warm-up
    pg->barrier();
    auto t0 = Clock::now();
    for (int r = 0; r < reps; ++r) f();
    pg->barrier();
    return std::chrono::duration<double>(Clock::now() - t0).count() / reps;
  };
  const int64_t f32_elems = int64_t(mib * (1 << 20) / 4);
  std::vector<char> src(size_t(f32_elems) * 4, 1), dst(size_t(f32_elems) * 4);
  const double t_copy = timeit([&] { std::memcpy(dst.data(), src.data(), src.size()); });
  if (pg->rank() == 0) {
    std::printf("all_reduce sum, %d ranks, %.0f MiB of f32-equivalent elements (%lld), %d reps\n", W, mib,
                (long long)f32_elems, reps);
    std::printf("memcpy %.0f MiB: %.2f ms = %.1f GB/s (reference)\n", mib, t_copy * 1e3,
                src.size() / t_copy / 1e9);
  }
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    Tensor x = ones({f32_elems}, {.dtype = t});
    const double s = timeit([&] { pg->all_reduce(x); });
    const double bytes = double(f32_elems) * double(dtype_size(t));
    const double bus = 2.0 * (W - 1) / W * bytes;
    if (pg->rank() == 0) {
      std::printf("%-4s %7.1f MiB: %8.2f ms  algo %6.2f GB/s  bus %6.2f GB/s  (%.2fx memcpy's time)\n",
                  dtype_name(t), bytes / (1 << 20), s * 1e3, bytes / s / 1e9, bus / s / 1e9, s / t_copy);
    }
  }
  pg->shutdown();
  return 0;
}
