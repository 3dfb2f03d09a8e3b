// The generator's CUDA graph bookkeeping (core/generator.h), on the CPU: during a capture
// graph-safe draws get offsets within the graph and a device base, other draws are refused;
// before each replay the generator hands out the position the replay reads and advances as if the
// captured ops had run eagerly, so eager and replayed runs draw the same stream.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "mixgrad/core/generator.h"
#include "test_util.h"

using mg::Generator;
using mg::PhiloxArgs;

TEST_CASE("Generator: eager graph-safe draws are ordinary draws", "[core][rng][graph]") {
  Generator g(42);
  const PhiloxArgs a = g.reserve_graph_safe(10);
  CHECK(a.seed == 42);
  CHECK(a.offset == 0);
  CHECK(a.device_base == nullptr);
  CHECK(g.reserve(5) == 10);
  CHECK(g.reserve_graph_safe(1).offset == 15);
  CHECK(g.offset() == 16);
}

TEST_CASE("Generator: a capture hands out offsets within the graph and leaves the position alone", "[core][rng][graph]") {
  Generator g(7);
  (void)g.reserve(100);
  const int64_t base[2] = {0, 0};  // stands for the device pair
  g.begin_capture(base);
  CHECK(g.capturing());
  const PhiloxArgs d1 = g.reserve_graph_safe(3);  // e.g. dropout of 12 elements
  const PhiloxArgs d2 = g.reserve_graph_safe(5);
  CHECK(d1.device_base == base);
  CHECK(d1.offset == 0);
  CHECK(d2.offset == 3);
  CHECK(g.offset() == 100);  // nothing moves until a replay
  MG_REQUIRE_ERROR(g.reserve(4, "randn"), "Generator: randn drew random numbers during a CUDA graph capture");
  MG_REQUIRE_ERROR(g.set_state(1, 0), "being captured into a CUDA graph");
  MG_REQUIRE_ERROR(g.begin_capture(base), "already being captured");
  MG_REQUIRE_ERROR(g.replay_base(8), "cannot be replayed while");
  CHECK(g.end_capture() == 8);
  CHECK_FALSE(g.capturing());
  MG_REQUIRE_ERROR(g.end_capture(), "no capture in progress");
}

TEST_CASE("Generator: replays draw what the eager steps would have drawn", "[core][rng][graph]") {
  // Eager: three steps, each with two dropouts of 3 and 5 blocks.
  Generator eager(11);
  std::vector<uint64_t> eager_offsets;
  for (int step = 0; step < 3; ++step) {
    eager_offsets.push_back(eager.reserve_graph_safe(3).offset);
    eager_offsets.push_back(eager.reserve_graph_safe(5).offset);
  }
  // Graph: capture once, replay three times; the kernel reads base + offset within the graph.
  Generator graph(11);
  const int64_t base[2] = {0, 0};
  graph.begin_capture(base);
  const uint64_t in1 = graph.reserve_graph_safe(3).offset;
  const uint64_t in2 = graph.reserve_graph_safe(5).offset;
  const uint64_t per_replay = graph.end_capture();
  REQUIRE(per_replay == 8);
  std::vector<uint64_t> replay_offsets;
  for (int step = 0; step < 3; ++step) {
    const PhiloxArgs b = graph.replay_base(per_replay);
    CHECK(b.seed == 11);
    replay_offsets.push_back(b.offset + in1);
    replay_offsets.push_back(b.offset + in2);
  }
  CHECK(replay_offsets == eager_offsets);
  CHECK(graph.offset() == eager.offset());
  // Reseeding between replays reaches the next replay (the seed is part of the device pair).
  graph.set_state(99, 0);
  const PhiloxArgs b = graph.replay_base(per_replay);
  CHECK(b.seed == 99);
  CHECK(b.offset == 0);
  CHECK(graph.offset() == 8);
}
