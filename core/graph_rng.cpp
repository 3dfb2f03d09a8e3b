// The capture table of generators (see the header).
#include "mixgrad/core/graph_rng.h"

#include <atomic>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "mixgrad/core/error.h"

namespace mg {
namespace {

struct CaptureState {
  const int64_t* device_base = nullptr;
  uint64_t graph_offset = 0;  // blocks drawn by the capture so far
  std::thread::id thread;     // the capturing thread: only its draws belong to the graph
};

struct Table {
  std::mutex mutex;
  std::unordered_map<const Generator*, CaptureState> captures;
  std::atomic<int> count{0};  // captures in progress: the eager fast path reads only this
};
Table& table() {
  static Table* t = new Table();  // never destroyed: generators may draw during static destruction
  return *t;
}

}  // namespace

PhiloxArgs reserve_graph_safe(Generator& gen, uint64_t blocks) {
  Table& t = table();
  if (t.count.load(std::memory_order_acquire) > 0) {
    std::lock_guard<std::mutex> lock(t.mutex);
    const auto it = t.captures.find(&gen);
    if (it != t.captures.end() && it->second.thread == std::this_thread::get_id()) {
      const uint64_t o = it->second.graph_offset;
      it->second.graph_offset += blocks;
      return {0, o, it->second.device_base};
    }
  }
  const Generator::Position p = gen.draw(blocks);
  return {p.seed, p.offset, nullptr};
}

void check_not_captured(const Generator& gen, const char* who) {
  MG_CHECK(!generator_captured(gen), Error, "Generator: ", who,
           " drew random numbers during a CUDA graph capture, but it has no graph-safe path: its draw "
           "would be frozen into the graph and repeat at every replay"
           "\n  hint: draw it outside the captured step (e.g. into a static input), or use dropout, which reads "
           "its stream position from device memory");
}

bool generator_captured(const Generator& gen) {
  Table& t = table();
  if (t.count.load(std::memory_order_acquire) == 0) return false;
  std::lock_guard<std::mutex> lock(t.mutex);
  const auto it = t.captures.find(&gen);
  return it != t.captures.end() && it->second.thread == std::this_thread::get_id();
}

void begin_generator_capture(Generator& gen, const int64_t* device_base) {
  MG_CHECK(device_base != nullptr, Error, "begin_generator_capture: no device base given");
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  MG_CHECK(t.captures.count(&gen) == 0, Error,
           "Generator: already being captured into another CUDA graph\n  hint: capture one graph at a time per generator");
  t.captures[&gen] = {device_base, 0, std::this_thread::get_id()};
  t.count.fetch_add(1, std::memory_order_release);
}

uint64_t end_generator_capture(Generator& gen) {
  Table& t = table();
  std::lock_guard<std::mutex> lock(t.mutex);
  const auto it = t.captures.find(&gen);
  MG_CHECK(it != t.captures.end(), Error, "end_generator_capture: no capture of this generator in progress");
  const uint64_t used = it->second.graph_offset;
  t.captures.erase(it);
  t.count.fetch_sub(1, std::memory_order_release);
  return used;
}

PhiloxArgs generator_replay_base(Generator& gen, uint64_t blocks) {
  MG_CHECK(!generator_captured(gen), Error,
           "Generator: a graph cannot be replayed while this generator is being captured");
  const Generator::Position p = gen.draw(blocks);
  return {p.seed, p.offset, nullptr};
}

}  // namespace mg
