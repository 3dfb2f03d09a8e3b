// all_reduce bandwidth of ProcessGroupGloo over message sizes, beside memcpy of the same bytes in
// the same run, as nccl-tests reports it. Run under the launcher:
//   build/launcher/mixgrad-run --nproc-per-node 2 --master-port 0 build/benchmarks/bench_allreduce_sweep
//       [--quick] [--min-kib 1] [--max-mib 256] [--dtype f32]
// Napkin math (nccl-tests' definitions, docs/performance.md of nccl-tests): for S bytes reduced in t
// seconds, algorithm bandwidth algbw = S / t and bus bandwidth busbw = algbw · 2(W-1)/W, the bytes
// each rank's link carries in a ring all-reduce per second — comparable across world sizes and
// with the hardware's peak. On loopback the "link" is the kernel copying between two processes'
// sockets, so memcpy's GB/s (one core copying S bytes, measured on every rank at once, i.e. under
// the same 2-core contention) is the natural ceiling to print beside it.
// Decision: each size runs its all_reduce and its memcpy alternately, R times each, and reports the
// median of the per-call times (the slowest rank's time for all_reduce, agreed by an all_reduce
// max), so one descheduled call on the shared machine does not move the result, and beside it the
// best call's bus bandwidth (what the transport does when both ranks are scheduled). --quick runs
// 1 KiB .. 1 MiB with few repetitions: the CTest smoke run.
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
#include "distributed/init.h"
#include "ops/ops.h"

using namespace mg;
using Clock = std::chrono::steady_clock;

namespace {

double seconds_since(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

namespace {
constexpr const char* kSweepUsage =
    "usage: mixgrad-run --nproc-per-node W --master-port 0 bench_allreduce_sweep [--quick] [--min-kib K] [--max-mib M] "
    "[--dtype f32|f64|f16|bf16]\n";


int run(int argc, char** argv) {
  bool quick = false;
  double min_kib = 1, max_mib = 256;
  DType dtype = DType::F32;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--help" || a == "-h") {
      std::printf("%s", kSweepUsage);
      return 0;
    }
    if (a == "--quick") {
      quick = true;
      continue;
    }
    if (a != "--min-kib" && a != "--max-mib" && a != "--dtype") {
      throw std::invalid_argument(str_cat("unknown flag ", a, "\n", kSweepUsage));
    }
    if (i + 1 >= argc) throw std::invalid_argument(str_cat(a, " needs a value\n", kSweepUsage));
    const char* v = argv[++i];
    if (a == "--min-kib") min_kib = bench::number_arg("--min-kib", v, 1.0 / 1024, 1 << 22);
    if (a == "--max-mib") max_mib = bench::number_arg("--max-mib", v, 1.0 / (1 << 20), 4096);
    if (a == "--dtype") dtype = dtype_from_name(v);
  }
  if (quick) max_mib = std::min(max_mib, 1.0);
  auto pg = distributed::init_process_group({.timeout = std::chrono::seconds(300)});
  const int W = pg->world_size(), rank = pg->rank();
  const double bus_factor = 2.0 * (W - 1) / W;
  const int64_t esize = dtype_size(dtype);
  if (rank == 0) {
    std::printf("all_reduce sum over %d ranks (Gloo, TCP loopback), %s, one thread per rank; median of the "
                "per-call times (all_reduce: the slowest rank's)\n", W, dtype_name(dtype));
    std::printf("algbw = bytes / time, busbw = algbw * 2(W-1)/W = algbw * %.2f (nccl-tests); memcpy: the same "
                "bytes, every rank at once, alternating with the all_reduce calls\n", bus_factor);
    std::printf("%10s %5s %11s %11s %11s %11s %11s %12s\n", "bytes", "reps", "median_us", "algbw_GB/s", "busbw_GB/s",
                "best_busbw", "memcpy_GB/s", "busbw/memcpy");
  }
  const int64_t max_bytes = int64_t(max_mib * (1 << 20));
  for (int64_t bytes = int64_t(min_kib * 1024); bytes <= max_bytes; bytes *= 2) {
    const int64_t n = std::max<int64_t>(1, bytes / esize);
    const int64_t b = n * esize;
    Tensor x = ones({n}, {.dtype = dtype});
    const std::size_t nb = static_cast<std::size_t>(b);
    std::vector<char> src(nb, 1), dst(nb);
    // About 0.2 s of data per size (at ~1 GB/s), at least 3 and at most 50 calls; --quick: 3.
    const int reps = quick ? 3 : int(std::clamp<int64_t>(int64_t(2e8) / b, 3, 50));
    pg->all_reduce(x);  // warm-up: connections, pages
    std::memcpy(dst.data(), src.data(), src.size());
    std::vector<double> t_red, t_copy;
    for (int r = 0; r < reps; ++r) {
      pg->barrier();
      auto t0 = Clock::now();
      pg->all_reduce(x);
      Tensor t = full({1}, seconds_since(t0), {.dtype = DType::F64});
      pg->all_reduce(t, distributed::ReduceOp::Max);
      t_red.push_back(t.item<double>());
      pg->barrier();
      t0 = Clock::now();
      std::memcpy(dst.data(), src.data(), src.size());
      t_copy.push_back(seconds_since(t0));
      if (dst[nb - 1] != 1) std::printf("memcpy lost its bytes\n");  // keeps the copy observable
    }
    const double tr = median(t_red), tc = median(t_copy);
    const double best = *std::min_element(t_red.begin(), t_red.end());
    const double algbw = double(b) / tr / 1e9, busbw = algbw * bus_factor, copybw = double(b) / tc / 1e9;
    if (rank == 0) {
      std::printf("%10lld %5d %11.1f %11.3f %11.3f %11.3f %11.3f %12.3f\n", (long long)b, reps, tr * 1e6, algbw,
                  busbw, double(b) / best / 1e9 * bus_factor, copybw, busbw / copybw);
      std::fflush(stdout);
    }
  }
  pg->shutdown();
  return 0;
}
}  // namespace

int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::invalid_argument& e) {  // a bad flag
    std::fprintf(stderr, "bench_allreduce_sweep: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {  // no launcher environment (MASTER_ADDR unset), a peer lost
    std::fprintf(stderr, "bench_allreduce_sweep: %s\n", e.what());
    return 1;
  }
}
