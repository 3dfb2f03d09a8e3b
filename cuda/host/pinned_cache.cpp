// The caching pinned-host allocator's policy (pinned_cache.h): exact-size free lists of
// power-of-two blocks, events per copy on each block, pending blocks freed as their events complete.
#include "mixgrad/cuda/host/pinned_cache.h"

#include <algorithm>

#include "mixgrad/core/error.h"

namespace mg::cuda {

PinnedHostCache::PinnedHostCache(HostMemory& memory) : memory_(memory) {}

PinnedHostCache::~PinnedHostCache() {
  try {
    std::lock_guard<std::mutex> lock(mutex_);
    process_pending();
    release_free_blocks();
  } catch (...) {  // the runtime may be gone at exit; the system reclaims the memory anyway
  }
}

std::size_t PinnedHostCache::round_size(std::size_t bytes) {
  constexpr std::size_t kMax = std::size_t(1) << 62;
  MG_CHECK(bytes <= kMax, OutOfMemoryError, "pin_memory: cannot allocate ", bytes,
           " bytes of pinned host memory (more than 2^62)");
  std::size_t size = kMinBlockSize;
  while (size < bytes) size <<= 1;
  return size;
}

bool PinnedHostCache::collect(Block& b) {
  // Every event is queried before anything changes: a query that throws (a sticky CUDA fault)
  // leaves the block's uses as they were, none of them destroyed yet.
  std::vector<Use> left, completed;
  for (const Use& u : b.uses) (memory_.event_completed(u.event) ? completed : left).push_back(u);
  b.uses = std::move(left);
  for (const Use& u : completed) {
    --stats_.num_live_events;
    memory_.destroy_event(u.event);
  }
  return b.uses.empty();
}

void PinnedHostCache::process_pending() {
  auto it = pending_.begin();
  while (it != pending_.end()) {
    Block& b = blocks_.at(*it);
    if (collect(b)) {
      b.state = State::Free;
      stats_.pending_bytes -= b.size;
      stats_.cached_bytes += b.size;
      free_.emplace(b.size, *it);
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
}

void PinnedHostCache::release_free_blocks() {
  // Each entry leaves free_ right after its raw_free: when one throws, the blocks already freed are
  // gone from every list and the rest stay cached, so the statistics and lists stay consistent.
  while (!free_.empty()) {
    const auto [size, addr] = *free_.begin();
    memory_.raw_free(reinterpret_cast<void*>(addr));
    free_.erase(free_.begin());
    blocks_.erase(addr);
    stats_.cached_bytes -= size;
    stats_.reserved_bytes -= size;
    ++stats_.num_raw_frees;
  }
}

void* PinnedHostCache::allocate(std::size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  const std::size_t size = round_size(bytes);
  if (memory_.can_query_events()) process_pending();
  std::uintptr_t addr = 0;
  auto it = free_.find(size);
  if (it != free_.end()) {
    addr = it->second;
    free_.erase(it);
    stats_.cached_bytes -= size;
    ++stats_.num_reuses;
  } else {
    void* p = memory_.raw_alloc(size);
    if (p == nullptr && !free_.empty() && memory_.can_query_events()) {  // give the cache back and retry once
      release_free_blocks();
      p = memory_.raw_alloc(size);
    }
    if (p == nullptr) {
      ++stats_.num_ooms;
      MG_THROW(OutOfMemoryError, "pin_memory: out of pinned host memory: tried to allocate ",
               format_bytes(size), " (", bytes, " bytes requested); pinned now ",
               format_bytes(stats_.reserved_bytes), " (in use ", format_bytes(stats_.allocated_bytes),
               ", waiting for copies ", format_bytes(stats_.pending_bytes), ")",
               "\n  hint: pin fewer or smaller batches, or raise the locked-memory limit (ulimit -l)");
    }
    addr = reinterpret_cast<std::uintptr_t>(p);
    blocks_[addr] = Block{.size = size};
    stats_.reserved_bytes += size;
    ++stats_.num_raw_allocs;
  }
  blocks_.at(addr).state = State::Live;
  stats_.allocated_bytes += size;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  ++stats_.num_allocs;
  return reinterpret_cast<void*>(addr);
}

void PinnedHostCache::deallocate(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  auto it = blocks_.find(addr);
  MG_CHECK(it != blocks_.end() && it->second.state == State::Live, Error,
           "PinnedHostCache: deallocate(", p, ") of ",
           it == blocks_.end() ? "a pointer that is not a pinned block of this cache"
                               : "a block that was already freed");
  Block& b = it->second;
  const bool done = memory_.can_query_events() && collect(b);  // may throw: nothing counted yet
  stats_.allocated_bytes -= b.size;
  ++stats_.num_frees;
  if (done) {
    b.state = State::Free;
    stats_.cached_bytes += b.size;
    free_.emplace(b.size, addr);
  } else {
    b.state = State::Pending;
    stats_.pending_bytes += b.size;
    pending_.push_back(addr);
  }
}

const std::pair<const std::uintptr_t, PinnedHostCache::Block>* PinnedHostCache::find_live(const void* p) const {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  auto it = blocks_.upper_bound(addr);
  if (it == blocks_.begin()) return nullptr;
  --it;
  if (addr >= it->first + it->second.size || it->second.state != State::Live) return nullptr;
  return &*it;
}

bool PinnedHostCache::record_use(const void* p, int device, StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto* live = find_live(p);
  if (live == nullptr) return false;
  Block& b = blocks_.at(live->first);
  const bool query = memory_.can_query_events();
  if (query) collect(b);
  const EventHandle event = memory_.record_event(device, stream);
  ++stats_.num_live_events;
  for (Use& u : b.uses) {
    if (u.device == device && u.stream == stream) {  // the new event completes after the old one
      memory_.destroy_event(u.event);
      --stats_.num_live_events;
      u.event = event;
      return true;
    }
  }
  b.uses.push_back(Use{device, stream, event});
  if (query) process_pending();
  return true;
}

bool PinnedHostCache::contains(const void* p) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return find_live(p) != nullptr;
}

void PinnedHostCache::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  // A no-op on a thread that captures a CUDA graph, as the device allocator's: cudaFreeHost there
  // would invalidate the capture.
  if (!memory_.can_query_events()) return;
  process_pending();
  release_free_blocks();
}

PinnedCacheStats PinnedHostCache::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void PinnedHostCache::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
}

}  // namespace mg::cuda
