// A generator's CUDA graph bookkeeping (core/graph_rng.h), on the CPU: during a capture
// graph-safe draws get offsets within the graph and a device base, other draws are refused;
// before each replay the generator hands out the position the replay reads and advances as if the
// captured ops had run eagerly, so eager and replayed runs draw the same stream.
#include <catch2/catch.hpp>

#include <thread>

#include <cstdint>
#include <vector>

#include "mixgrad/core/generator.h"
#include "mixgrad/core/graph_rng.h"
#include "test_util.h"

using mg::Generator;
using mg::PhiloxArgs;

TEST_CASE("graph rng: eager graph-safe draws are ordinary draws", "[core][rng][graph]") {
  Generator g(42);
  const PhiloxArgs a = mg::reserve_graph_safe(g, 10);
  CHECK(a.seed == 42);
  CHECK(a.offset == 0);
  CHECK(a.device_base == nullptr);
  CHECK(g.reserve(5) == 10);
  CHECK(mg::reserve_graph_safe(g, 1).offset == 15);
  CHECK(g.offset() == 16);
  CHECK_FALSE(mg::generator_captured(g));
  mg::check_not_captured(g, "randn");  // no capture: nothing to refuse
}

TEST_CASE("graph rng: a capture hands out offsets within the graph and leaves the position alone", "[core][rng][graph]") {
  Generator g(7);
  Generator other(7);
  (void)g.reserve(100);
  const int64_t base[2] = {0, 0};  // stands for the device pair
  mg::begin_generator_capture(g, base);
  CHECK(mg::generator_captured(g));
  CHECK_FALSE(mg::generator_captured(other));
  const PhiloxArgs d1 = mg::reserve_graph_safe(g, 3);  // e.g. a dropout of 12 elements
  const PhiloxArgs d2 = mg::reserve_graph_safe(g, 5);
  CHECK(d1.device_base == base);
  CHECK(d1.offset == 0);
  CHECK(d2.offset == 3);
  CHECK(g.offset() == 100);  // nothing moves until a replay
  CHECK(mg::reserve_graph_safe(other, 2).device_base == nullptr);  // another generator is not captured
  MG_REQUIRE_ERROR(mg::check_not_captured(g, "randn"), "Generator: randn drew random numbers during a CUDA graph capture");
  MG_REQUIRE_ERROR(mg::begin_generator_capture(g, base), "already being captured");
  MG_REQUIRE_ERROR(mg::generator_replay_base(g, 8), "cannot be replayed while");
  // Another thread drawing from the captured generator meanwhile draws eagerly (a loader's worker):
  // the position moves for it, and the graph's offsets do not.
  std::thread worker([&] {
    CHECK_FALSE(mg::generator_captured(g));
    const PhiloxArgs e = mg::reserve_graph_safe(g, 4);
    CHECK(e.device_base == nullptr);
    CHECK(e.offset == 100);
    mg::check_not_captured(g, "randn");  // does not throw on this thread
  });
  worker.join();
  CHECK(g.offset() == 104);
  CHECK(mg::reserve_graph_safe(g, 1).offset == 8);
  CHECK(mg::end_generator_capture(g) == 9);
  CHECK_FALSE(mg::generator_captured(g));
  MG_REQUIRE_ERROR(mg::end_generator_capture(g), "no capture of this generator in progress");
}

TEST_CASE("graph rng: replays draw what the eager steps would have drawn", "[core][rng][graph]") {
  // Eager: three steps, each with two dropouts of 3 and 5 blocks.
  Generator eager(11);
  std::vector<uint64_t> eager_offsets;
  for (int step = 0; step < 3; ++step) {
    eager_offsets.push_back(mg::reserve_graph_safe(eager, 3).offset);
    eager_offsets.push_back(mg::reserve_graph_safe(eager, 5).offset);
  }
  // Graph: capture once, replay three times; the kernel reads base + offset within the graph.
  Generator graph(11);
  const int64_t base[2] = {0, 0};
  mg::begin_generator_capture(graph, base);
  const uint64_t in1 = mg::reserve_graph_safe(graph, 3).offset;
  const uint64_t in2 = mg::reserve_graph_safe(graph, 5).offset;
  const uint64_t per_replay = mg::end_generator_capture(graph);
  REQUIRE(per_replay == 8);
  std::vector<uint64_t> replay_offsets;
  for (int step = 0; step < 3; ++step) {
    const PhiloxArgs b = mg::generator_replay_base(graph, per_replay);
    CHECK(b.seed == 11);
    replay_offsets.push_back(b.offset + in1);
    replay_offsets.push_back(b.offset + in2);
  }
  CHECK(replay_offsets == eager_offsets);
  CHECK(graph.offset() == eager.offset());
  // Reseeding between replays reaches the next replay (the seed is part of the device pair).
  graph.set_state(99, 0);
  const PhiloxArgs b = mg::generator_replay_base(graph, per_replay);
  CHECK(b.seed == 99);
  CHECK(b.offset == 0);
  CHECK(graph.offset() == 8);
}
