// The pinned-allocator hook of core/pinned_memory.h and Tensor::is_pinned().
// check_pin_memory_available and empty_pinned live in ops/pin_memory.cpp (they run mg::init() first).
#include "mixgrad/core/pinned_memory.h"

#include <atomic>

namespace mg {
namespace {

std::atomic<Allocator*> g_pinned_allocator{nullptr};
std::atomic<PinnedUnavailableFn> g_pinned_reason{nullptr};

}  // namespace

void set_pinned_allocator(Allocator* allocator, PinnedUnavailableFn unavailable_reason) {
  g_pinned_reason.store(unavailable_reason);
  g_pinned_allocator.store(allocator);
}

Allocator* find_pinned_allocator() { return g_pinned_allocator.load(); }

std::string pinned_unavailable_reason() {
  if (find_pinned_allocator() == nullptr) return "mixgrad was built without the CUDA backend";
  const PinnedUnavailableFn reason = g_pinned_reason.load();
  return reason ? reason() : "";
}

bool Tensor::is_pinned() const {
  const Allocator* pinned = find_pinned_allocator();
  const Storage& s = storage();
  return pinned != nullptr && s.device().is_cpu() && s.allocator() == pinned;
}

}  // namespace mg
