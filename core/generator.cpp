// The generator's stream bookkeeping, eager and under a CUDA graph capture (see the header).
#include "mixgrad/core/generator.h"

#include "mixgrad/core/error.h"

namespace mg {

void Generator::set_state(uint64_t seed, uint64_t offset) {
  MG_CHECK(!capturing(), Error,
           "Generator::set_state: the generator is being captured into a CUDA graph; its position "
           "belongs to the graph until the capture ends\n  hint: reseed before the capture or between replays");
  seed_ = seed;
  offset_ = offset;
}

uint64_t Generator::reserve(uint64_t blocks, const char* who) {
  MG_CHECK(!capturing(), Error, "Generator: ", who,
           " drew random numbers during a CUDA graph capture, but it has no graph-safe path: its draw "
           "would be frozen into the graph and repeat at every replay"
           "\n  hint: draw it outside the captured step (e.g. into a static input), or use dropout, which reads "
           "its stream position from device memory");
  const uint64_t o = offset_;
  offset_ += blocks;
  return o;
}

PhiloxArgs Generator::reserve_graph_safe(uint64_t blocks) {
  if (!capturing()) return {seed_, reserve(blocks), nullptr};
  const uint64_t o = graph_offset_;
  graph_offset_ += blocks;
  return {0, o, device_base_};
}

void Generator::begin_capture(const int64_t* device_base) {
  MG_CHECK(device_base != nullptr, Error, "Generator::begin_capture: no device base given");
  MG_CHECK(!capturing(), Error,
           "Generator::begin_capture: the generator is already being captured into another CUDA graph"
           "\n  hint: capture one graph at a time per generator");
  device_base_ = device_base;
  graph_offset_ = 0;
}

uint64_t Generator::end_capture() {
  MG_CHECK(capturing(), Error, "Generator::end_capture: no capture in progress");
  device_base_ = nullptr;
  const uint64_t used = graph_offset_;
  graph_offset_ = 0;
  return used;
}

PhiloxArgs Generator::replay_base(uint64_t blocks) {
  MG_CHECK(!capturing(), Error,
           "Generator::replay_base: a graph cannot be replayed while this generator is being captured");
  const PhiloxArgs base{seed_, offset_, nullptr};
  offset_ += blocks;
  return base;
}

}  // namespace mg
