// The caching device allocator's policy (DESIGN §6), as plain host code over a raw-memory
// interface: the CUDA runtime implements DeviceMemory with cudaMalloc/cudaFree/cudaEvent*, the
// tests with host memory and hand-completed events, so the policy is tested on every machine.
// Decision: memory freed by a tensor is cached, never returned to the device until empty_cache()
// or an out-of-memory retry, and a block is reused only on the stream it was allocated on (work on
// that stream is ordered, so reuse needs no synchronisation); record_stream covers the other
// streams with events.
//
//   mg::cuda::CachingAllocator alloc(device_memory, /*device=*/0);
//   void* p = alloc.allocate(4 << 20, stream);  // a 4 MiB block from a cached 20 MiB segment
//   alloc.deallocate(p);                         // back to `stream`'s pool, not to the device
//
// Policy (after PyTorch's CUDACachingAllocator):
// - Request sizes are rounded up to a multiple of 512 bytes (kMinBlockSize); 0 bytes becomes one
//   512-byte block, so allocate(0) returns a valid, unique pointer that must be deallocated
//   (the contract of mg::Allocator).
// - Rounded sizes <= 1 MiB come from the small pool, whose segments are 2 MiB; larger ones from
//   the large pool, whose segments are 20 MiB for requests < 10 MiB and the request rounded up to
//   a multiple of 2 MiB otherwise. A small request never takes a large-pool block.
// - A request takes the smallest cached free block of its pool and stream that fits (best fit;
//   ties go to the lowest address). The block is split when the remainder is >= 512 bytes (small
//   pool: always, as sizes are multiples of 512) or > 1 MiB (large pool); so a block is handed out
//   unsplit only with a surplus of at most 1 MiB, which is less than the large request itself
//   (at most 2x waste, and the surplus is counted in allocated_bytes).
// - A freed block merges with its free neighbours in the same segment, so a segment whose blocks
//   are all free is one free block.
// - deallocate() of a block used on other streams (record_stream) records an event on each of
//   those streams and keeps the block out of the pools until every event has completed; pending
//   events are polled (never waited on) at each allocate() and in empty_cache().
// - Out of memory (raw_alloc returns nullptr): when blocks wait on events, synchronize() and
//   collect them (cudaFree synchronises the device anyway, so this costs nothing the release does
//   not cost already) and look in the pool again; then release every entirely free segment and
//   call raw_alloc once more; if that fails too, throw mg::OutOfMemoryError naming the request
//   and the statistics.
// CUDA graph pools (PyTorch's private pools): a graph replays with the addresses it captured, so
// - between begin_capture(pool, stream) and end_capture(stream), allocations on `stream` come
//   from the private pool `pool` (its own segments; nothing of the general pools), and blocks of
//   that pool freed during the capture are reused only by allocations of that pool — except a
//   block used on another stream too (record_stream), which is held until the pool is released:
//   the captured side stream may still read it when a later node of the capture stream runs;
// - an allocation on a side stream that joined the capture (DeviceMemory::stream_is_capturing)
//   comes from the capture's private pool too (with two captures in progress it is an error: the
//   pool would be a guess);
// - a general-pool block freed while any capture is in progress may be read by the graph being
//   captured: it is held (not reusable) until every pool captured at that time is released;
// - a pool's segments stay reserved while its graph lives (empty_cache and the out-of-memory
//   retry skip them); release_pool (the graph is destroyed) hands its free blocks and held
//   blocks back to the general pools once the work queued on the graph's replay streams has
//   completed (events, as record_stream's), and its live blocks become ordinary blocks whose
//   free also waits for those streams;
// - while any capture is in progress nothing that would synchronise or free device memory runs:
//   no event polling, no cache release, and an out-of-memory is reported at once.
#pragma once
#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

namespace mg::cuda {

// An opaque stream handle (the CUDA runtime passes cudaStream_t cast to it); 0 = default stream.
using StreamId = std::uintptr_t;
// An opaque event handle made by DeviceMemory::record_event (cudaEvent_t cast to it).
using EventHandle = std::uintptr_t;
// A CUDA graph's private pool; 0 is the general pools.
using PoolId = std::uint64_t;

// The raw device operations the caching policy needs. Implementations report failures other than
// out-of-memory by throwing (e.g. mg::CudaError); the allocator's state is unchanged by a throw.
class DeviceMemory {
 public:
  virtual ~DeviceMemory() = default;
  // `bytes` of device memory, or nullptr when the device is out of memory.
  virtual void* raw_alloc(std::size_t bytes) = 0;
  // Returns a pointer made by raw_alloc to the device.
  virtual void raw_free(void* p) = 0;
  // An event recorded on `stream` now: it completes when the work queued on it so far completes.
  virtual EventHandle record_event(StreamId stream) = 0;
  // True once the event has completed; never blocks.
  virtual bool event_completed(EventHandle event) = 0;
  virtual void destroy_event(EventHandle event) = 0;
  // Waits for all work on the device; every recorded event has completed afterwards.
  virtual void synchronize() = 0;
  // Whether work queued on `stream` now is being captured into a CUDA graph: also a side stream
  // that joined a capture by waiting on an event of the capturing stream (cudaStreamIsCapturing).
  virtual bool stream_is_capturing(StreamId stream) {
    (void)stream;
    return false;
  }
};

// The allocator's statistics. Byte counts of blocks are rounded block sizes (what the pools hand
// out, including an unsplit surplus), not the requested sizes, except requested_bytes.
struct AllocatorStats {
  std::size_t allocated_bytes = 0;       // bytes of blocks handed out and not yet deallocated
  std::size_t requested_bytes = 0;       // the sizes asked for by those same blocks
  std::size_t reserved_bytes = 0;        // bytes of all segments obtained by raw_alloc
  std::size_t peak_allocated_bytes = 0;  // max of allocated_bytes since construction/reset_peak
  std::size_t peak_reserved_bytes = 0;   // max of reserved_bytes since construction/reset_peak
  std::size_t cached_bytes = 0;          // bytes of free blocks in the pools (reusable now)
  std::size_t pending_bytes = 0;         // bytes of freed blocks waiting on stream events
  std::size_t largest_free_block = 0;    // the largest free block in the pools (0 when none)
  std::size_t num_segments = 0;          // segments held now
  std::size_t num_cached_blocks = 0;     // free blocks in the pools
  std::size_t num_pending_blocks = 0;    // freed blocks waiting on stream events
  std::size_t num_allocs = 0;            // successful allocate() calls
  std::size_t num_frees = 0;             // successful deallocate() calls
  std::size_t num_raw_allocs = 0;        // successful raw_alloc calls (cudaMalloc)
  std::size_t num_raw_frees = 0;         // raw_free calls (cudaFree)
  std::size_t num_alloc_retries = 0;     // raw_alloc failures answered by freeing the cache
  std::size_t num_ooms = 0;              // allocate() calls that threw OutOfMemoryError
  std::size_t graph_pool_bytes = 0;      // bytes of segments owned by private (graph) pools
  std::size_t graph_held_bytes = 0;      // blocks freed during a capture, held for its graph (general-pool ones, and private ones another stream used)
  std::size_t num_graph_pools = 0;       // private pools not yet released

  // 1 - largest_free_block / cached_bytes: 0 when the cached free memory is one block (or none),
  // near 1 when it is scattered in many small blocks that cannot serve a large request.
  double fragmentation() const {
    return cached_bytes == 0 ? 0.0
                             : 1.0 - static_cast<double>(largest_free_block) /
                                         static_cast<double>(cached_bytes);
  }
};

// "512 B", "1.50 KiB", "20.00 MiB", "3.00 GiB" (two decimals from KiB on; GiB is the largest unit).
std::string format_bytes(std::size_t bytes);

// The caching allocator of one device. Thread-safe: every public function takes one mutex (the
// DeviceMemory calls are made under it).
class CachingAllocator {
 public:
  static constexpr std::size_t kMinBlockSize = 512;         // every size is a multiple of this
  static constexpr std::size_t kSmallSize = 1 << 20;        // largest small-pool request (1 MiB)
  static constexpr std::size_t kSmallBuffer = 2 << 20;      // small-pool segment size (2 MiB)
  static constexpr std::size_t kMinLargeAlloc = 10 << 20;   // requests below get kLargeBuffer
  static constexpr std::size_t kLargeBuffer = 20 << 20;     // large-pool segment for those
  static constexpr std::size_t kRoundLarge = 2 << 20;       // larger segments round to this
  static constexpr std::size_t kMaxSplitSurplus = 1 << 20;  // large blocks split above this

  // `memory` must outlive the allocator; `device` names it in messages ("cuda:0").
  // caching = false (MG_CUDA_CACHING_ALLOCATOR=0) turns the cache off, for memory checkers: every
  // allocation is its own raw_alloc of exactly the requested bytes, never reused, and a block is
  // returned to the device (raw_free) as soon as it is free — after its record_stream events, and,
  // for a block a CUDA graph may read, when its pool is released. So an access past a tensor's
  // end leaves its allocation (the CUDA emulator's guard page, compute-sanitizer's memcheck)
  // instead of landing in a neighbour inside a cached segment. Slower (a cudaMalloc and a
  // cudaFree per tensor); statistics, streams and graph pools behave as documented otherwise.
  CachingAllocator(DeviceMemory& memory, int device, bool caching = true);
  // Collects pending events (synchronising when there are any) and returns every entirely free
  // segment. Segments that still hold live blocks are left to the device (their pointers may be
  // in use); never throws.
  ~CachingAllocator();
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // The block size a request of `bytes` gets: max(bytes, 1) rounded up to 512.
  static std::size_t round_size(std::size_t bytes);
  // The segment size raw_alloc is asked for when no cached block fits a rounded size.
  static std::size_t segment_size(std::size_t rounded);

  // A block of at least `bytes` usable on `stream` (allocate(0) gives a unique 512-byte block).
  // Throws mg::OutOfMemoryError when the device cannot provide it even after the cache is freed.
  [[nodiscard]] void* allocate(std::size_t bytes, StreamId stream);
  // Returns a block to its stream's pool (or, after record_stream, to a pending list until the
  // recorded streams' work completes). nullptr is a no-op. Throws mg::Error for a pointer this
  // allocator did not hand out, an interior pointer or a second free; the state is unchanged.
  void deallocate(void* p);
  // Marks the live block `p` as used on `stream`: when it is freed, it is not reused before the
  // work queued on `stream` by then has completed. A no-op for the block's own stream. Throws
  // mg::Error when `p` is not a live block of this allocator.
  void record_stream(void* p, StreamId stream);
  // Polls pending events, then returns every segment whose blocks are all free to the device.
  // Never synchronises: segments of blocks still waiting on events stay, and so do the segments
  // of private pools. Does nothing while a capture is in progress (cudaFree may not run then).
  void empty_cache();

  // ---- CUDA graph pools (see the policy above) ----
  // From now on allocations on `stream` come from private pool `pool` (> 0; created when new).
  // Throws mg::Error when `stream` is already capturing or `pool` was released.
  void begin_capture(PoolId pool, StreamId stream);
  // Allocations on `stream` go to the general pools again. Throws when `stream` is not capturing.
  void end_capture(StreamId stream);
  // The graph of `pool` is gone: its blocks return to the general pools after the work queued on
  // `replay_streams` (the streams it was replayed on; empty: never replayed) has completed.
  // Throws when `pool` is unknown or still capturing.
  void release_pool(PoolId pool, const std::vector<StreamId>& replay_streams);
  bool capture_in_progress() const;

  AllocatorStats stats() const;
  // Sets both peaks to the current allocated and reserved bytes.
  void reset_peak();
  int device() const { return device_; }
  bool caching() const { return caching_; }

 private:
  // Held: a general-pool block freed during a capture, kept for the graph (held_).
  enum class State : std::uint8_t { Free, Allocated, Pending, Held };
  struct Block {
    char* ptr = nullptr;
    std::size_t size = 0;
    std::size_t requested = 0;  // the size asked for (live blocks only)
    PoolId pool = 0;            // the segment's pool (all its blocks share it); 0: general
    StreamId stream = 0;        // the stream of the segment (all its blocks share it)
    bool small = false;         // which pool
    State state = State::Free;
    int event_count = 0;                // pending events (State::Pending)
    std::vector<StreamId> stream_uses;  // record_stream's streams (live blocks)
    Block* prev = nullptr;              // neighbours in the segment, by address
    Block* next = nullptr;
  };
  // Pool order: (pool, stream, size, address), so lower_bound finds the best fit of a pool on a stream.
  struct BlockLess {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockLess>;
  struct Segment {
    Block* head = nullptr;  // the lowest block (merges keep the lower block, so it never changes)
    std::size_t size = 0;
  };
  struct PendingEvent {
    EventHandle event;
    Block* block;
  };

  Pool& pool_of(const Block* b) { return b->small ? small_pool_ : large_pool_; }
  struct HeldBlock {
    Block* block;
    std::vector<PoolId> pools;  // the pools capturing when it was freed, not yet released
    // The replay streams of the pools already released: their graphs' last replays may still be
    // queued there, so the block waits for them too when the last pool goes.
    std::vector<StreamId> released_streams;
  };
  Block* find_free_block(bool small, PoolId pool, StreamId stream, std::size_t size);
  Block* new_segment(bool small, PoolId pool, StreamId stream, std::size_t size, std::size_t requested);
  // Frees `b` once the work queued on `streams` (other than its own) has completed.
  void free_after(Block* b, const std::vector<StreamId>& streams);
  void* take_block(Block* b, std::size_t size, std::size_t requested);
  void free_block(Block* b);
  void process_events();
  void release_free_segments();
  // Returns the general-pool segment whose only block is the free block `head` to the device.
  void release_segment(Block* head);
  [[noreturn]] void throw_oom(std::size_t requested, std::size_t segment);
  [[noreturn]] void throw_bad_pointer(const char* fn, void* p) const;

  DeviceMemory& memory_;
  int device_;
  bool caching_;
  mutable std::mutex mutex_;
  Pool small_pool_;
  Pool large_pool_;
  std::unordered_map<void*, Block*> live_;    // blocks handed out, by pointer
  std::map<std::uintptr_t, Segment> segments_;  // by base address
  std::vector<PendingEvent> pending_;
  std::map<StreamId, PoolId> capturing_;      // streams under capture and their pools
  std::set<PoolId> pools_;                    // private pools not yet released
  std::set<PoolId> released_pools_;           // released ids, never reused (their blocks went general)
  std::vector<HeldBlock> held_;
  AllocatorStats stats_;  // the counters; the pool-derived fields are filled in by stats()
};

}  // namespace mg::cuda
