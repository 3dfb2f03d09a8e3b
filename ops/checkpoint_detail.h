// Internal to ops/checkpoint*.cpp: mg::checkpoint's two forms (ops/checkpoint.h), and what both
// replay when they run the function again: the autocast states of the first run and the default
// generator's position at its start.
#pragma once
#include <utility>

#include "mixgrad/core/autocast_state.h"
#include "mixgrad/core/generator.h"
#include "mixgrad/ops/checkpoint.h"

namespace mg::checkpoint_detail {

// Called by mg::checkpoint with grad mode on, a function and no graph capture running.
Tensors checkpoint_reentrant(const CheckpointFn& fn, const Tensors& inputs);     // checkpoint_reentrant.cpp
Tensors checkpoint_recomputing(const CheckpointFn& fn, const Tensors& inputs);   // checkpoint_recompute.cpp

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

// The default generator at `p` for a scope, then back where it was.
class GeneratorReplay {
 public:
  explicit GeneratorReplay(const Generator::Position& p) : saved_(default_generator().position()) {
    default_generator().set_state(p.seed, p.offset);
  }
  ~GeneratorReplay() { default_generator().set_state(saved_.seed, saved_.offset); }
  GeneratorReplay(const GeneratorReplay&) = delete;
  GeneratorReplay& operator=(const GeneratorReplay&) = delete;

 private:
  Generator::Position saved_;
};

}  // namespace mg::checkpoint_detail
