// fn::loss_scale_update (optim/loss_scale_update.h), the one transition GradScaler runs on the
// host and the CUDA scaler's one-thread kernel runs on the device: every transition exactly —
// growth after growth_interval clean iterations and not before, backoff, hysteresis counting
// down and re-arming on backoff and growth, min/max clamps, the floor and too-many-skips
// outcomes and the state they leave, skip counters and last_skip.
#include <catch2/catch.hpp>

#include "optim/loss_scale_update.h"

using namespace mg::fn;

namespace {
LossScaleState fresh(double scale, int64_t hysteresis = 1) {
  LossScaleState s;
  s.scale = scale;
  s.hysteresis_left = hysteresis;
  return s;
}
}  // namespace

TEST_CASE("loss_scale_update grows exactly after growth_interval clean iterations", "[amp][scaler]") {
  const LossScaleRule r{.growth_interval = 3};
  LossScaleState s = fresh(8);
  CHECK(loss_scale_update(s, r, false) == LossScaleOutcome::Ok);
  CHECK(loss_scale_update(s, r, false) == LossScaleOutcome::Ok);
  CHECK(s.scale == 8);
  CHECK(s.growth_tracker == 2);
  CHECK(loss_scale_update(s, r, false) == LossScaleOutcome::Ok);
  CHECK(s.scale == 16);
  CHECK(s.growth_tracker == 0);
  CHECK(s.iterations == 3);
  CHECK(s.skipped == 0);
  CHECK(s.last_skip == -1);
}

TEST_CASE("loss_scale_update does not grow past f32's largest value, as PyTorch", "[amp][scaler]") {
  // growth_factor 1e10 every 2 clean iterations from 3.3e4: 3.3e14, 3.3e24, 3.3e34, then 3.3e44
  // would be inf in f32, so the scale stays (PyTorch's sequence); the tracker still restarts.
  const LossScaleRule r{.growth_factor = 1e10, .growth_interval = 2};
  LossScaleState s = fresh(3.3e4);
  double want = 3.3e4;
  for (int g = 0; g < 3; ++g) {
    for (int i = 0; i < 2; ++i) CHECK(loss_scale_update(s, r, false) == LossScaleOutcome::Ok);
    want *= 1e10;
    CHECK(s.scale == want);
  }
  for (int i = 0; i < 6; ++i) CHECK(loss_scale_update(s, r, false) == LossScaleOutcome::Ok);
  CHECK(s.scale == want);
  CHECK(s.growth_tracker == 0);
  // Up to f32's largest value it still grows: 1.5e38 -> 3e38, then 6e38 is refused.
  const LossScaleRule two{.growth_interval = 1};
  LossScaleState t = fresh(1.5e38);
  (void)loss_scale_update(t, two, false);
  CHECK(t.scale == 3e38);
  (void)loss_scale_update(t, two, false);
  CHECK(t.scale == 3e38);
}

TEST_CASE("loss_scale_update backs off on inf, resets the tracker and counts the skip", "[amp][scaler]") {
  const LossScaleRule r{.growth_interval = 3};
  LossScaleState s = fresh(8);
  loss_scale_update(s, r, false);
  loss_scale_update(s, r, false);
  CHECK(loss_scale_update(s, r, true) == LossScaleOutcome::Ok);
  CHECK(s.scale == 4);
  CHECK(s.growth_tracker == 0);
  CHECK(s.skipped == 1);
  CHECK(s.consecutive_skips == 1);
  CHECK(s.last_skip == 3);
  loss_scale_update(s, r, true);
  CHECK(s.scale == 2);
  CHECK(s.consecutive_skips == 2);
  CHECK(s.last_skip == 4);
  loss_scale_update(s, r, false);
  CHECK(s.consecutive_skips == 0);
  CHECK(s.skipped == 2);
  CHECK(s.last_skip == 4);
  CHECK(s.growth_tracker == 1);
}

TEST_CASE("loss_scale_update hysteresis keeps the scale until it runs out and re-arms", "[amp][scaler]") {
  const LossScaleRule r{.growth_interval = 2, .hysteresis = 3};
  LossScaleState s = fresh(64, 3);
  loss_scale_update(s, r, true);
  CHECK(s.scale == 64);
  CHECK(s.hysteresis_left == 2);
  loss_scale_update(s, r, true);
  CHECK(s.scale == 64);
  CHECK(s.hysteresis_left == 1);
  loss_scale_update(s, r, true);  // out of tolerance: back off and re-arm
  CHECK(s.scale == 32);
  CHECK(s.hysteresis_left == 3);
  loss_scale_update(s, r, true);
  CHECK(s.hysteresis_left == 2);
  loss_scale_update(s, r, false);
  CHECK(s.hysteresis_left == 2);  // a clean iteration alone does not re-arm
  loss_scale_update(s, r, false);  // growth re-arms
  CHECK(s.scale == 64);
  CHECK(s.hysteresis_left == 3);
  CHECK(s.skipped == 4);
}

TEST_CASE("loss_scale_update clamps to max_scale and min_scale and reports the floor", "[amp][scaler]") {
  const LossScaleRule r{.growth_interval = 1, .has_min = true, .min_scale = 3, .has_max = true, .max_scale = 20};
  LossScaleState s = fresh(16);
  loss_scale_update(s, r, false);
  CHECK(s.scale == 20);  // 32 clamped
  loss_scale_update(s, r, false);
  CHECK(s.scale == 20);
  loss_scale_update(s, r, true);
  CHECK(s.scale == 10);
  loss_scale_update(s, r, true);
  CHECK(s.scale == 5);
  loss_scale_update(s, r, true);
  CHECK(s.scale == 3);  // 2.5 clamped up to the floor
  const LossScaleState before = s;
  CHECK(loss_scale_update(s, r, true) == LossScaleOutcome::AtFloor);
  CHECK(s.scale == 3);
  CHECK(s.iterations == before.iterations + 1);  // counted, tracker reset, and the skip counted too:
  CHECK(s.growth_tracker == 0);                  // the iteration is over (the scaler goes on after
  CHECK(s.skipped == before.skipped + 1);        // the error), and it was skipped
  CHECK(s.consecutive_skips == before.consecutive_skips + 1);
  CHECK(s.last_skip == s.iterations);
}

TEST_CASE("loss_scale_update reports too many consecutive skips after updating the state", "[amp][scaler]") {
  const LossScaleRule r{.max_consecutive_skips = 3};
  LossScaleState s = fresh(1024);
  CHECK(loss_scale_update(s, r, true) == LossScaleOutcome::Ok);
  CHECK(loss_scale_update(s, r, true) == LossScaleOutcome::Ok);
  CHECK(loss_scale_update(s, r, true) == LossScaleOutcome::TooManySkips);
  CHECK(s.scale == 128);
  CHECK(s.consecutive_skips == 3);
  const LossScaleRule never{.max_consecutive_skips = 0};
  LossScaleState t = fresh(1024);
  for (int i = 0; i < 100; ++i) CHECK(loss_scale_update(t, never, true) == LossScaleOutcome::Ok);
}

TEST_CASE("loss_scale_count counts a given new scale's iteration like update()", "[amp][scaler]") {
  const LossScaleRule r{};
  LossScaleState s = fresh(8);
  ++s.iterations;
  CHECK(loss_scale_count(s, r, true) == LossScaleOutcome::Ok);
  CHECK(s.skipped == 1);
  CHECK(s.last_skip == 1);
  CHECK(loss_scale_clamp(1e9, {.has_max = true, .max_scale = 100}) == 100);
  CHECK(loss_scale_clamp(1e-9, {.has_min = true, .min_scale = 1}) == 1);
  CHECK(loss_scale_clamp(5, {}) == 5);
}

TEST_CASE("loss_scale_update with a fixed scale only counts: no growth, no backoff, no floor", "[amp][scaler]") {
  const LossScaleRule r{.growth_interval = 1, .has_min = true, .min_scale = 128, .max_consecutive_skips = 3,
                        .fixed_scale = true};
  LossScaleState s = fresh(128);
  CHECK(loss_scale_update(s, r, false) == LossScaleOutcome::Ok);  // growth_interval 1 would grow
  CHECK(loss_scale_update(s, r, true) == LossScaleOutcome::Ok);   // at min_scale a dynamic rule reports AtFloor
  CHECK(s.scale == 128);
  CHECK(s.iterations == 2);
  CHECK(s.skipped == 1);
  CHECK(s.last_skip == 2);
  CHECK(s.growth_tracker == 0);
  CHECK(loss_scale_update(s, r, true) == LossScaleOutcome::Ok);
  CHECK(loss_scale_update(s, r, true) == LossScaleOutcome::TooManySkips);
  CHECK(s.scale == 128);
}
