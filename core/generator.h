// Generator: a Philox stream position (seed, offset). Each random op consumes a block range of
// the stream and advances the offset, so a seeded program is reproducible and the state can be
// saved in a checkpoint.
//
//   mg::manual_seed(42);                   // reseeds the default generator
//   mg::Tensor x = mg::randn({2, 3});      // same values on every run
//
// The one decision a reader must know: a CUDA graph captures a kernel's arguments once, so a
// random op captured with (seed, offset) by value would draw the same numbers at every replay.
// While a graph captures (cuda::Graph), a generator hands graph-safe ops (dropout on CUDA) a
// device pointer to {seed, base offset} plus an offset *within* the graph; before each replay the
// graph writes the generator's current (seed, offset) there and advances the generator by what the
// graph consumes (replay_base). Ops without a graph-safe path refuse to draw during a capture.
#pragma once
#include <cstdint>
#include <string>

namespace mg {

// Where a random op's Philox stream starts. Eager: seed and offset by value. During a graph
// capture: `device_base` points at a device i64 pair {seed, base offset} written before each
// replay, and the op's stream starts at base offset + `offset` with the seed read there too.
struct PhiloxArgs {
  uint64_t seed = 0;
  uint64_t offset = 0;
  const int64_t* device_base = nullptr;  // device [2] i64, or null (eager)
};

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eedULL) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  // Sets the stream position. Not during a capture (the graph owns the position then).
  void set_state(uint64_t seed, uint64_t offset);
  // Reserves `blocks` Philox blocks (4 words each) and returns the first block's offset. During a
  // graph capture it throws (the draw would repeat at every replay), naming `who`.
  uint64_t reserve(uint64_t blocks, const char* who = "a random op");
  // reserve() for an op that can read its stream position from device memory: eager, the same as
  // {seed(), reserve(blocks)}; during a capture, the graph's device base and the offset within the
  // graph (the generator's own position does not move until the graph is replayed).
  PhiloxArgs reserve_graph_safe(uint64_t blocks);

  // ---- CUDA graph capture (called by cuda::Graph) ----
  // Starts a capture: graph-safe draws read {seed, base} from `device_base` (device [2] i64) and
  // get offsets from 0 up. Throws if a capture is already in progress.
  void begin_capture(const int64_t* device_base);
  // Ends the capture and returns the Philox blocks one replay consumes.
  uint64_t end_capture();
  bool capturing() const { return device_base_ != nullptr; }
  // Before a replay of a graph that consumes `blocks` per replay: the (seed, base offset) that
  // replay must read, after which the generator has advanced past it, as if the captured ops had
  // run eagerly. Throws during a capture.
  PhiloxArgs replay_base(uint64_t blocks);

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
  const int64_t* device_base_ = nullptr;  // set while a capture is in progress
  uint64_t graph_offset_ = 0;             // blocks drawn by the capture so far
};

// The process-wide default generator used when none is passed.
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace mg
