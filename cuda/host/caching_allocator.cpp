// The caching device allocator's policy (see the header for the rules). Plain C++: no CUDA
// header; every device operation goes through DeviceMemory.
// Decision: statistics that describe the pools (cached bytes, block counts, largest free block)
// are computed by walking the pools in stats(), so the hot paths keep only plain counters.
#include "mixgrad/cuda/host/caching_allocator.h"

#include <algorithm>
#include <cstdio>
#include <limits>

#include "mixgrad/core/error.h"

namespace mg::cuda {

namespace {
// Requests above this cannot be rounded without overflow; they are out of memory at once.
constexpr std::size_t kMaxRequest = std::numeric_limits<std::size_t>::max() / 4;

std::size_t round_up(std::size_t n, std::size_t multiple) {
  return (n + multiple - 1) / multiple * multiple;
}
}  // namespace

std::string format_bytes(std::size_t bytes) {
  constexpr double kKiB = 1024.0;
  char buf[48];
  const double b = static_cast<double>(bytes);
  if (bytes < 1024) {
    std::snprintf(buf, sizeof buf, "%zu B", bytes);
  } else if (b < kKiB * kKiB) {
    std::snprintf(buf, sizeof buf, "%.2f KiB", b / kKiB);
  } else if (b < kKiB * kKiB * kKiB) {
    std::snprintf(buf, sizeof buf, "%.2f MiB", b / (kKiB * kKiB));
  } else {
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / (kKiB * kKiB * kKiB));
  }
  return buf;
}

bool CachingAllocator::BlockLess::operator()(const Block* a, const Block* b) const {
  if (a->pool != b->pool) return a->pool < b->pool;
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return reinterpret_cast<std::uintptr_t>(a->ptr) < reinterpret_cast<std::uintptr_t>(b->ptr);
}

CachingAllocator::CachingAllocator(DeviceMemory& memory, int device, bool caching)
    : memory_(memory), device_(device), caching_(caching) {}

CachingAllocator::~CachingAllocator() {
  try {
    if (!pending_.empty()) {
      memory_.synchronize();
      process_events();
    }
    release_free_segments();
  } catch (...) {
    // A destructor must not throw; what could not be returned stays with the device.
  }
  for (const PendingEvent& pe : pending_) {
    try {
      memory_.destroy_event(pe.event);
    } catch (...) {
    }
  }
  // Segments that still hold live blocks are left to the device; only the bookkeeping goes.
  for (auto& [base, seg] : segments_) {
    for (Block* b = seg.head; b != nullptr;) {
      Block* next = b->next;
      delete b;
      b = next;
    }
  }
}

std::size_t CachingAllocator::round_size(std::size_t bytes) {
  return bytes < kMinBlockSize ? kMinBlockSize : round_up(bytes, kMinBlockSize);
}

std::size_t CachingAllocator::segment_size(std::size_t rounded) {
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return round_up(rounded, kRoundLarge);
}

CachingAllocator::Block* CachingAllocator::find_free_block(bool small, PoolId pool_id, StreamId stream,
                                                           std::size_t size) {
  Pool& pool = small ? small_pool_ : large_pool_;
  Block key;
  key.pool = pool_id;
  key.stream = stream;
  key.size = size;
  key.ptr = nullptr;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->pool != pool_id || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  pool.erase(it);
  return b;
}

CachingAllocator::Block* CachingAllocator::new_segment(bool small, PoolId pool, StreamId stream,
                                                       std::size_t size, std::size_t requested) {
  // Without the cache a segment is exactly the request, so nothing follows the tensor's last byte.
  const std::size_t bytes = caching_ ? segment_size(size) : std::max<std::size_t>(requested, 1);
  void* p = memory_.raw_alloc(bytes);
  if (p == nullptr && !capturing_.empty()) {
    // No synchronisation and no cudaFree may run during a capture: report at once.
    ++stats_.num_ooms;
    throw_oom(requested, bytes);
  }
  if (p == nullptr) {
    ++stats_.num_alloc_retries;
    if (!pending_.empty()) {
      // Blocks waiting on other streams: after a device synchronisation they are free, and one
      // of them may fit.
      memory_.synchronize();
      process_events();
      if (caching_) {
        if (Block* b = find_free_block(small, pool, stream, size)) return b;
      }
    }
    release_free_segments();
    p = memory_.raw_alloc(bytes);
    if (p == nullptr) {
      ++stats_.num_ooms;
      throw_oom(requested, bytes);
    }
  }
  auto* b = new Block;
  b->ptr = static_cast<char*>(p);
  b->size = bytes;
  b->pool = pool;
  b->stream = stream;
  b->small = small;
  segments_[reinterpret_cast<std::uintptr_t>(p)] = Segment{b, bytes};
  ++stats_.num_raw_allocs;
  ++stats_.num_segments;
  stats_.reserved_bytes += bytes;
  stats_.peak_reserved_bytes = std::max(stats_.peak_reserved_bytes, stats_.reserved_bytes);
  return b;
}

// Splits the free block `b` (already out of its pool) to `size` when the policy says so and
// hands it out.
void* CachingAllocator::take_block(Block* b, std::size_t size, std::size_t requested) {
  const std::size_t remainder = b->size - size;
  const bool split = b->small ? remainder >= kMinBlockSize : remainder > kMaxSplitSurplus;
  if (split) {
    auto* rest = new Block;
    rest->ptr = b->ptr + size;
    rest->size = remainder;
    rest->pool = b->pool;
    rest->stream = b->stream;
    rest->small = b->small;
    rest->prev = b;
    rest->next = b->next;
    if (b->next != nullptr) b->next->prev = rest;
    b->next = rest;
    b->size = size;
    pool_of(rest).insert(rest);
  }
  b->state = State::Allocated;
  b->requested = requested;
  live_[b->ptr] = b;
  ++stats_.num_allocs;
  stats_.allocated_bytes += b->size;
  stats_.requested_bytes += requested;
  stats_.peak_allocated_bytes = std::max(stats_.peak_allocated_bytes, stats_.allocated_bytes);
  return b->ptr;
}

void* CachingAllocator::allocate(std::size_t bytes, StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (capturing_.empty()) process_events();  // cudaEventQuery may not run during a capture
  if (bytes > kMaxRequest) {
    ++stats_.num_ooms;
    throw_oom(bytes, bytes);
  }
  const std::size_t size = round_size(bytes);
  const bool small = size <= kSmallSize;
  const auto capture = capturing_.find(stream);
  PoolId pool = capture == capturing_.end() ? 0 : capture->second;
  if (pool == 0 && !capturing_.empty() && memory_.stream_is_capturing(stream)) {
    // A side stream forked into the capture: the graph writes this block at every replay, so it
    // belongs to the graph's pool (from the general pool it could go back there while the graph lives).
    MG_CHECK(capturing_.size() == 1, Error, "CachingAllocator::allocate on cuda:", device_, ": stream ",
             reinterpret_cast<void*>(stream), " joined a CUDA graph capture but ", capturing_.size(),
             " captures are in progress, so its private pool is ambiguous\n  hint: capture one graph at a time, or "
             "allocate on the capturing stream");
    pool = capturing_.begin()->second;
  }
  Block* b = caching_ ? find_free_block(small, pool, stream, size) : nullptr;
  if (b == nullptr) b = new_segment(small, pool, stream, size, bytes);
  return take_block(b, caching_ ? size : b->size, bytes);
}

// Marks `b` free, merges it with free neighbours and puts the result in its pool.
void CachingAllocator::free_block(Block* b) {
  b->state = State::Free;
  b->requested = 0;
  b->stream_uses.clear();
  Pool& pool = pool_of(b);
  if (Block* prev = b->prev; prev != nullptr && prev->state == State::Free) {
    pool.erase(prev);
    prev->size += b->size;
    prev->next = b->next;
    if (b->next != nullptr) b->next->prev = prev;
    delete b;
    b = prev;
  }
  if (Block* next = b->next; next != nullptr && next->state == State::Free) {
    pool.erase(next);
    b->size += next->size;
    b->next = next->next;
    if (next->next != nullptr) next->next->prev = b;
    delete next;
  }
  pool.insert(b);
  // Without the cache the segment goes back now (not during a capture: cudaFree may not run).
  if (!caching_ && capturing_.empty() && b->pool == 0 && b->prev == nullptr && b->next == nullptr) {
    release_segment(b);
  }
}

void CachingAllocator::deallocate(void* p) {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(p);
  if (it == live_.end()) throw_bad_pointer("deallocate", p);
  Block* b = it->second;
  if (!capturing_.empty()) {
    live_.erase(it);
    ++stats_.num_frees;
    stats_.allocated_bytes -= b->size;
    stats_.requested_bytes -= b->requested;
    b->requested = 0;
    if (b->pool != 0 && b->stream_uses.empty()) {
      // Reused only by its own pool's allocations on its stream, which the graph orders.
      free_block(b);
      return;
    }
    if (b->pool != 0) {
      // Used on another stream too (record_stream): a captured side stream runs concurrently
      // with the capture stream's later nodes until they join, so a reuse could overwrite what it
      // still reads at every replay. Held until the pool is released (PyTorch defers such blocks
      // until the capture ends).
      b->state = State::Held;
      held_.push_back(HeldBlock{b, {b->pool}});
      return;
    }
    // The graph being captured may read this block at every replay: hold it for the graph.
    b->state = State::Held;
    HeldBlock h{b, {}};
    for (const auto& [stream, pool] : capturing_) h.pools.push_back(pool);
    held_.push_back(std::move(h));
    return;
  }
  // Record the events first: if recording throws, the block is still live and nothing changed.
  std::vector<EventHandle> events;
  events.reserve(b->stream_uses.size());
  try {
    for (StreamId s : b->stream_uses) events.push_back(memory_.record_event(s));
  } catch (...) {
    for (EventHandle e : events) memory_.destroy_event(e);
    throw;
  }
  live_.erase(it);
  ++stats_.num_frees;
  stats_.allocated_bytes -= b->size;
  stats_.requested_bytes -= b->requested;
  if (events.empty()) {
    free_block(b);
    return;
  }
  b->state = State::Pending;
  b->stream_uses.clear();
  b->event_count = static_cast<int>(events.size());
  for (EventHandle e : events) pending_.push_back({e, b});
}

void CachingAllocator::record_stream(void* p, StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(p);
  if (it == live_.end()) throw_bad_pointer("record_stream", p);
  Block* b = it->second;
  if (stream == b->stream) return;
  if (std::find(b->stream_uses.begin(), b->stream_uses.end(), stream) == b->stream_uses.end()) {
    b->stream_uses.push_back(stream);
  }
}

// Collects completed events; a block whose events have all completed goes to its pool. If the
// device throws, the events not yet looked at stay pending.
void CachingAllocator::process_events() {
  std::size_t kept = 0;
  std::size_t i = 0;
  try {
    for (; i < pending_.size(); ++i) {
      const PendingEvent pe = pending_[i];
      if (!memory_.event_completed(pe.event)) {
        pending_[kept++] = pe;
        continue;
      }
      memory_.destroy_event(pe.event);
      if (--pe.block->event_count == 0) free_block(pe.block);
    }
  } catch (...) {
    for (; i < pending_.size(); ++i) pending_[kept++] = pending_[i];
    pending_.resize(kept);
    throw;
  }
  pending_.resize(kept);
}

// Returns every general-pool segment that is one free block (all its blocks free and merged) to
// the device; private pools keep theirs while their graph lives.
void CachingAllocator::release_free_segments() {
  for (auto it = segments_.begin(); it != segments_.end();) {
    Block* head = it->second.head;
    ++it;
    if (head->state == State::Free && head->next == nullptr && head->pool == 0) release_segment(head);
  }
}

void CachingAllocator::release_segment(Block* head) {
  const auto it = segments_.find(reinterpret_cast<std::uintptr_t>(head->ptr));
  memory_.raw_free(head->ptr);
  pool_of(head).erase(head);
  ++stats_.num_raw_frees;
  --stats_.num_segments;
  stats_.reserved_bytes -= it->second.size;
  delete head;
  segments_.erase(it);
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!capturing_.empty()) return;
  process_events();
  release_free_segments();
}

void CachingAllocator::begin_capture(PoolId pool, StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  MG_CHECK(pool != 0, Error, "CachingAllocator::begin_capture: pool 0 is the general pool, not a graph's");
  const auto it = capturing_.find(stream);
  MG_CHECK(it == capturing_.end(), Error, "CachingAllocator::begin_capture on cuda:", device_, ": stream ",
           reinterpret_cast<void*>(stream), " is already capturing into pool ", it == capturing_.end() ? 0 : it->second,
           "\n  hint: end that capture first, or capture on another stream");
  MG_CHECK(released_pools_.count(pool) == 0, Error, "CachingAllocator::begin_capture on cuda:", device_, ": pool ",
           pool, " was released; its blocks belong to the general pools now\n  hint: capture into a new pool id");
  capturing_[stream] = pool;
  pools_.insert(pool);
}

void CachingAllocator::end_capture(StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  MG_CHECK(capturing_.erase(stream) == 1, Error, "CachingAllocator::end_capture on cuda:", device_, ": stream ",
           reinterpret_cast<void*>(stream), " is not capturing");
}

bool CachingAllocator::capture_in_progress() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return !capturing_.empty();
}

void CachingAllocator::free_after(Block* b, const std::vector<StreamId>& streams) {
  std::vector<EventHandle> events;
  for (StreamId s : streams) {
    if (s != b->stream) events.push_back(memory_.record_event(s));
  }
  if (events.empty()) {
    free_block(b);
    return;
  }
  b->state = State::Pending;
  b->event_count = static_cast<int>(events.size());
  for (EventHandle e : events) pending_.push_back({e, b});
}

void CachingAllocator::release_pool(PoolId pool, const std::vector<StreamId>& replay_streams) {
  std::lock_guard<std::mutex> lock(mutex_);
  MG_CHECK(pools_.count(pool) == 1, Error, "CachingAllocator::release_pool on cuda:", device_, ": no private pool ", pool);
  for (const auto& [stream, p] : capturing_) {
    MG_CHECK(p != pool, Error, "CachingAllocator::release_pool on cuda:", device_, ": pool ", pool,
             " is still capturing on stream ", reinterpret_cast<void*>(stream));
  }
  pools_.erase(pool);
  released_pools_.insert(pool);
  // The pool's segments become general segments: free blocks follow the last replay, live blocks
  // wait for it when they are freed.
  std::vector<Block*> to_free, pending;
  for (auto& [base, seg] : segments_) {
    if (seg.head->pool != pool) continue;
    for (Block* b = seg.head; b != nullptr; b = b->next) {
      if (b->state == State::Free) {
        pool_of(b).erase(b);  // under its old key
        to_free.push_back(b);
      } else if (b->state == State::Pending) {
        pending.push_back(b);  // freed, waiting for other streams (record_stream): and for the replays
      } else if (b->state == State::Allocated) {
        for (StreamId s : replay_streams) {
          if (s != b->stream && std::find(b->stream_uses.begin(), b->stream_uses.end(), s) == b->stream_uses.end()) {
            b->stream_uses.push_back(s);
          }
        }
      }
      b->pool = 0;
    }
  }
  // A pending block becomes free when its events complete, in the general pool of its stream: it
  // must wait for the replays too, or another allocation on that stream could take it while a
  // replay still writes it.
  for (Block* b : pending) {
    for (StreamId s : replay_streams) {
      if (s == b->stream) continue;
      pending_.push_back({memory_.record_event(s), b});
      ++b->event_count;
    }
  }
  // Free blocks of a pool are never adjacent (they merged), so each goes back as it is.
  for (Block* b : to_free) {
    b->state = State::Allocated;  // free_after -> free_block marks it free (and merges nothing)
    free_after(b, replay_streams);
  }
  std::vector<HeldBlock> kept;
  for (HeldBlock& h : held_) {
    const auto was = h.pools.size();
    h.pools.erase(std::remove(h.pools.begin(), h.pools.end(), pool), h.pools.end());
    if (!h.pools.empty()) {
      if (h.pools.size() != was) {
        for (StreamId s : replay_streams) {
          if (std::find(h.released_streams.begin(), h.released_streams.end(), s) == h.released_streams.end()) {
            h.released_streams.push_back(s);
          }
        }
      }
      kept.push_back(std::move(h));
      continue;
    }
    std::vector<StreamId> streams = replay_streams;
    for (StreamId s : h.released_streams) {
      if (std::find(streams.begin(), streams.end(), s) == streams.end()) streams.push_back(s);
    }
    for (StreamId s : h.block->stream_uses) streams.push_back(s);
    h.block->stream_uses.clear();
    free_after(h.block, streams);
  }
  held_ = std::move(kept);
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  AllocatorStats s = stats_;
  s.cached_bytes = 0;
  s.largest_free_block = 0;
  s.num_cached_blocks = small_pool_.size() + large_pool_.size();
  for (const Pool* pool : {&small_pool_, &large_pool_}) {
    for (const Block* b : *pool) {
      s.cached_bytes += b->size;
      s.largest_free_block = std::max(s.largest_free_block, b->size);
    }
  }
  s.pending_bytes = 0;
  s.num_pending_blocks = 0;
  s.graph_pool_bytes = 0;
  s.graph_held_bytes = 0;
  s.num_graph_pools = pools_.size();
  for (const auto& [base, seg] : segments_) {
    if (seg.head->pool != 0) s.graph_pool_bytes += seg.size;
    for (const Block* b = seg.head; b != nullptr; b = b->next) {
      if (b->state == State::Pending) {
        s.pending_bytes += b->size;
        ++s.num_pending_blocks;
      }
      if (b->state == State::Held) s.graph_held_bytes += b->size;
    }
  }
  return s;
}

void CachingAllocator::reset_peak() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.peak_allocated_bytes = stats_.allocated_bytes;
  stats_.peak_reserved_bytes = stats_.reserved_bytes;
}

void CachingAllocator::throw_oom(std::size_t requested, std::size_t segment) {
  std::size_t largest_free = 0;
  for (const Pool* pool : {&small_pool_, &large_pool_}) {
    for (const Block* b : *pool) largest_free = std::max(largest_free, b->size);
  }
  const AllocatorStats& s = stats_;
  const std::size_t cached_free = s.reserved_bytes - s.allocated_bytes;
  std::string msg = str_cat("CUDA out of memory on cuda:", device_, ": tried to allocate ",
                            format_bytes(requested));
  if (segment != requested) msg += str_cat(" (a new segment of ", format_bytes(segment), ")");
  msg += str_cat("; allocated ", format_bytes(s.allocated_bytes), ", reserved ",
                 format_bytes(s.reserved_bytes), " (cached free ", format_bytes(cached_free),
                 ", largest free block ", format_bytes(largest_free), ") in ", s.num_segments,
                 s.num_segments == 1 ? " segment" : " segments", "; peak allocated ",
                 format_bytes(s.peak_allocated_bytes), ", peak reserved ",
                 format_bytes(s.peak_reserved_bytes),
                 "\n  hint: reduce the batch size, free tensors you no longer need, or use mixed "
                 "precision (f16/bf16 activations take half the memory); a large cached free "
                 "figure is fragmentation: call empty_cache() between phases that allocate "
                 "different sizes");
  throw OutOfMemoryError(msg);
}

void CachingAllocator::throw_bad_pointer(const char* fn, void* p) const {
  const auto addr = reinterpret_cast<std::uintptr_t>(p);
  auto it = segments_.upper_bound(addr);
  if (it != segments_.begin()) {
    --it;
    if (addr < it->first + it->second.size) {
      for (const Block* b = it->second.head; b != nullptr; b = b->next) {
        if (b->ptr == p) {
          MG_THROW(Error, "CachingAllocator: ", fn, "(", p, ") on cuda:", device_,
                   ": the block was already freed (a second free of the same pointer)");
        }
      }
      MG_THROW(Error, "CachingAllocator: ", fn, "(", p, ") on cuda:", device_,
               ": the pointer lies inside a segment of this allocator but is not the start of "
               "a live block (an offset into an allocation?)");
    }
  }
  MG_THROW(Error, "CachingAllocator: ", fn, "(", p, ") on cuda:", device_,
           ": the pointer was not allocated by this allocator");
}

}  // namespace mg::cuda
