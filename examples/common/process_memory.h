// The process's memory as the kernel counts it, for the "peak memory" column of the metrics:
// resident set size now (VmRSS) and its peak since the process started (VmHWM), both read from
// /proc/self/status. Host memory only; device memory comes from the CUDA allocator's statistics.
//
//   metrics.write({{"kind", "epoch"}, {"peak_rss", peak_rss_bytes()}});
#pragma once
#include <cstdint>

namespace mg::example {

// Peak resident set size of this process since it started, in bytes, or -1 where
// /proc/self/status is unavailable: the kernel's counter (VmHWM), or the peak it had before a
// reset_peak_rss() when that was higher.
int64_t peak_rss_bytes();
// Restarts the kernel's peak counter (clear_refs 5) to measure one part of the run
// (peak_rss_since_reset_bytes), keeping the peak so far for peak_rss_bytes.
void reset_peak_rss();
// The kernel's peak counter: the peak since the last reset_peak_rss() (or the start), or -1.
int64_t peak_rss_since_reset_bytes();
// Current resident set size in bytes, or -1 where /proc/self/status is unavailable.
int64_t current_rss_bytes();

}  // namespace mg::example
