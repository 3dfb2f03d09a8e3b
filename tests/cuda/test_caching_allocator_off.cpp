// The caching allocator with its cache turned off (MG_CUDA_CACHING_ALLOCATOR=0, for memory
// checkers) on a fake device (tests/cuda/fake_device_memory.h): every block is one raw
// allocation of exactly the requested bytes, never reused, returned as soon as it is free —
// after record_stream's events, and for blocks a CUDA graph may read, when the graph goes.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "cuda/fake_device_memory.h"
#include "mixgrad/cuda/host/caching_allocator.h"

namespace {

using mg::cuda::AllocatorStats;
using mg::cuda::CachingAllocator;
using mg::cuda::StreamId;
using mg::test::FakeDeviceMemory;

constexpr StreamId kA = 1;
constexpr StreamId kB = 2;
constexpr StreamId kCapture = 0x100;

void check_balance(const AllocatorStats& s) {
  CHECK(s.reserved_bytes == s.allocated_bytes + s.cached_bytes + s.pending_bytes + s.graph_held_bytes);
}

}  // namespace

TEST_CASE("CachingAllocator without the cache: one exact raw allocation per block, returned at once",
          "[cuda][allocator]") {
  FakeDeviceMemory dev;
  CachingAllocator alloc(dev, 0, /*caching=*/false);
  CHECK_FALSE(alloc.caching());
  void* a = alloc.allocate(1000, kA);
  CHECK(dev.last_alloc_bytes() == 1000);  // not rounded to 512, not a 2 MiB segment
  void* b = alloc.allocate(1000, kA);
  void* empty = alloc.allocate(0, kA);
  CHECK(dev.last_alloc_bytes() == 1);  // still a unique, valid pointer
  CHECK(dev.num_allocs() == 3);
  AllocatorStats s = alloc.stats();
  CHECK(s.allocated_bytes == 2001);
  CHECK(s.reserved_bytes == 2001);
  CHECK(s.num_segments == 3);
  check_balance(s);

  alloc.deallocate(a);
  CHECK(dev.num_frees() == 1);  // back to the device now, not cached
  void* c = alloc.allocate(1000, kA);
  CHECK(dev.num_allocs() == 4);  // a fresh allocation, even for the same size and stream
  s = alloc.stats();
  CHECK(s.num_cached_blocks == 0);
  CHECK(s.cached_bytes == 0);
  CHECK(s.num_raw_frees == 1);
  check_balance(s);
  for (void* p : {b, c, empty}) alloc.deallocate(p);
  CHECK(dev.used() == 0);
  CHECK(dev.live_allocs() == 0);
  s = alloc.stats();
  CHECK(s.num_allocs == 4);
  CHECK(s.num_frees == 4);
  CHECK(s.num_raw_frees == 4);
  CHECK(s.peak_allocated_bytes == 2001);
}

TEST_CASE("CachingAllocator without the cache: a block used on another stream goes back after that stream's work",
          "[cuda][allocator]") {
  FakeDeviceMemory dev;
  CachingAllocator alloc(dev, 0, /*caching=*/false);
  void* a = alloc.allocate(4096, kA);
  alloc.record_stream(a, kB);
  alloc.deallocate(a);
  CHECK(dev.live_allocs() == 1);  // B's work may still read it
  CHECK(alloc.stats().num_pending_blocks == 1);
  alloc.empty_cache();  // polls without waiting: B is not done
  CHECK(dev.live_allocs() == 1);
  dev.complete_events_on(kB);
  void* b = alloc.allocate(4096, kA);  // collects the event, returns a's memory, allocates anew
  CHECK(dev.num_frees() == 1);
  CHECK(dev.live_events() == 0);
  alloc.deallocate(b);
  CHECK(dev.used() == 0);
  check_balance(alloc.stats());
}

TEST_CASE("CachingAllocator without the cache: nothing is freed during a capture, and the graph's blocks go when it does",
          "[cuda][allocator][graph]") {
  FakeDeviceMemory dev;
  CachingAllocator alloc(dev, 0, /*caching=*/false);
  void* input = alloc.allocate(3000, kA);  // an eager tensor the captured work reads
  alloc.begin_capture(5, kCapture);
  void* t1 = alloc.allocate(2048, kCapture);
  alloc.deallocate(t1);  // a temporary of the capture: kept for the graph, not reused
  void* t2 = alloc.allocate(2048, kCapture);
  CHECK(t2 != t1);
  CHECK(dev.num_allocs() == 3);
  alloc.deallocate(input);  // dropped during the capture: held for the graph
  CHECK(dev.num_frees() == 0);
  AllocatorStats s = alloc.stats();
  CHECK(s.graph_held_bytes == 3000);
  CHECK(s.graph_pool_bytes == 4096);
  check_balance(s);
  alloc.end_capture(kCapture);
  alloc.empty_cache();  // the graph still lives: its pool and held blocks stay
  CHECK(dev.num_frees() == 0);

  alloc.release_pool(5, {kCapture});
  dev.complete_events_on(kCapture);
  alloc.empty_cache();
  // The held input and the freed temporary are back with the device; t2 (still live) goes at its free.
  CHECK(dev.num_frees() == 2);
  alloc.deallocate(t2);
  CHECK(dev.used() == 0);
  s = alloc.stats();
  CHECK(s.num_graph_pools == 0);
  CHECK(s.graph_held_bytes == 0);
  check_balance(s);
}
