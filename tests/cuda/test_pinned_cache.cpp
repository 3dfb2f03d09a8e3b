// The caching pinned-host allocator's policy on fake host memory (tests/cuda/fake_host_memory.h):
// rounding, exact-size reuse, event-gated reuse of blocks freed while a copy is in flight, one
// event per stream, pointer lookup for the copies, empty_cache, statistics, out of memory, misuse
// errors and threads. The real cudaHostAlloc path is tested in test_cuda_pinned.cpp ([gpu]).
#include <catch2/catch.hpp>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <thread>
#include <vector>

#include "cuda/fake_device_memory.h"  // error_message
#include "cuda/fake_host_memory.h"
#include "mixgrad/core/error.h"
#include "mixgrad/cuda/host/pinned_cache.h"

namespace {

using mg::cuda::PinnedCacheStats;
using mg::cuda::PinnedHostCache;
using mg::test::error_message;
using mg::test::FakeHostMemory;

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;

char* bytes_of(void* p) { return static_cast<char*>(p); }

}  // namespace

TEST_CASE("pinned cache: sizes round up to powers of two, at least 512 bytes", "[cuda][pinned]") {
  REQUIRE(PinnedHostCache::round_size(0) == 512);
  REQUIRE(PinnedHostCache::round_size(1) == 512);
  REQUIRE(PinnedHostCache::round_size(512) == 512);
  REQUIRE(PinnedHostCache::round_size(513) == 1024);
  REQUIRE(PinnedHostCache::round_size(3 * KiB) == 4 * KiB);
  REQUIRE(PinnedHostCache::round_size(MiB) == MiB);
  REQUIRE(PinnedHostCache::round_size(MiB + 1) == 2 * MiB);
  try {
    (void)PinnedHostCache::round_size(std::size_t(-1));
    FAIL("no error");
  } catch (const mg::OutOfMemoryError& e) {
    REQUIRE_THAT(e.what(), Catch::Matchers::Contains("more than 2^62"));
  }
}

TEST_CASE("pinned cache: a freed block is reused by a request of the same rounded size", "[cuda][pinned]") {
  FakeHostMemory host;
  PinnedHostCache cache(host);
  void* a = cache.allocate(1000);  // 1 KiB block
  std::memset(a, 7, 1000);         // the memory is usable
  PinnedCacheStats s = cache.stats();
  REQUIRE(s.allocated_bytes == 1024);
  REQUIRE(s.reserved_bytes == 1024);
  REQUIRE(s.cached_bytes == 0);
  REQUIRE(s.num_raw_allocs == 1);
  cache.deallocate(a);
  s = cache.stats();
  REQUIRE(s.allocated_bytes == 0);
  REQUIRE(s.cached_bytes == 1024);
  REQUIRE(s.reserved_bytes == 1024);
  REQUIRE(host.num_frees() == 0);  // kept, not returned
  void* b = cache.allocate(700);   // also 1 KiB: the same block
  REQUIRE(b == a);
  s = cache.stats();
  REQUIRE(s.num_raw_allocs == 1);
  REQUIRE(s.num_reuses == 1);
  REQUIRE(s.num_allocs == 2);
  REQUIRE(s.num_frees == 1);
  // Another size class does not take it: blocks are never split.
  cache.deallocate(b);
  void* c = cache.allocate(512);
  REQUIRE(c != a);
  REQUIRE(cache.stats().num_raw_allocs == 2);
  REQUIRE(cache.stats().cached_bytes == 1024);
  cache.deallocate(c);
  // allocate(0) is a valid, unique block.
  void* z0 = cache.allocate(0);
  void* z1 = cache.allocate(0);
  REQUIRE(z0 != nullptr);
  REQUIRE(z1 != nullptr);
  REQUIRE(z0 != z1);
  cache.deallocate(z0);
  cache.deallocate(z1);
  cache.deallocate(nullptr);  // a no-op
}

TEST_CASE("pinned cache: a block freed while a copy uses it waits for the copy's event", "[cuda][pinned]") {
  FakeHostMemory host;
  PinnedHostCache cache(host);
  void* p = cache.allocate(4 * KiB);
  // A copy of a view (an interior pointer) queued on stream 7 of device 0.
  REQUIRE(cache.record_use(bytes_of(p) + 100, 0, 7));
  REQUIRE(host.events_recorded() == 1);
  cache.deallocate(p);  // the copy may still read it
  PinnedCacheStats s = cache.stats();
  REQUIRE(s.pending_bytes == 4 * KiB);
  REQUIRE(s.cached_bytes == 0);
  REQUIRE(s.allocated_bytes == 0);
  REQUIRE(s.reserved_bytes == 4 * KiB);
  // A request of the same size now gets fresh memory, not the block in flight.
  void* q = cache.allocate(4 * KiB);
  REQUIRE(q != p);
  REQUIRE(cache.stats().num_raw_allocs == 2);
  // Work on another stream finishing does not release it.
  host.complete_events_on(0, 8);
  void* r = cache.allocate(4 * KiB);
  REQUIRE(r != p);
  REQUIRE(cache.stats().pending_bytes == 4 * KiB);
  // Once the copy's event has completed, the block is reused and its event destroyed.
  host.complete_events_on(0, 7);
  void* again = cache.allocate(4 * KiB);
  REQUIRE(again == p);
  s = cache.stats();
  REQUIRE(s.pending_bytes == 0);
  REQUIRE(s.num_live_events == 0);
  REQUIRE(host.live_events() == 0);
  for (void* x : {q, r, again}) cache.deallocate(x);
}

TEST_CASE("pinned cache: inside a CUDA graph capture no event is queried, nothing is freed and freed blocks wait", "[cuda][pinned]") {
  // cudaEventQuery on a capturing thread invalidates the capture: the fake throws on one.
  FakeHostMemory host;
  PinnedHostCache cache(host);
  cache.deallocate(cache.allocate(64 * KiB));  // a free block, cached before the capture
  void* p = cache.allocate(4 * KiB);
  REQUIRE(cache.record_use(p, 0, 7));
  host.complete_events_on(0, 7);  // the copy is done, but the cache cannot ask during the capture
  host.set_capturing(true);
  // cudaFreeHost would invalidate the capture too (the fake throws on it): empty_cache waits.
  cache.empty_cache();
  CHECK(cache.stats().cached_bytes == 64 * KiB);
  cache.deallocate(p);
  CHECK(cache.stats().pending_bytes == 4 * KiB);
  void* q = cache.allocate(4 * KiB);  // fresh memory: the pending block is not looked at
  CHECK(q != p);
  cache.deallocate(q);  // no event: pending too, until a query is allowed
  cache.empty_cache();
  CHECK(cache.stats().pending_bytes == 8 * KiB);
  host.set_capturing(false);
  void* again = cache.allocate(4 * KiB);  // now both are collected, and one is reused
  CHECK((again == p || again == q));
  CHECK(cache.stats().pending_bytes == 0);
  cache.deallocate(again);
  cache.empty_cache();  // after the capture it gives the memory back
  CHECK(cache.stats().reserved_bytes == 0);
}

TEST_CASE("pinned cache: an event query that throws in deallocate changes nothing", "[cuda][pinned]") {
  // The header's promise: the cache's state is unchanged by a throw. The statistics were counted
  // before the queries, and a completed event was destroyed before a later query threw.
  FakeHostMemory host;
  PinnedHostCache cache(host);
  void* p = cache.allocate(4 * KiB);
  REQUIRE(cache.record_use(p, 0, 7));
  REQUIRE(cache.record_use(p, 0, 8));
  host.complete_events_on(0, 7);
  const PinnedCacheStats before = cache.stats();
  host.fail_query_after(2);  // the second event's query
  CHECK_THROWS_AS(cache.deallocate(p), std::runtime_error);
  const PinnedCacheStats after = cache.stats();
  CHECK(after.allocated_bytes == before.allocated_bytes);
  CHECK(after.num_frees == before.num_frees);
  CHECK(after.num_live_events == 2);
  CHECK(host.live_events() == 2);
  CHECK(cache.contains(p));  // still live: it can be freed again
  host.complete_events_on(0, 8);
  cache.deallocate(p);
  CHECK(cache.stats().cached_bytes == 4 * KiB);
  CHECK(cache.stats().num_live_events == 0);
  CHECK(host.live_events() == 0);
}

TEST_CASE("pinned cache: a block keeps one event per stream - a completed copy does not delay a free", "[cuda][pinned]") {
  FakeHostMemory host;
  PinnedHostCache cache(host);
  void* p = cache.allocate(MiB);
  for (int i = 0; i < 5; ++i) REQUIRE(cache.record_use(p, 0, 1));  // a staging buffer reused 5 times
  REQUIRE(host.events_recorded() == 5);
  REQUIRE(host.live_events() == 1);  // the newest event covers the older ones (stream order)
  REQUIRE(cache.record_use(p, 0, 2));
  REQUIRE(cache.record_use(p, 1, 1));  // the same stream id on another device is another stream
  REQUIRE(host.live_events() == 3);
  REQUIRE(cache.stats().num_live_events == 3);
  host.complete_events_on(0, 1);
  host.complete_events_on(0, 2);
  cache.deallocate(p);  // device 1's copy is still in flight
  REQUIRE(cache.stats().pending_bytes == MiB);
  REQUIRE(host.live_events() == 1);  // the completed ones were collected
  host.complete_events_on(1, 1);
  cache.empty_cache();  // polls, then releases the now free block
  REQUIRE(cache.stats().reserved_bytes == 0);
  REQUIRE(host.live_allocs() == 0);
  REQUIRE(host.live_events() == 0);

  // Copies that completed before the free: the block is free at once.
  void* b = cache.allocate(MiB);
  REQUIRE(cache.record_use(b, 0, 3));
  host.complete_all_events();
  cache.deallocate(b);
  REQUIRE(cache.stats().cached_bytes == MiB);
  REQUIRE(cache.stats().pending_bytes == 0);
  REQUIRE(cache.allocate(MiB) == b);
  cache.deallocate(b);
}

TEST_CASE("pinned cache: only live blocks are pinned memory for the copies", "[cuda][pinned]") {
  FakeHostMemory host;
  PinnedHostCache cache(host);
  void* p = cache.allocate(2 * KiB);
  std::vector<char> pageable(64);
  REQUIRE(cache.contains(p));
  REQUIRE(cache.contains(bytes_of(p) + 2 * KiB - 1));
  REQUIRE_FALSE(cache.contains(bytes_of(p) + 2 * KiB));  // one past the block
  REQUIRE_FALSE(cache.contains(pageable.data()));
  REQUIRE_FALSE(cache.record_use(pageable.data(), 0, 0));
  REQUIRE(host.events_recorded() == 0);  // nothing recorded for pageable memory
  cache.deallocate(p);
  REQUIRE_FALSE(cache.contains(p));  // cached, not handed out: a stale pointer is not pinned
  REQUIRE_FALSE(cache.record_use(p, 0, 0));
  REQUIRE(host.events_recorded() == 0);
}

// A raw free that throws midway (cudaFreeHost failing) leaves the cache consistent: the freed
// blocks are gone from every list, the rest stay cached and reusable.
TEST_CASE("pinned cache: a failing raw free in empty_cache leaves the lists and statistics consistent", "[cuda][pinned]") {
  FakeHostMemory host;
  PinnedHostCache cache(host);
  void* small = cache.allocate(KiB);
  void* large = cache.allocate(64 * KiB);
  cache.deallocate(small);
  cache.deallocate(large);
  host.fail_free_after(2);  // the first (smallest) block frees, the second throws
  REQUIRE_THROWS_AS(cache.empty_cache(), std::runtime_error);
  PinnedCacheStats s = cache.stats();
  CHECK(s.cached_bytes == 64 * KiB);
  CHECK(s.reserved_bytes == 64 * KiB);
  CHECK(s.num_raw_frees == 1);
  CHECK(host.used() == 64 * KiB);
  void* fresh = nullptr;  // the freed small block is no longer listed as free (it was: a stale address)
  REQUIRE_NOTHROW(fresh = cache.allocate(KiB));
  cache.deallocate(fresh);
  void* again = cache.allocate(64 * KiB);  // the block that stayed cached is reused
  CHECK(again == large);
  cache.deallocate(again);
  cache.empty_cache();
  CHECK(cache.stats().reserved_bytes == 0);
  CHECK(host.used() == 0);
}

TEST_CASE("pinned cache: empty_cache returns free blocks and keeps live and pending ones", "[cuda][pinned]") {
  FakeHostMemory host;
  PinnedHostCache cache(host);
  void* live = cache.allocate(KiB);
  void* pending = cache.allocate(8 * KiB);
  void* freed = cache.allocate(64 * KiB);
  REQUIRE(cache.record_use(pending, 0, 5));
  cache.deallocate(pending);
  cache.deallocate(freed);
  cache.empty_cache();
  PinnedCacheStats s = cache.stats();
  REQUIRE(s.cached_bytes == 0);
  REQUIRE(s.pending_bytes == 8 * KiB);
  REQUIRE(s.allocated_bytes == KiB);
  REQUIRE(s.reserved_bytes == 9 * KiB);
  REQUIRE(s.num_raw_frees == 1);
  REQUIRE(host.used() == 9 * KiB);
  host.complete_all_events();
  cache.empty_cache();
  REQUIRE(cache.stats().reserved_bytes == KiB);
  REQUIRE(host.used() == KiB);
  cache.deallocate(live);
}

TEST_CASE("pinned cache: peaks follow the bytes handed out and reset to the current value", "[cuda][pinned]") {
  FakeHostMemory host;
  PinnedHostCache cache(host);
  void* a = cache.allocate(MiB);
  void* b = cache.allocate(MiB);
  cache.deallocate(a);
  REQUIRE(cache.stats().peak_allocated_bytes == 2 * MiB);
  cache.reset_peak();
  REQUIRE(cache.stats().peak_allocated_bytes == MiB);
  cache.deallocate(b);
  REQUIRE(cache.stats().peak_allocated_bytes == MiB);
}

TEST_CASE("pinned cache: out of memory frees the cache, retries once, then throws", "[cuda][pinned]") {
  FakeHostMemory host(8 * KiB);
  PinnedHostCache cache(host);
  void* a = cache.allocate(4 * KiB);
  cache.deallocate(a);  // 4 KiB cached
  void* b = cache.allocate(8 * KiB);  // does not fit beside the cached block: release, retry
  REQUIRE(host.failed_allocs() == 1);
  PinnedCacheStats s = cache.stats();
  REQUIRE(s.num_raw_frees == 1);
  REQUIRE(s.reserved_bytes == 8 * KiB);
  try {
    (void)cache.allocate(100);
    FAIL("no error");
  } catch (const mg::OutOfMemoryError& e) {
    REQUIRE_THAT(e.what(), Catch::Matchers::Contains("pin_memory: out of pinned host memory: tried to allocate 512 B"));
    REQUIRE_THAT(e.what(), Catch::Matchers::Contains("pinned now 8.00 KiB"));
    REQUIRE_THAT(e.what(), Catch::Matchers::Contains("hint:"));
  }
  s = cache.stats();
  REQUIRE(s.num_ooms == 1);
  REQUIRE(s.allocated_bytes == 8 * KiB);  // unchanged by the failure
  cache.deallocate(b);
  void* c = cache.allocate(100);  // a free 8 KiB block is no 512-byte block: released for it
  REQUIRE(c != nullptr);
  REQUIRE(cache.stats().reserved_bytes == 512);
  cache.deallocate(c);
}

TEST_CASE("pinned cache: misuse is an mg::Error and leaves the state unchanged", "[cuda][pinned]") {
  FakeHostMemory host;
  PinnedHostCache cache(host);
  void* p = cache.allocate(KiB);
  int on_stack = 0;
  REQUIRE_THAT(error_message([&] { cache.deallocate(&on_stack); }),
               Catch::Matchers::Contains("not a pinned block of this cache"));
  REQUIRE_THAT(error_message([&] { cache.deallocate(bytes_of(p) + 8); }),
               Catch::Matchers::Contains("not a pinned block of this cache"));
  REQUIRE(cache.stats().allocated_bytes == KiB);
  cache.deallocate(p);
  REQUIRE_THAT(error_message([&] { cache.deallocate(p); }), Catch::Matchers::Contains("already freed"));
  REQUIRE(cache.stats().num_frees == 1);
  REQUIRE(cache.stats().cached_bytes == KiB);
}

TEST_CASE("pinned cache: the destructor returns free blocks and leaves blocks in use alone", "[cuda][pinned]") {
  FakeHostMemory host;
  void* live = nullptr;
  {
    PinnedHostCache cache(host);
    live = cache.allocate(KiB);
    void* freed = cache.allocate(2 * KiB);
    cache.deallocate(freed);
  }
  REQUIRE(host.live_allocs() == 1);  // `live` may still be in use; the fake frees it at the end
  REQUIRE(host.used() == KiB);
  (void)live;
}

TEST_CASE("pinned cache: threads allocate, record and free concurrently", "[cuda][pinned]") {
  FakeHostMemory host;
  PinnedHostCache cache(host);
  std::atomic<int> bad{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < 500; ++i) {
        const std::size_t n = std::size_t(512) << ((i + t) % 5);
        void* p = cache.allocate(n);
        std::memset(p, t, n);
        if (!cache.record_use(p, 0, mg::cuda::StreamId(t))) ++bad;
        if (i % 7 == 0) host.complete_events_on(0, mg::cuda::StreamId(t));
        const auto* c = static_cast<const unsigned char*>(p);
        if (c[0] != t || c[n - 1] != t) ++bad;  // nobody else wrote into a live block
        cache.deallocate(p);
      }
    });
  }
  for (auto& th : threads) th.join();
  REQUIRE(bad == 0);
  host.complete_all_events();
  cache.empty_cache();
  const PinnedCacheStats s = cache.stats();
  REQUIRE(s.allocated_bytes == 0);
  REQUIRE(s.pending_bytes == 0);
  REQUIRE(s.reserved_bytes == 0);
  REQUIRE(s.num_allocs == 2000);
  REQUIRE(s.num_frees == 2000);
  REQUIRE(s.num_raw_allocs == s.num_raw_frees);
  REQUIRE(host.live_allocs() == 0);
  REQUIRE(host.live_events() == 0);
}
