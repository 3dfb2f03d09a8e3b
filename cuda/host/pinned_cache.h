// The caching pinned-host allocator's policy, as plain host code over a raw interface (HostMemory):
// the CUDA backend implements it with cudaHostAlloc/cudaFreeHost/cudaEvent* (cuda/pinned_allocator.cpp),
// the tests with malloc and hand-completed events (tests/cuda/fake_host_memory.h), so the policy is
// tested on every machine.
// Decision (after PyTorch's CachingHostAllocator): page-locking memory is expensive (cudaHostAlloc
// maps and locks every page, milliseconds per MiB), so freed blocks are kept and reused; and since
// an asynchronous copy may still be reading or writing a block when its tensor dies, every such
// copy records an event on the block (record_use), and a freed block is reused only once all its
// events have completed.
//
//   mg::cuda::PinnedHostCache cache(host_memory);
//   void* p = cache.allocate(1 << 20);          // a 1 MiB pinned block
//   /* cudaMemcpyAsync(dev, p, ..., stream) */ cache.record_use(p, device, stream);
//   cache.deallocate(p);                         // pending until the copy's event completes
//
// Policy:
// - A request is rounded up to a power of two, at least kMinBlockSize (512) bytes; allocate(0)
//   returns a unique 512-byte block that must be deallocated. Blocks are never split or merged:
//   a request takes a cached free block of exactly its rounded size (pinned buffers repeat their
//   sizes batch after batch, and rounding to powers of two bounds the waste at 2x).
// - record_use(p, device, stream) accepts any pointer inside a live block (a view's data) and
//   records an event on `stream` after the copy was queued. A block keeps at most one event per
//   (device, stream): a newer event on the same stream completes after the older one (stream
//   order), so the older is dropped. It returns false, recording nothing, for memory that is not
//   a live block of this cache (pageable memory), which is how the copy learns whether it may run
//   asynchronously.
// - deallocate() of a block whose events have all completed makes it free at once; otherwise it is
//   pending, and becomes free when its last event completes. Events are polled (never waited on)
//   at each allocate(), record_use() and empty_cache().
// - Out of memory (raw_alloc returns nullptr): release every free cached block and call
//   raw_alloc once more; if that fails too, throw mg::OutOfMemoryError naming the request and the
//   statistics.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <vector>

#include "mixgrad/cuda/host/caching_allocator.h"  // StreamId, EventHandle, format_bytes

namespace mg::cuda {

// The raw operations the pinned cache needs. Failures other than out-of-memory throw (e.g.
// mg::CudaError); the cache's state is unchanged by a throw.
class HostMemory {
 public:
  virtual ~HostMemory() = default;
  // `bytes` of page-locked host memory, or nullptr when the system cannot provide them.
  virtual void* raw_alloc(std::size_t bytes) = 0;
  virtual void raw_free(void* p) = 0;
  // An event recorded now on `stream` of `device`: it completes when the work queued there so far does.
  virtual EventHandle record_event(int device, StreamId stream) = 0;
  // True once the event has completed; never blocks.
  virtual bool event_completed(EventHandle event) = 0;
  virtual void destroy_event(EventHandle event) = 0;
  // False while the calling thread captures a CUDA graph, where cudaEventQuery is refused (it
  // would invalidate the capture): the cache then leaves freed blocks pending and reuses none.
  virtual bool can_query_events() { return true; }
};

// The cache's statistics (rounded block sizes).
struct PinnedCacheStats {
  std::size_t allocated_bytes = 0;       // bytes of blocks handed out and not yet deallocated
  std::size_t cached_bytes = 0;          // bytes of free blocks (reusable now)
  std::size_t pending_bytes = 0;         // bytes of freed blocks waiting on copy events
  std::size_t reserved_bytes = 0;        // all of the above: bytes obtained by raw_alloc and held
  std::size_t peak_allocated_bytes = 0;  // max of allocated_bytes since construction/reset_peak
  std::size_t num_live_events = 0;       // events recorded on blocks and not yet collected
  std::size_t num_allocs = 0;            // successful allocate() calls
  std::size_t num_reuses = 0;            // of which served from the cache
  std::size_t num_frees = 0;             // successful deallocate() calls
  std::size_t num_raw_allocs = 0;        // successful raw_alloc calls (cudaHostAlloc)
  std::size_t num_raw_frees = 0;         // raw_free calls (cudaFreeHost)
  std::size_t num_ooms = 0;              // allocate() calls that threw OutOfMemoryError
};

// Thread-safe: every public function takes one mutex (the HostMemory calls are made under it).
class PinnedHostCache {
 public:
  static constexpr std::size_t kMinBlockSize = 512;

  // `memory` must outlive the cache.
  explicit PinnedHostCache(HostMemory& memory);
  // Returns the free blocks; blocks still live or pending are left alone (their memory may be in
  // use). Never throws.
  ~PinnedHostCache();
  PinnedHostCache(const PinnedHostCache&) = delete;
  PinnedHostCache& operator=(const PinnedHostCache&) = delete;

  // The block size a request of `bytes` gets: the next power of two >= max(bytes, 512). Throws
  // mg::OutOfMemoryError for a request above 2^62 bytes.
  static std::size_t round_size(std::size_t bytes);

  [[nodiscard]] void* allocate(std::size_t bytes);
  // Gives a block back (pending while copies that use it are in flight). nullptr is a no-op.
  // Throws mg::Error for a pointer this cache did not hand out, an interior pointer or a second
  // free; the state is unchanged.
  void deallocate(void* p);
  // Records that a copy just queued on `stream` of `device` reads or writes the block holding `p`;
  // false (nothing recorded) when `p` is not inside a live block of this cache.
  bool record_use(const void* p, int device, StreamId stream);
  // True when `p` lies inside a live block of this cache (pinned memory handed out now).
  bool contains(const void* p) const;
  // Polls events, then returns every free block to the system. Never waits.
  void empty_cache();

  PinnedCacheStats stats() const;
  void reset_peak();

 private:
  enum class State : std::uint8_t { Live, Pending, Free };
  struct Use {
    int device;
    StreamId stream;
    EventHandle event;
  };
  struct Block {
    std::size_t size = 0;
    State state = State::Free;
    std::vector<Use> uses;  // events of copies not yet seen completed
  };

  // Drops the completed events of `b`; true when none is left.
  bool collect(Block& b);
  void process_pending();
  void release_free_blocks();
  const std::pair<const std::uintptr_t, Block>* find_live(const void* p) const;

  HostMemory& memory_;
  mutable std::mutex mutex_;
  std::map<std::uintptr_t, Block> blocks_;                // every block held, by address
  std::multimap<std::size_t, std::uintptr_t> free_;       // free blocks by size
  std::vector<std::uintptr_t> pending_;                   // freed blocks with events outstanding
  PinnedCacheStats stats_;  // counters; byte totals kept up to date
};

}  // namespace mg::cuda
