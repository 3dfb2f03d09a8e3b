// Internal to ops/checkpoint*.cpp: mg::checkpoint's two forms (ops/checkpoint.h), and what both
// replay when they run the function again: the autocast states of the first run and every random
// draw it made, from any generator.
#pragma once
#include <algorithm>
#include <utility>
#include <vector>

#include "mixgrad/core/autocast_state.h"
#include "mixgrad/core/error.h"
#include "mixgrad/core/generator.h"
#include "mixgrad/ops/checkpoint.h"

namespace mg::checkpoint_detail {

// Called by mg::checkpoint with grad mode on, a function and no graph capture running.
Tensors checkpoint_reentrant(const CheckpointFn& fn, const Tensors& inputs);     // checkpoint_reentrant.cpp
Tensors checkpoint_recomputing(const CheckpointFn& fn, const Tensors& inputs);   // checkpoint_recompute.cpp
// Refuses a checkpoint (its forward or its recomputation) inside a CUDA graph capture that holds
// the default generator, with an error that says so (checkpoint.cpp).
void refuse_inside_capture();

// The autocast states of both device types, set for a scope and restored after it.
struct AutocastSnapshot {
  AutocastState cpu, cuda;
  static AutocastSnapshot take() { return {autocast_state(DeviceType::CPU), autocast_state(DeviceType::CUDA)}; }
};

class AutocastRestore {
 public:
  explicit AutocastRestore(const AutocastSnapshot& s) : saved_(AutocastSnapshot::take()) { apply(s); }
  ~AutocastRestore() { restore(saved_); }
  AutocastRestore(const AutocastRestore&) = delete;
  AutocastRestore& operator=(const AutocastRestore&) = delete;

 private:
  // enabled, dtype and the cache flag; a region's depth stays the thread's own. Outside any
  // region (depth 0: the usual backward after the forward's region ended) casts are not cached,
  // since no region exit would clear them. Whether the dtype came from a region is replayed, so
  // a region inside fn that names no dtype inherits the same one as the first time.
  static void apply(const AutocastSnapshot& s) {
    for (auto [dev, st] : {std::pair{DeviceType::CPU, &s.cpu}, std::pair{DeviceType::CUDA, &s.cuda}}) {
      AutocastState& a = autocast_state(dev);
      a.enabled = st->enabled;
      a.dtype = st->dtype;
      a.cache_enabled = st->cache_enabled && a.depth > 0;
      a.dtype_from_region = st->depth > 0 || st->dtype_from_region;
    }
  }
  static void restore(const AutocastSnapshot& s) {
    for (auto [dev, st] : {std::pair{DeviceType::CPU, &s.cpu}, std::pair{DeviceType::CUDA, &s.cuda}}) {
      AutocastState& a = autocast_state(dev);
      a.enabled = st->enabled;
      a.dtype = st->dtype;
      a.cache_enabled = st->cache_enabled;
      a.dtype_from_region = st->dtype_from_region;
    }
  }
  AutocastSnapshot saved_;
};

// Every draw a function made from any generator, in order: the generator, where the draw started
// and how many blocks it took. Recorded while the function first runs, served again to its
// recomputation.
struct GeneratorDraw {
  const Generator* generator;
  Generator::Position start;
  uint64_t blocks;
};
using GeneratorDraws = std::vector<GeneratorDraw>;

// Records this thread's draws for a scope, then passes them on (to an enclosing recorder or
// replayer, or to the generator itself). Each draw is recorded where it really started, so draws
// of other threads from the same generator in between (a data loader's) do not disturb the replay.
class GeneratorRecorder final : public GeneratorTape {
 public:
  GeneratorRecorder() : previous_(detail::t_generator_tape) { detail::t_generator_tape = this; }
  ~GeneratorRecorder() override { detail::t_generator_tape = previous_; }
  GeneratorRecorder(const GeneratorRecorder&) = delete;
  GeneratorRecorder& operator=(const GeneratorRecorder&) = delete;
  Generator::Position draw(Generator& g, uint64_t blocks) override {
    const Generator::Position p = previous_ ? previous_->draw(g, blocks) : g.draw_direct(blocks);
    draws_.push_back({&g, p, blocks});
    return p;
  }
  GeneratorDraws take() { return std::move(draws_); }

 private:
  GeneratorTape* previous_;
  GeneratorDraws draws_;
};

// Serves a recomputation's draws from the recorded ones, in order per generator, without moving any
// generator (so a recomputation on one thread never disturbs another thread's draws). A draw the
// first run did not make, or of another size, is a named error.
class GeneratorReplayer final : public GeneratorTape {
 public:
  explicit GeneratorReplayer(const GeneratorDraws& draws, const char* who)
      : draws_(draws), used_(draws.size(), false), who_(who), previous_(detail::t_generator_tape) {
    detail::t_generator_tape = this;
  }
  ~GeneratorReplayer() override { detail::t_generator_tape = previous_; }
  GeneratorReplayer(const GeneratorReplayer&) = delete;
  GeneratorReplayer& operator=(const GeneratorReplayer&) = delete;
  Generator::Position draw(Generator& g, uint64_t blocks) override {
    const Generator* recorded = recorded_as(&g);
    for (std::size_t i = 0; i < draws_.size(); ++i) {  // the first unused draw of g (a few per function)
      if (used_[i] || draws_[i].generator != recorded) continue;
      MG_CHECK(draws_[i].blocks == blocks, AutogradError, who_, ": the recomputation drew ", blocks,
               " random blocks where the first run drew ", draws_[i].blocks,
               "\n  hint: a checkpointed function must compute the same thing each time it runs");
      used_[i] = true;
      return draws_[i].start;
    }
    MG_THROW(AutogradError, who_, ": the recomputation drew random numbers the first run did not draw",
             "\n  hint: a checkpointed function must compute the same thing each time it runs");
  }

 private:
  // The generator whose recorded draws g's draws replay. Normally g itself; a generator the first
  // run never drew from at this address is one the function creates itself (a seeded local), which
  // now lives elsewhere: it takes the generator of the first unused draw no generator of this
  // replay has claimed, and keeps it for its later draws.
  const Generator* recorded_as(const Generator* g) {
    for (const auto& [now, then] : aliases_) {
      if (now == g) return then;
    }
    const auto claimed = [&](const Generator* r) {
      for (const auto& [now, then] : aliases_) {
        if (then == r) return true;
      }
      return false;
    };
    const Generator* then = g;
    if (std::none_of(draws_.begin(), draws_.end(), [&](const GeneratorDraw& d) { return d.generator == g; })) {
      for (std::size_t i = 0; i < draws_.size(); ++i) {
        if (!used_[i] && !claimed(draws_[i].generator)) {
          then = draws_[i].generator;
          break;
        }
      }
    }
    aliases_.emplace_back(g, then);
    return then;
  }

  const GeneratorDraws& draws_;
  std::vector<bool> used_;
  const char* who_;
  GeneratorTape* previous_;
  std::vector<std::pair<const Generator*, const Generator*>> aliases_;  // (generator now, recorded one)
};

}  // namespace mg::checkpoint_detail
