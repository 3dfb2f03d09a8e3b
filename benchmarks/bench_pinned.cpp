// bench_pinned: pinned host memory. On every machine: the pinned cache's bookkeeping per batch
// tensor (allocate + record a copy's event + deallocate of a 1 MiB block, events completing at
// once, over malloc'ed memory so only the policy is timed), beside a plain malloc + free of the
// same size measured in the same run (the peer; ratio = peer time / cache time, > 100%: cheaper).
// On a GPU also host<->device copies of 64 MiB in GB/s, wall clock from the call to the copy's
// completion (stream synchronised inside the timed region): pageable to(gpu) / to(cpu) are the
// reference for pinned to(.., non_blocking = true); and the host time to issue a non_blocking
// H2D copy (no wait: microseconds, against the same copy's full duration).
// Timing: best of N repetitions (steady_clock), after a warm-up; the load average is printed.
//
//   bench_pinned [--quick] [--json FILE]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_common.h"
#include "core/factory.h"
#include "cuda/cuda.h"
#include "cuda/host/pinned_cache.h"
#include "ops/ops.h"

namespace {

using bench::Row;
using namespace mg;

// malloc'ed "pinned" memory whose events complete at once: the policy's own cost.
class MallocHostMemory final : public cuda::HostMemory {
 public:
  void* raw_alloc(std::size_t bytes) override { return std::malloc(bytes); }
  void raw_free(void* p) override { std::free(p); }
  cuda::EventHandle record_event(int, cuda::StreamId) override { return ++next_; }
  bool event_completed(cuda::EventHandle) override { return true; }
  void destroy_event(cuda::EventHandle) override {}

 private:
  cuda::EventHandle next_ = 0;
};

Row policy_row(int iters, int reps) {
  constexpr std::size_t kBytes = std::size_t(1) << 20;
  MallocHostMemory memory;
  cuda::PinnedHostCache cache(memory);
  const double cache_s = bench::seconds_best_of(reps, [&] {
    for (int i = 0; i < iters; ++i) {
      void* p = cache.allocate(kBytes);
      static_cast<volatile char*>(p)[0] = char(i);
      (void)cache.record_use(p, 0, 0);
      cache.deallocate(p);
    }
  });
  const double malloc_s = bench::seconds_best_of(reps, [&] {
    for (int i = 0; i < iters; ++i) {
      void* p = std::malloc(kBytes);
      static_cast<volatile char*>(p)[0] = char(i);
      std::free(p);
    }
  });
  Row r{"pinned cache cycle", "u8", "1 MiB"};
  r.value = cache_s / iters * 1e9;
  r.unit = "ns";
  r.reference = "malloc+free, same size (ns)";
  r.reference_value = malloc_s / iters * 1e9;
  r.ratio = r.reference_value / r.value;
  return r;
}

double gbps(double bytes, double s) { return bytes / s / 1e9; }

Row copy_row(const std::string& name, double bytes, double s, double ref_s, const std::string& ref) {
  Row r{name, "u8", "64 MiB"};
  r.value = gbps(bytes, s);
  r.unit = "GB/s";
  r.reference = ref;
  r.reference_value = gbps(bytes, ref_s);
  r.ratio = r.value / r.reference_value;
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Config cfg;
  if (const int rc = bench::parse_args(argc, argv, "bench_pinned", cfg); rc >= 0) return rc;
  bench::print_load_average();
  const int reps = cfg.quick ? 3 : 7;
  std::vector<Row> rows;
  rows.push_back(policy_row(cfg.quick ? 20000 : 200000, reps));
  if (cuda::is_available()) {
    const Device gpu = Device::cuda(0);
    const int64_t bytes = int64_t(64) << 20;
    const Tensor pageable = full({bytes}, 1.0, {.dtype = DType::U8});
    const Tensor pinned = pageable.pin_memory();
    const Tensor dev = pageable.to(gpu);
    cuda::synchronize();
    const double h2d_pageable = bench::seconds_best_of(reps, [&] {
      (void)pageable.to(gpu);
      cuda::current_stream().synchronize();
    });
    const double h2d_pinned = bench::seconds_best_of(reps, [&] {
      (void)pinned.to(gpu, true);
      cuda::current_stream().synchronize();
    });
    const double d2h_pageable = bench::seconds_best_of(reps, [&] { (void)dev.to(Device::cpu()); });
    const double d2h_pinned = bench::seconds_best_of(reps, [&] {
      (void)dev.to(Device::cpu(), true);
      cuda::current_stream().synchronize();
    });
    // Host time to issue: the call alone, the copy finishing outside the timed region.
    double issue = 1e300;
    for (int r = 0; r < reps; ++r) {
      const auto t0 = std::chrono::steady_clock::now();
      const Tensor d = pinned.to(gpu, true);
      const auto t1 = std::chrono::steady_clock::now();
      cuda::synchronize();
      issue = std::min(issue, std::chrono::duration<double>(t1 - t0).count());
    }
    const double b = double(bytes);
    rows.push_back(copy_row("h2d pinned non_blocking", b, h2d_pinned, h2d_pageable, "h2d pageable (GB/s)"));
    rows.push_back(copy_row("d2h pinned non_blocking", b, d2h_pinned, d2h_pageable, "d2h pageable (GB/s)"));
    Row r{"h2d non_blocking issue", "u8", "64 MiB"};
    r.value = issue * 1e6;
    r.unit = "us";
    r.reference = "the copy itself (us)";
    r.reference_value = h2d_pinned * 1e6;
    r.ratio = r.value / r.reference_value;
    rows.push_back(r);
    const cuda::PinnedMemoryStats s = cuda::pinned_memory_stats();
    std::printf("pinned memory: reserved %.1f MiB, peak allocated %.1f MiB, %llu cudaHostAlloc calls\n",
                double(s.reserved) / (1 << 20), double(s.peak_allocated) / (1 << 20),
                static_cast<unsigned long long>(s.num_host_allocs));
  } else {
    std::printf("bench_pinned: copies skipped: %s\n", cuda::unavailable_reason().c_str());
  }
  bench::print_table(rows);
  if (!cfg.json.empty() && !bench::write_json(cfg.json, rows)) {
    std::fprintf(stderr, "bench_pinned: cannot write %s\n", cfg.json.c_str());
    return 1;
  }
  return 0;
}
