// The caching allocator's CUDA graph pools on a fake device (tests/cuda/fake_device_memory.h):
// allocations during a capture come from a private pool, blocks freed during the capture are
// reused only by it, general blocks freed during a capture are held for the graph, the pool stays
// reserved while the graph lives (empty_cache and the OOM retry skip it) and goes back to the
// general pools after the replays' streams have run; nothing synchronises during a capture.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "cuda/fake_device_memory.h"
#include "mixgrad/core/error.h"
#include "mixgrad/cuda/host/caching_allocator.h"
#include "test_util.h"

namespace {

using mg::cuda::AllocatorStats;
using mg::cuda::CachingAllocator;
using mg::cuda::StreamId;
using mg::test::FakeDeviceMemory;

constexpr std::size_t KiB = 1024;
constexpr std::size_t MiB = 1024 * KiB;
constexpr StreamId kDefault = 0;
constexpr StreamId kCapture = 0x100;  // the side stream a graph is captured on

// Every reserved byte is allocated, cached, pending or held for a graph.
void check_balance(const AllocatorStats& s) {
  CHECK(s.reserved_bytes == s.allocated_bytes + s.cached_bytes + s.pending_bytes + s.graph_held_bytes);
}

}  // namespace

TEST_CASE("graph pool: allocations during a capture come from the graph's own segments", "[cuda][allocator][graph]") {
  FakeDeviceMemory mem;
  CachingAllocator a(mem, 0);
  // A cached general block on the capture stream must not serve the capture.
  void* general = a.allocate(4 * KiB, kCapture);
  a.deallocate(general);
  REQUIRE(mem.num_allocs() == 1);
  a.begin_capture(7, kCapture);
  CHECK(a.capture_in_progress());
  void* g1 = a.allocate(4 * KiB, kCapture);
  CHECK(g1 != general);
  CHECK(mem.num_allocs() == 2);  // a new (private) 2 MiB segment
  // Another stream still uses the general pools (thread-local capture: other work goes on).
  void* other = a.allocate(4 * KiB, kCapture + 1);
  CHECK(mem.num_allocs() == 3);
  void* again = a.allocate(4 * KiB, kDefault);
  CHECK(mem.num_allocs() == 4);
  const AllocatorStats s = a.stats();
  CHECK(s.graph_pool_bytes == 2 * MiB);
  CHECK(s.num_graph_pools == 1);
  a.end_capture(kCapture);
  CHECK_FALSE(a.capture_in_progress());
  // After the capture, the capture stream's allocations use the general pool again: the cached
  // general block comes back.
  void* after = a.allocate(4 * KiB, kCapture);
  CHECK(after == general);
  for (void* p : {g1, other, again, after}) a.deallocate(p);
  check_balance(a.stats());
}

TEST_CASE("graph pool: a block freed during the capture is reused only by that capture", "[cuda][allocator][graph]") {
  FakeDeviceMemory mem;
  CachingAllocator a(mem, 0);
  a.begin_capture(1, kCapture);
  void* x = a.allocate(64 * KiB, kCapture);
  a.deallocate(x);  // freed inside the graph: graph order makes reuse safe
  void* y = a.allocate(64 * KiB, kCapture);
  CHECK(y == x);
  a.deallocate(y);
  a.end_capture(kCapture);
  // Outside the capture nobody else gets it, even on the same stream and size.
  void* z = a.allocate(64 * KiB, kCapture);
  CHECK(z != x);
  a.deallocate(z);
  // A second capture into the same pool may reuse it (PyTorch's pool sharing).
  a.begin_capture(1, kCapture);
  void* w = a.allocate(64 * KiB, kCapture);
  CHECK(w == x);
  a.deallocate(w);
  a.end_capture(kCapture);
  check_balance(a.stats());
}

// A captured step that forks a side stream: a private block the side stream reads (record_stream)
// and that is freed during the capture must not be reused by a later allocation of the capture
// stream (the side branch may still read it at every replay), and the side stream's own
// allocations belong to the graph's pool (from the general pool they could go back there while
// the graph still writes them).
TEST_CASE("graph pool: a forked side stream allocates from the pool, and its blocks are not reused early",
          "[cuda][allocator][graph]") {
  constexpr StreamId kSide = 0x200;
  FakeDeviceMemory mem;
  CachingAllocator a(mem, 0);
  a.begin_capture(9, kCapture);
  mem.set_stream_capturing(kCapture, true);
  void* x = a.allocate(1 * MiB, kCapture);
  mem.set_stream_capturing(kSide, true);  // the side stream waited on the capture stream's event
  void* y = a.allocate(64 * KiB, kSide);
  CHECK(a.stats().graph_pool_bytes == 4 * MiB);  // y's segment is the pool's too (two 2 MiB segments)
  a.record_stream(x, kSide);
  a.deallocate(x);                               // x is read on the side stream
  void* z = a.allocate(1 * MiB, kCapture);
  CHECK(z != x);                                 // not handed out while the side branch may read it
  AllocatorStats s = a.stats();
  CHECK(s.graph_held_bytes == 1 * MiB);
  check_balance(s);
  // Two captures in progress: a joined side stream's pool would be a guess.
  a.begin_capture(10, kCapture + 1);
  CHECK_THAT(mg::test::error_message([&] { (void)a.allocate(512, kSide); }),
             Catch::Matchers::Contains("2 captures are in progress, so its private pool is ambiguous"));
  a.end_capture(kCapture + 1);
  a.release_pool(10, {kCapture + 1});
  mem.set_stream_capturing(kSide, false);
  mem.set_stream_capturing(kCapture, false);
  a.end_capture(kCapture);
  for (void* p : {y, z}) a.deallocate(p);
  a.release_pool(9, {kCapture, kSide});
  mem.complete_all_events();
  a.empty_cache();
  s = a.stats();
  CHECK(s.graph_held_bytes == 0);
  CHECK(s.num_graph_pools == 0);
  CHECK(s.reserved_bytes == 0);
  check_balance(s);
}

TEST_CASE("graph pool: general blocks freed during a capture are held until the graph is released",
          "[cuda][allocator][graph]") {
  FakeDeviceMemory mem;
  CachingAllocator a(mem, 0);
  void* input = a.allocate(256 * KiB, kDefault);  // e.g. an eager tensor the captured step reads
  a.begin_capture(3, kCapture);
  a.deallocate(input);  // dropped during the capture: the graph may read it at every replay
  AllocatorStats s = a.stats();
  CHECK(s.graph_held_bytes == 256 * KiB);
  CHECK(s.allocated_bytes == 0);
  check_balance(s);
  a.end_capture(kCapture);
  void* next = a.allocate(256 * KiB, kDefault);
  CHECK(next != input);  // still held after the capture, while the graph lives
  a.deallocate(next);
  // Released after a replay on the default stream (the block's own stream): at once.
  a.release_pool(3, {kDefault});
  s = a.stats();
  CHECK(s.graph_held_bytes == 0);
  CHECK(s.num_graph_pools == 0);
  check_balance(s);
  void* reused = a.allocate(256 * KiB, kDefault);
  CHECK((reused == input || reused == next));
  a.deallocate(reused);
}

TEST_CASE("graph pool: a block held for two graphs waits for both graphs' replays", "[cuda][allocator][graph]") {
  // Two threads capture at once (pools 3 and 4); an eager tensor dropped meanwhile is held for
  // both. Graph 3 goes first, after replays on R1 that may still be queued; when graph 4 goes
  // (replays on R2), the block must wait for R1 too: it waited for R2 only before.
  FakeDeviceMemory mem;
  CachingAllocator a(mem, 0);
  constexpr StreamId kCapture2 = 0x101, kR1 = 0x300, kR2 = 0x301;
  void* input = a.allocate(256 * KiB, kDefault);
  a.begin_capture(3, kCapture);
  a.begin_capture(4, kCapture2);
  a.deallocate(input);
  a.end_capture(kCapture);
  a.end_capture(kCapture2);
  a.release_pool(3, {kR1});
  CHECK(a.stats().graph_held_bytes == 256 * KiB);  // graph 4 may still read it
  a.release_pool(4, {kR2});
  mem.complete_events_on(kR2);  // graph 4's replays are done, graph 3's may not be
  void* early = a.allocate(256 * KiB, kDefault);
  CHECK(early != input);
  mem.complete_events_on(kR1);
  void* late = a.allocate(256 * KiB, kDefault);
  CHECK(late == input);
  for (void* p : {early, late}) a.deallocate(p);
  check_balance(a.stats());
}

TEST_CASE("graph pool: the pool stays reserved while the graph lives and returns after its replays",
          "[cuda][allocator][graph]") {
  FakeDeviceMemory mem;
  CachingAllocator a(mem, 0);
  a.begin_capture(5, kCapture);
  void* loss = a.allocate(512, kCapture);           // a static output the host keeps
  void* scratch = a.allocate(3 * MiB, kCapture);    // an activation freed inside the graph
  a.deallocate(scratch);
  a.end_capture(kCapture);
  const std::size_t reserved = a.stats().reserved_bytes;
  REQUIRE(a.stats().graph_pool_bytes == 2 * MiB + 20 * MiB);
  // empty_cache keeps the pool's free segment: the graph writes there at every replay.
  a.empty_cache();
  CHECK(a.stats().reserved_bytes == reserved);
  CHECK(mem.num_frees() == 0);
  // Destroyed after replays on the default stream, whose work has not finished: the free blocks
  // wait for an event on it; the live static output becomes an ordinary block.
  const std::size_t events = mem.events_recorded();
  a.release_pool(5, {kDefault});
  AllocatorStats s = a.stats();
  CHECK(s.num_graph_pools == 0);
  CHECK(s.graph_pool_bytes == 0);
  CHECK(mem.events_recorded() > events);
  CHECK(s.pending_bytes == 20 * MiB + 2 * MiB - 512);
  check_balance(s);
  void* early = a.allocate(19 * MiB, kCapture);  // the replay may still run: not that segment
  CHECK(mem.num_allocs() == 3);
  mem.complete_events_on(kDefault);
  void* late = a.allocate(3 * MiB, kCapture);  // now the old pool segment serves it
  CHECK(late == scratch);
  CHECK(mem.num_allocs() == 3);
  // The static output's free waits for the replay stream too (it became a record_stream'ed block).
  a.deallocate(loss);
  CHECK(a.stats().pending_bytes == 512);
  mem.complete_events_on(kDefault);
  for (void* p : {early, late}) a.deallocate(p);
  a.empty_cache();
  CHECK(a.stats().reserved_bytes == 0);
}

TEST_CASE("graph pool: a pool block still pending on another stream when the graph goes also waits for the replays",
          "[cuda][allocator][graph]") {
  // A static output used on a side stream (record_stream), then freed: pending on that stream.
  // When the graph is released its replays (default stream) may still write the block, so it must
  // not become reusable when only the side stream's work is done.
  FakeDeviceMemory mem;
  CachingAllocator a(mem, 0);
  constexpr StreamId kSide = 0x200;
  a.begin_capture(3, kCapture);
  void* out = a.allocate(64 * KiB, kCapture);
  a.end_capture(kCapture);
  a.record_stream(out, kSide);
  a.deallocate(out);
  REQUIRE(a.stats().pending_bytes > 0);
  a.release_pool(3, {kDefault});
  mem.complete_events_on(kSide);  // the side stream is done; a replay on the default one may not be
  void* reuse = a.allocate(64 * KiB, kCapture);
  CHECK(reuse != out);
  CHECK(a.stats().pending_bytes > 0);  // still waiting for the default stream
  mem.complete_events_on(kDefault);
  void* later = a.allocate(64 * KiB, kCapture);  // collects the completed events
  CHECK(a.stats().pending_bytes == 0);  // after the replays it is an ordinary free block
  for (void* p : {reuse, later}) a.deallocate(p);
  check_balance(a.stats());
}

TEST_CASE("graph pool: nothing synchronises or frees device memory during a capture", "[cuda][allocator][graph]") {
  FakeDeviceMemory mem(30 * MiB);
  CachingAllocator a(mem, 0);
  void* big = a.allocate(5 * MiB, kDefault);  // a 20 MiB segment
  a.record_stream(big, kDefault + 1);
  a.deallocate(big);  // pending on an event of stream 1
  REQUIRE(a.stats().pending_bytes > 0);
  a.begin_capture(9, kCapture);
  // Out of memory during the capture (a second 20 MiB segment does not fit): reported at once;
  // outside a capture the allocator would synchronise and free the cached segment.
  MG_REQUIRE_ERROR(a.allocate(6 * MiB, kCapture), "CUDA out of memory on cuda:0");
  CHECK(mem.sync_calls() == 0);
  CHECK(mem.num_frees() == 0);
  a.empty_cache();  // a no-op during a capture
  CHECK(mem.num_frees() == 0);
  CHECK(a.stats().pending_bytes > 0);  // events are not even polled
  a.end_capture(kCapture);
  a.release_pool(9, {});
  mem.complete_all_events();
  a.empty_cache();
  CHECK(a.stats().reserved_bytes == 0);
}

TEST_CASE("graph pool: misuse is a clear error", "[cuda][allocator][graph]") {
  FakeDeviceMemory mem;
  CachingAllocator a(mem, 0);
  MG_REQUIRE_ERROR(a.begin_capture(0, kCapture), "pool 0 is the general pool");
  a.begin_capture(2, kCapture);
  MG_REQUIRE_ERROR(a.begin_capture(3, kCapture), "is already capturing into pool 2");
  MG_REQUIRE_ERROR(a.release_pool(2, {}), "is still capturing");
  a.end_capture(kCapture);
  MG_REQUIRE_ERROR(a.end_capture(kCapture), "is not capturing");
  a.release_pool(2, {});
  MG_REQUIRE_ERROR(a.release_pool(2, {}), "no private pool 2");
  // A released pool's id is not revived: its blocks went to the general pools.
  MG_REQUIRE_ERROR(a.begin_capture(2, kCapture), "pool 2 was released");
  CHECK(a.stats().num_graph_pools == 0);
  CHECK_FALSE(a.capture_in_progress());
}
