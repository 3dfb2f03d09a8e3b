#include "examples/common/process_memory.h"

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <cstring>

namespace mg::example {

namespace {

// The "<key>:   123456 kB" line of /proc/self/status, in bytes; -1 when absent.
int64_t status_kib_field(const char* key) {
  std::FILE* f = std::fopen("/proc/self/status", "re");
  if (f == nullptr) return -1;
  const std::size_t key_len = std::strlen(key);
  char line[256];
  int64_t bytes = -1;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    long long kib = 0;
    if (std::strncmp(line, key, key_len) == 0 && line[key_len] == ':' &&
        std::sscanf(line + key_len + 1, "%lld", &kib) == 1) {
      bytes = int64_t(kib) * 1024;
      break;
    }
  }
  std::fclose(f);
  return bytes;
}

// The highest VmHWM seen before a reset: the process's peak lives on after the counter restarts.
std::atomic<int64_t> g_peak_before_resets{-1};

}  // namespace

int64_t peak_rss_since_reset_bytes() { return status_kib_field("VmHWM"); }

int64_t peak_rss_bytes() { return std::max(peak_rss_since_reset_bytes(), g_peak_before_resets.load()); }

void reset_peak_rss() {
  const int64_t peak = peak_rss_bytes();
  if (peak > g_peak_before_resets.load()) g_peak_before_resets.store(peak);
  std::ofstream clear("/proc/self/clear_refs");
  clear << "5";
}

int64_t current_rss_bytes() { return status_kib_field("VmRSS"); }

}  // namespace mg::example
