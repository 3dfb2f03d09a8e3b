// The process's memory as the kernel counts it, for the "peak memory" column of the metrics:
// resident set size now (VmRSS) and its peak since the process started (VmHWM), both read from
// /proc/self/status. Host memory only; device memory comes from the CUDA allocator's statistics.
//
//   metrics.write({{"kind", "epoch"}, {"peak_rss", peak_rss_bytes()}});
#pragma once
#include <cstdint>

namespace mg::example {

// Peak resident set size of this process in bytes, or -1 where /proc/self/status is unavailable.
int64_t peak_rss_bytes();
// Current resident set size in bytes, or -1 where /proc/self/status is unavailable.
int64_t current_rss_bytes();

}  // namespace mg::example
