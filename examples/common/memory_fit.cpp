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

// The memory probe(b) needed: the larger of the process's peak resident memory above what it held
// before and the peak of mixgrad's own allocator. Resident memory counts buffers outside our
// allocator (oneDNN's reorders and scratchpads); to see them, freed memory is handed back to the OS
// first (our cache, then malloc's) and the kernel's peak counter is reset (clear_refs 5). It can
// still read low when the process reuses memory it kept, so the allocator's exact count is the floor.
double peak_of(const std::function<void(int64_t)>& probe, int64_t b) {
  empty_cpu_cache();
  ::malloc_trim(0);
  reset_peak_rss();  // the run's peak so far is kept for the reported peak memory
  const int64_t rss_before = current_rss_bytes();
  const std::size_t allocated_before = cpu_memory_stats().allocated;
  reset_cpu_peak_memory();
  probe(b);
  const double allocator = double(cpu_memory_stats().peak_allocated) - double(allocated_before);
  const int64_t rss_peak = peak_rss_since_reset_bytes();
  const double rss = rss_before >= 0 && rss_peak >= 0 ? double(rss_peak - rss_before) : 0.0;
  return std::max(allocator, rss);
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

// The processes mixgrad-run started on this machine (LOCAL_WORLD_SIZE), which share its memory.
int64_t ranks_sharing_memory() {
  const char* v = std::getenv("LOCAL_WORLD_SIZE");
  if (v == nullptr || *v == '\0') return 1;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  return end && *end == '\0' && n >= 1 ? int64_t(n) : 1;
}

MemoryEstimate check_batch_fits(const std::function<void(int64_t)>& probe, int64_t batch_size,
                                int64_t flag_batch_size) {
  if (flag_batch_size <= 0) flag_batch_size = batch_size;
  // Probes of 8 and 32 samples, or for a smaller batch of about a quarter of it and the batch
  // itself (never more than the run will use: a large model at --batch-size 2 is not probed at 32).
  const int64_t kSmall = std::min<int64_t>(8, std::max<int64_t>(1, batch_size / 4));
  const int64_t kLarge = std::min<int64_t>(32, std::max(batch_size, kSmall + 1));
  MemoryEstimate e;
  // A first probe pays one-time costs (oneDNN's JIT kernels and primitive caches, autocast's
  // weight casts, lazily loaded libraries) that would otherwise make the small probe look larger
  // than the large one.
  peak_of(probe, kSmall);
  const double small = peak_of(probe, kSmall);
  const double large = peak_of(probe, kLarge);
  e.bytes_per_sample = std::max(0.0, (large - small) / double(kLarge - kSmall));
  e.base_bytes = std::max(0.0, small - e.bytes_per_sample * kSmall);
  e.predicted_bytes = e.base_bytes + e.bytes_per_sample * double(batch_size);
  e.available_bytes = available_memory_bytes();
  e.ranks_here = ranks_sharing_memory();
  if (e.available_bytes < 0 || e.bytes_per_sample <= 0) return e;
  const double budget = 0.9 * double(e.available_bytes) / double(e.ranks_here);
  if (kSafetyMargin * e.predicted_bytes > budget) {
    const int64_t fits = int64_t(std::max(0.0, (budget / kSafetyMargin - e.base_bytes) / e.bytes_per_sample));
    // In --batch-size's units: this process's share scaled to the whole step.
    const int64_t fits_flag = int64_t(double(fits) * double(flag_batch_size) / double(batch_size));
    const std::string share = e.ranks_here > 1 || flag_batch_size != batch_size
                                  ? str_cat(" (", batch_size, " samples on this process)")
                                  : std::string();
    const std::string where = e.ranks_here > 1 ? str_cat(" are available to be shared by the ", e.ranks_here,
                                                         " processes on this machine (LOCAL_WORLD_SIZE)")
                                               : std::string(" are available");
    MG_THROW(Error, "batch size ", flag_batch_size, share, " needs about ", gib(kSafetyMargin * e.predicted_bytes),
             " per process for one training step but ", gib(double(e.available_bytes)), where,
             fits_flag >= 1 ? str_cat("\n  hint: use --batch-size ", fits_flag, " or less")
                            : std::string("\n  hint: even a batch of 1 does not fit; use a smaller model, fewer "
                                          "processes or free memory"));
  }
  return e;
}

}  // namespace mg::example
