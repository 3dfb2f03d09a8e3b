// Generator: a Philox stream position (seed, offset). Each random op consumes a block range of
// the stream and advances the offset, so a seeded program is reproducible and the state can be
// saved in a checkpoint.
//
//   mg::manual_seed(42);                   // reseeds the default generator
//   mg::Tensor x = mg::randn({2, 3});      // same values on every run
#pragma once
#include <cstdint>

namespace mg {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0x5eedULL) : seed_(seed) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }
  // Reserves `blocks` Philox blocks (4 words each) and returns the first block's offset.
  uint64_t reserve(uint64_t blocks) {
    const uint64_t o = offset_;
    offset_ += blocks;
    return o;
  }

 private:
  uint64_t seed_;
  uint64_t offset_ = 0;
};

// The process-wide default generator used when none is passed.
Generator& default_generator();
void manual_seed(uint64_t seed);

}  // namespace mg
