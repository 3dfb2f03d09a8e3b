// bench_factory: the factories (core/factory.h) in GB/s of the bytes they write.
// CPU: full, rand, randn and randint of 2^24 elements (--quick: 2^18), each beside its peer
// measured in the same run: the loop the CPU ran before issue 14 (core/factory.cpp at ae9bbab:
// one Philox block per element for rand/randint, glibc's log/cos/sin for randn), serial as it was
// written there but parallel_for'd here like the new loop, so the ratio is the per-element cost.
// CUDA (when a device is present): rand/randn/full of 2^28 f32 on the device, beside the path it
// replaced, the CPU fill plus the host-to-device copy, and a device-to-device memcpy of the same
// bytes (the memory-bound reference).
// Timing: one warm-up call, then the best of N; CPU with std::chrono::steady_clock, the device fill
// with CUDA events on the current stream, the old device path with the clock around a fill, a
// copy and a synchronize.
//
//   bench_factory [--quick] [--threads N] [--json FILE]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "bench_common.h"
#include "core/factory.h"
#include "core/parallel.h"
#include "core/philox.h"
#include "core/storage.h"
#include "cuda/cuda.h"

namespace {

using bench::Row;
using namespace mg;

Row gbps_row(const std::string& name, DType dt, int64_t n, double seconds, const std::string& ref, double ref_seconds) {
  Row r{name, dtype_name(dt), "2^" + std::to_string(int(std::log2(double(n))))};
  const double bytes = double(n) * double(dtype_size(dt));
  r.value = bytes / seconds / 1e9;
  r.unit = "GB/s";
  r.reference = ref;
  r.reference_value = ref_seconds > 0 ? bytes / ref_seconds / 1e9 : 0;
  r.ratio = r.reference_value > 0 ? r.value / r.reference_value : 0;
  return r;
}

// ---- the pre-issue-14 CPU loops (f32), parallel over elements or pairs
void old_rand_f32(float* p, int64_t n, uint64_t seed, uint64_t offset) {
  parallel_for(0, n, kDefaultGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) p[i] = philox_uniform(philox_block(seed, offset, uint64_t(i / 4)).v[i % 4]);
  });
}
void old_randn_f32(float* p, int64_t n, uint64_t seed, uint64_t offset) {
  parallel_for(0, (n + 1) / 2, kDefaultGrain / 2, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      const Philox4 r = philox_block(seed, offset, uint64_t(k));
      const double rad = std::sqrt(-2.0 * std::log(1.0 - philox_uniform_double(r.v[0], r.v[1])));
      const double angle = 6.283185307179586 * philox_uniform_double(r.v[2], r.v[3]);
      p[2 * k] = float(rad * std::cos(angle));
      if (2 * k + 1 < n) p[2 * k + 1] = float(rad * std::sin(angle));
    }
  });
}
void old_randint_i64(int64_t* p, int64_t n, int64_t low, uint64_t range, uint64_t seed, uint64_t offset) {
  parallel_for(0, n, kDefaultGrain, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) {
      const Philox4 r = philox_block(seed, offset, uint64_t(i / 2));
      const uint64_t w = i % 2 == 0 ? (uint64_t(r.v[0]) << 32 | r.v[1]) : (uint64_t(r.v[2]) << 32 | r.v[3]);
      p[i] = low + int64_t(w % range);
    }
  });
}

double device_seconds(int reps, const std::function<void()>& fn) {
  fn();
  cuda::synchronize();
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    cuda::Event start, end;
    start.record();
    fn();
    end.record();
    end.synchronize();
    best = std::min(best, double(start.elapsed_ms(end)) * 1e-3);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Config cfg;
  if (const int rc = bench::parse_args(argc, argv, "bench_factory", cfg); rc >= 0) return rc;
  set_num_threads(cfg.threads);
  const int reps = cfg.quick ? 2 : 10;
  const int64_t n = int64_t(1) << (cfg.quick ? 18 : 24);
  std::printf("bench_factory: %d threads, best of %d\n", cfg.threads, reps);
  bench::print_load_average();
  std::vector<Row> rows;
  Generator g(1);

  {  // full: the reference is memset-speed, so the peer is a same-size memcpy (read + write counted)
    const double t = bench::seconds_best_of(reps, [&] { (void)full({n}, 0.5); });
    const double copy_gbps = bench::memcpy_gbps(4 * n, cfg.threads, reps);
    Row r = gbps_row("full", DType::F32, n, t, "memcpy (r+w), same bytes", 0);
    r.reference_value = copy_gbps;
    r.ratio = r.value / copy_gbps;
    rows.push_back(r);
  }
  {
    Tensor out = empty({n});
    const double t = bench::seconds_best_of(reps, [&] { (void)rand({n}, {}, &g); });
    const double ref = bench::seconds_best_of(reps, [&] { old_rand_f32(out.data<float>(), n, 1, 0); });
    rows.push_back(gbps_row("rand", DType::F32, n, t, "old CPU loop", ref));
  }
  {
    Tensor out = empty({n});
    const double t = bench::seconds_best_of(reps, [&] { (void)randn({n}, {}, &g); });
    const double ref = bench::seconds_best_of(reps, [&] { old_randn_f32(out.data<float>(), n, 1, 0); });
    rows.push_back(gbps_row("randn", DType::F32, n, t, "old CPU loop (glibc)", ref));
  }
  {
    const double t = bench::seconds_best_of(reps, [&] { (void)randn({n}, {.dtype = DType::F64}, &g); });
    rows.push_back(gbps_row("randn", DType::F64, n, t, "", 0));
  }
  {
    Tensor out = empty({n}, {.dtype = DType::I64});
    const double t = bench::seconds_best_of(reps, [&] { (void)randint(0, 1000, {n}, {.dtype = DType::I64}, &g); });
    const double ref = bench::seconds_best_of(reps, [&] { old_randint_i64(out.data<int64_t>(), n, 0, 1000, 1, 0); });
    rows.push_back(gbps_row("randint", DType::I64, n, t, "old CPU loop", ref));
  }

  if (cuda::is_available()) {
    const Device d = Device::cuda(0);
    const int64_t m = int64_t(1) << (cfg.quick ? 20 : 28);
    const int dreps = cfg.quick ? 2 : 10;
    const Tensor src = empty({4 * m}, {.dtype = DType::U8, .device = d}), dst = empty({4 * m}, {.dtype = DType::U8, .device = d});
    const double memcpy_s = device_seconds(dreps, [&] { copy_bytes(dst.data_ptr(), d, src.data_ptr(), d, std::size_t(4 * m)); });
    for (const std::string name : {"full", "rand", "randn"}) {
      const auto make = [&](Device dev) {
        return name == "full" ? full({m}, 0.5, {.device = dev}) : name == "rand" ? rand({m}, {.device = dev}, &g) : randn({m}, {.device = dev}, &g);
      };
      const double t = device_seconds(dreps, [&] { (void)make(d); });
      // The path it replaced: fill on the host, copy to the device, wait for the copy.
      const double old_t = bench::seconds_best_of(cfg.quick ? 1 : 3, [&] {
        const Tensor c = make(Device::cpu());
        Tensor out = empty({m}, {.device = d});
        copy_bytes(out.data_ptr(), d, c.data_ptr(), Device::cpu(), std::size_t(4 * m));
        cuda::synchronize();
      });
      rows.push_back(gbps_row(name + " (cuda)", DType::F32, m, t, "host fill + H2D copy", old_t));
      // d2d memcpy reads and writes the bytes: the same write traffic at half the total.
      Row r = gbps_row(name + " (cuda)", DType::F32, m, t, "d2d memcpy (r+w), same bytes", 0);
      r.reference_value = 2.0 * 4.0 * double(m) / memcpy_s / 1e9;
      r.ratio = r.value / r.reference_value;
      rows.push_back(r);
    }
  } else {
    std::printf("bench_factory: no CUDA rows: %s\n", cuda::unavailable_reason().c_str());
  }
  bench::print_table(rows);
  if (!cfg.json.empty() && !bench::write_json(cfg.json, rows)) {
    std::fprintf(stderr, "bench_factory: cannot write %s\n", cfg.json.c_str());
    return 1;
  }
  return 0;
}
