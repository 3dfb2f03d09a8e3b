// Generator: a Philox stream position (seed, offset). Each random op consumes a block range of
// the stream and advances the offset, so a seeded program is reproducible and the state can be
// saved in a checkpoint.
//
//   mg::manual_seed(42);                   // reseeds the default generator
//   mg::Tensor x = mg::randn({2, 3});      // same values on every run
#pragma once
#include <cstdint>
#include <mutex>

namespace mg {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eedULL) : seed_(seed) {}
  Generator(const Generator& other) : Generator(0) { *this = other; }
  Generator& operator=(const Generator& other) {
    if (this != &other) {
      const Position p = other.position();
      set_state(p.seed, p.offset);
    }
    return *this;
  }

  // The stream position: a draw reads `seed` and takes blocks from `offset` on.
  struct Position {
    uint64_t seed;
    uint64_t offset;
  };
  uint64_t seed() const { return position().seed; }
  uint64_t offset() const { return position().offset; }
  Position position() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return {seed_, offset_};
  }
  void set_state(uint64_t seed, uint64_t offset) {
    std::lock_guard<std::mutex> lock(mutex_);
    seed_ = seed;
    offset_ = offset;
  }
  // Reserves `blocks` Philox blocks (4 words each) and returns the seed and the first block's
  // offset, as one step: threads drawing from one generator (the default one) get disjoint
  // blocks, never the same numbers, and a reseed is never seen half-done (PyTorch locks too).
  // While a GeneratorTape is installed on the calling thread, the tape answers (below).
  Position draw(uint64_t blocks);
  // draw() past any tape: the stream itself.
  Position draw_direct(uint64_t blocks) {
    std::lock_guard<std::mutex> lock(mutex_);
    const Position p{seed_, offset_};
    offset_ += blocks;
    return p;
  }
  uint64_t reserve(uint64_t blocks) { return draw(blocks).offset; }

 private:
  mutable std::mutex mutex_;
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// A thread's redirection of every generator's draws: mg::checkpoint records which generators a
// function drew from and where (so dropout masks can be drawn again), then serves its
// recomputation from those positions without moving any generator. Installed per thread.
class GeneratorTape {
 public:
  virtual ~GeneratorTape() = default;
  virtual Generator::Position draw(Generator& g, uint64_t blocks) = 0;
};

namespace detail {
inline thread_local GeneratorTape* t_generator_tape = nullptr;
}

inline Generator::Position Generator::draw(uint64_t blocks) {
  if (GeneratorTape* tape = detail::t_generator_tape) [[unlikely]] return tape->draw(*this, blocks);
  return draw_direct(blocks);
}

// The process-wide default generator used when none is passed.
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace mg
