// A generator's part in a CUDA graph capture. A graph records kernels with their arguments once,
// so a random op captured with its (seed, offset) by value would draw the same numbers at every
// replay. While a graph captures (cuda::Graph), a captured generator hands graph-safe ops (dropout
// on CUDA) a device pointer to {seed, base offset} plus an offset *within* the graph; before each
// replay the graph writes the generator's current (seed, offset) there and advances the generator
// by what the graph consumes (generator_replay_base), so replays draw what eager steps would have.
// Draws without a graph-safe path (random factories, CPU dropout) refuse during a capture. Only
// the capturing thread's draws belong to the graph: another thread (a data loader's worker, say)
// drawing from the same generator meanwhile draws eagerly, as it would without the capture.
// Decision: the capture state lives beside the generator (a small table keyed by its address), not
// in core/generator.h's class, which stays the plain two-word position every op reads.
//
//   PhiloxArgs r = reserve_graph_safe(gen, blocks);   // {seed, offset, nullptr} when not captured
//   // during a capture: {0, offset within the graph, device {seed, base}}
#pragma once
#include <cstdint>

#include "mixgrad/core/generator.h"

namespace mg {

// Where a random op's Philox stream starts. Eager: seed and offset by value. During a graph
// capture: `device_base` points at a device i64 pair {seed, base offset} written before each
// replay; the stream starts at base offset + `offset`, with the seed read there too.
struct PhiloxArgs {
  uint64_t seed = 0;
  uint64_t offset = 0;
  const int64_t* device_base = nullptr;  // device [2] i64, or null (eager)
};

// gen.reserve(blocks) for an op that can read its stream position from device memory: eager, the
// same as {seed, reserve(blocks)}; during a capture the graph's device base and the offset within
// the graph (the generator's own position does not move until the graph is replayed).
PhiloxArgs reserve_graph_safe(Generator& gen, uint64_t blocks);
// Throws mg::Error when `gen` is being captured: `who` (e.g. "randn") has no graph-safe path and
// its draw would repeat at every replay. Call before gen.reserve().
void check_not_captured(const Generator& gen, const char* who);

// ---- called by cuda::Graph ----
// Starts capturing `gen`: graph-safe draws read {seed, base} from `device_base` (device [2] i64)
// and get offsets from 0 up. Throws when `gen` is already being captured.
void begin_generator_capture(Generator& gen, const int64_t* device_base);
// Ends the capture and returns the Philox blocks one replay consumes. Throws when none is in progress.
uint64_t end_generator_capture(Generator& gen);
// Whether `gen` is being captured by the calling thread.
bool generator_captured(const Generator& gen);
// Before a replay of a graph that consumes `blocks` per replay: the (seed, base offset) that replay
// must read; the generator advances past it, as if the captured ops had run eagerly. Throws while
// `gen` is being captured.
PhiloxArgs generator_replay_base(Generator& gen, uint64_t blocks);

}  // namespace mg
