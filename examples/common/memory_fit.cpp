#include "examples/common/memory_fit.h"

#include <malloc.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "core/error.h"
#include "core/storage.h"
#include "examples/common/process_memory.h"

namespace mg::example {
namespace {

// The process's peak resident memory during probe(b) above what it held before. Freed memory is
// handed back to the OS first (our cache, then malloc's) and the kernel's peak counter is reset
// (clear_refs 5), so buffers outside mixgrad's allocator (oneDNN's reorders and scratchpads) count.
double peak_of(const std::function<void(int64_t)>& probe, int64_t b) {
  empty_cpu_cache();
  ::malloc_trim(0);
  {
    std::ofstream clear("/proc/self/clear_refs");
    clear << "5";
  }
  const int64_t before = current_rss_bytes();
  probe(b);
  const int64_t peak = peak_rss_bytes();
  if (before < 0 || peak < 0) return -1;
  return double(peak - before);
}

std::string gib(double bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f GiB", bytes / double(1ull << 30));
  return buf;
}

}  // namespace

int64_t available_memory_bytes() {
  if (const char* cap = std::getenv("MG_AVAILABLE_MEMORY")) {
    char* end = nullptr;
    const long long v = std::strtoll(cap, &end, 10);
    MG_CHECK(end && *end == '\0' && v > 0, Error, "MG_AVAILABLE_MEMORY must be a positive number of bytes, got \"", cap, "\"");
    return v;
  }
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemAvailable:") return kib * 1024;
  }
  return -1;
}

MemoryEstimate check_batch_fits(const std::function<void(int64_t)>& probe, int64_t batch_size) {
  constexpr int64_t kSmall = 8, kLarge = 32;
  MemoryEstimate e;
  const double small = peak_of(probe, kSmall);
  const double large = peak_of(probe, kLarge);
  e.bytes_per_sample = std::max(0.0, (large - small) / double(kLarge - kSmall));
  e.base_bytes = std::max(0.0, small - e.bytes_per_sample * kSmall);
  e.predicted_bytes = e.base_bytes + e.bytes_per_sample * double(batch_size);
  e.available_bytes = available_memory_bytes();
  if (e.available_bytes < 0 || small < 0 || large < 0 || e.bytes_per_sample <= 0) return e;
  const double budget = 0.9 * double(e.available_bytes);
  if (kSafetyMargin * e.predicted_bytes > budget) {
    const int64_t fits = int64_t(std::max(0.0, (budget / kSafetyMargin - e.base_bytes) / e.bytes_per_sample));
    MG_THROW(Error, "batch size ", batch_size, " needs about ", gib(kSafetyMargin * e.predicted_bytes),
             " for one training step but ", gib(double(e.available_bytes)), " are available",
             "\n  hint: use --batch-size ", std::max<int64_t>(1, fits), " or less");
  }
  return e;
}

}  // namespace mg::example
