#include "examples/common/process_memory.h"

#include <cstdio>
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

}  // namespace

int64_t peak_rss_bytes() { return status_kib_field("VmHWM"); }

int64_t current_rss_bytes() { return status_kib_field("VmRSS"); }

}  // namespace mg::example
