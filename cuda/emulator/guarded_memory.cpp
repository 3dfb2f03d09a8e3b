// Guarded device memory of the CUDA emulator (runtime_state.h; docs/cuda_emulator.md): each
// cudaMalloc is a mapping of its own, its end rounded up to 16 bytes against an inaccessible page
// and another such page in front. A kernel touching either page faults at once, and the SIGSEGV
// handler names the allocation (or a freed one) before handing the fault on; the 0xff bytes
// between the request and the guards are checked at cudaFree.
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>

#include "mixgrad/cuda/emulator/runtime_state.h"

namespace mg_emu::rt {
namespace {

std::size_t page_bytes() {
  static const std::size_t page = std::size_t(sysconf(_SC_PAGESIZE));
  return page;
}

// The last mappings cudaFree returned, so that a fault there is named a use after free.
struct FreedRange {
  uintptr_t begin = 0, end = 0;
  std::size_t bytes = 0;
};
std::array<FreedRange, 64> g_freed;
std::size_t g_freed_next = 0;
struct sigaction g_previous_fault_handler;

// A fault in or next to device memory: say which allocation, then hand the fault to the handler
// that was there before (Catch2's report, or the default core dump) by returning with it restored:
// the access faults again. Runs while the faulting kernel holds g_mutex, so nothing changes the
// allocations meanwhile; snprintf and write are enough (the process ends here).
void on_fault(int, siginfo_t* info, void*) {
  const uintptr_t a = uintptr_t(info->si_addr);
  char msg[400];
  int n = 0;
  for (const auto& [p, al] : g_allocations) {
    if (al.host || a < uintptr_t(al.map) || a >= uintptr_t(al.map) + al.map_bytes) continue;
    n = std::snprintf(msg, sizeof msg,
                      "CUDA emulator: a kernel touched byte %lld of a device allocation of %zu bytes at %p (address %p): out "
                      "of bounds (on a GPU: garbage, another tensor's data or an illegal address)\n",
                      static_cast<long long>(a) - static_cast<long long>(p), al.bytes, reinterpret_cast<void*>(p),
                      info->si_addr);
    break;
  }
  for (std::size_t k = 1; k <= g_freed.size() && n == 0; ++k) {  // the newest first: addresses are reused
    const FreedRange& f = g_freed[(g_freed_next + g_freed.size() - k) % g_freed.size()];
    if (a >= f.begin && a < f.end) {
      n = std::snprintf(msg, sizeof msg,
                        "CUDA emulator: a kernel touched a device allocation of %zu bytes after cudaFree (address %p): a use "
                        "after free\n",
                        f.bytes, info->si_addr);
    }
  }
  if (n > 0) (void)!write(STDERR_FILENO, msg, std::size_t(std::min<int>(n, int(sizeof msg) - 1)));
  sigaction(SIGSEGV, &g_previous_fault_handler, nullptr);
}

// At every cudaMalloc, not once: a test framework that installs its own handler per test case
// and restores the one it found afterwards would otherwise leave ours out.
void install_fault_handler() {
  struct sigaction now {};
  if (sigaction(SIGSEGV, nullptr, &now) != 0) return;
  if ((now.sa_flags & SA_SIGINFO) != 0 && now.sa_sigaction == on_fault) return;
  struct sigaction sa {};
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGSEGV, &sa, &g_previous_fault_handler);
}

}  // namespace

char* map_guarded(std::size_t placed, Allocation& a) {
  const std::size_t page = page_bytes();
  const std::size_t body = (placed + page - 1) / page * page;
  a.map_bytes = body + 2 * page;
  void* m = mmap(nullptr, a.map_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (m == MAP_FAILED) return nullptr;
  a.map = static_cast<char*>(m);
  if (mprotect(a.map, page, PROT_NONE) != 0 || mprotect(a.map + page + body, page, PROT_NONE) != 0) {
    munmap(m, a.map_bytes);
    return nullptr;
  }
  std::memset(a.map + page, 0xff, body);
  install_fault_handler();
  return a.map + page + body - placed;
}

std::string overwritten_guard_bytes(uintptr_t p, const Allocation& a) {
  const char* begin = a.map + page_bytes();
  const char* end = a.map + a.map_bytes - page_bytes();
  const char* start = reinterpret_cast<const char*>(p);
  const auto changed = [](const char* lo, const char* hi) {
    return std::find_if(lo, hi, [](char c) { return static_cast<unsigned char>(c) != 0xff; });
  };
  const char* before = changed(begin, start);
  const char* after = changed(start + a.bytes, end);
  if (before == start && after == end) return "";
  const long long at = static_cast<long long>((before != start ? before : after) - start);
  return "a kernel wrote byte " + std::to_string(at) + " of the device allocation of " + std::to_string(a.bytes) +
         " bytes at " + std::to_string(p) + ", outside it (found at cudaFree; on a GPU it overwrites another tensor)";
}

void unmap_freed(const Allocation& a) {
  munmap(a.map, a.map_bytes);
  g_freed[g_freed_next++ % g_freed.size()] = FreedRange{uintptr_t(a.map), uintptr_t(a.map) + a.map_bytes, a.bytes};
}

}  // namespace mg_emu::rt
