// One iteration of dynamic loss scaling (growth tracker, hysteresis, backoff, min/max clamp, skip
// counters) as a host-device function: amp::GradScaler runs it on the host for CPU training, and
// the one-thread CUDA kernel of cuda/kernels/multi_tensor.cu runs the same code on a device copy of
// the state, so the CPU tests of the state machine (tests/amp/test_loss_scale_update.cpp) test
// the GPU's transitions too. It lives in optim/ beside the optimizers' functors (functors.h):
// header-only math both compilers read, with no dependency but core/macros.h.
//
// Decision: the function never throws (it may run on a device); the two user errors of the
// scaler (inf/NaN with the scale at its floor, too many skipped iterations in a row) come back
// as an outcome that the host turns into mg::Error, on the CPU at once, on CUDA when the state is
// read lazily.
//
//   LossScaleState s{.scale = 65536, .hysteresis_left = 1};
//   if (loss_scale_update(s, rule, found_inf) != LossScaleOutcome::Ok) { /* throw */ }
#pragma once
#include <cstdint>

#include "mixgrad/core/macros.h"

namespace mg::fn {

// The options of the transition (GradScalerOptions without init_scale and enabled).
struct LossScaleRule {
  double growth_factor = 2.0;
  double backoff_factor = 0.5;
  int64_t growth_interval = 2000;
  bool has_min = false;
  double min_scale = 0.0;
  bool has_max = false;
  double max_scale = 0.0;
  int64_t hysteresis = 1;
  int64_t max_consecutive_skips = 50;  // 0: never an error
  bool fixed_scale = false;            // a static scale (Apex's loss_scale = 128): counted, never changed
  bool operator==(const LossScaleRule&) const = default;
};

// The scaler's state; on CUDA a device copy, laid out as plain values.
struct LossScaleState {
  double scale = 65536.0;
  int64_t growth_tracker = 0;
  int64_t hysteresis_left = 1;
  int64_t iterations = 0;
  int64_t skipped = 0;
  int64_t consecutive_skips = 0;
  int64_t last_skip = -1;  // iteration of the last skip; -1: none
};

enum class LossScaleOutcome : int32_t {
  Ok = 0,
  AtFloor = 1,        // inf/NaN with the scale already at min_scale (state: iteration and skip counted, tracker 0)
  TooManySkips = 2,   // consecutive_skips reached max_consecutive_skips (state fully updated)
};

// scale limited to [min_scale, max_scale] (each bound only when set).
MG_HOST_DEVICE double loss_scale_clamp(double scale, const LossScaleRule& r) {
  if (r.has_max && scale > r.max_scale) scale = r.max_scale;
  if (r.has_min && scale < r.min_scale) scale = r.min_scale;
  return scale;
}

// Counts this iteration's outcome in the skip counters (every update() does, a given new scale
// too); TooManySkips when consecutive_skips reached max_consecutive_skips.
MG_HOST_DEVICE LossScaleOutcome loss_scale_count(LossScaleState& s, const LossScaleRule& r, bool found_inf) {
  if (found_inf) {
    ++s.skipped;
    ++s.consecutive_skips;
    s.last_skip = s.iterations;
  } else {
    s.consecutive_skips = 0;
  }
  if (r.max_consecutive_skips != 0 && s.consecutive_skips >= r.max_consecutive_skips) {
    return LossScaleOutcome::TooManySkips;
  }
  return LossScaleOutcome::Ok;
}

// One update(): back off when this iteration saw inf/NaN (after `hysteresis` such iterations),
// grow after growth_interval clean iterations in a row, clamp, and count skips. A fixed scale only
// counts.
MG_HOST_DEVICE LossScaleOutcome loss_scale_update(LossScaleState& s, const LossScaleRule& r, bool found_inf) {
  ++s.iterations;
  if (r.fixed_scale) {
    // No growth, no backoff (so no floor error); the skip still counts.
  } else if (found_inf) {
    s.growth_tracker = 0;
    if (s.hysteresis_left > 1) {
      --s.hysteresis_left;  // tolerated: skip the step but keep the scale
    } else {
      if (r.has_min && s.scale <= r.min_scale) {
        (void)loss_scale_count(s, r, found_inf);  // the skip counts; the floor error comes first
        return LossScaleOutcome::AtFloor;
      }
      s.scale = loss_scale_clamp(s.scale * r.backoff_factor, r);
      s.hysteresis_left = r.hysteresis;
    }
  } else if (++s.growth_tracker >= r.growth_interval) {
    // As PyTorch: no growth past f32's largest value (the scale multiplies f32 losses; every
    // scaled loss would be inf and the scale would only back off again).
    constexpr double kF32Max = 3.4028234663852886e+38;
    const double grown = s.scale * r.growth_factor;
    if (grown <= kF32Max) s.scale = loss_scale_clamp(grown, r);
    s.growth_tracker = 0;
    s.hysteresis_left = r.hysteresis;
  }
  return loss_scale_count(s, r, found_inf);
}

}  // namespace mg::fn
