// Wall-clock timing for the examples: a Clock (seconds as a double, steady_clock by default and
// replaceable by a fake in tests), a Stopwatch, and a RateMeter that turns "samples done" into
// samples per second over a sliding window, so the rate shown follows the current speed rather
// than the average since the start (which hides a slowdown).
//
//   RateMeter rate;                       // 5-second window on the steady clock
//   for (...) { train_step(); rate.add(batch_size); bar.update(step, fields, rate.per_second()); }
#pragma once
#include <cstdint>
#include <deque>
#include <functional>
#include <utility>

namespace mg::example {

// Seconds since an arbitrary fixed point; must never go backwards.
using Clock = std::function<double()>;

// std::chrono::steady_clock in seconds.
double steady_seconds();

class Stopwatch {
 public:
  explicit Stopwatch(Clock clock = steady_seconds) : clock_(std::move(clock)), start_(clock_()) {}
  double seconds() const { return clock_() - start_; }
  // Returns the seconds since the last restart (or construction) and restarts.
  double restart() {
    const double now = clock_(), elapsed = now - start_;
    start_ = now;
    return elapsed;
  }

 private:
  Clock clock_;
  double start_;
};

class RateMeter {
 public:
  explicit RateMeter(double window_seconds = 5.0, Clock clock = steady_seconds);
  // Records that `count` more samples were finished now.
  void add(int64_t count);
  // Samples per second over the last window_seconds (at least the last two records); 0 until two
  // records exist, and before the first add() the start time counts as the first record.
  double per_second() const;
  int64_t total() const { return total_; }

 private:
  double window_;
  Clock clock_;
  int64_t total_ = 0;
  std::deque<std::pair<double, int64_t>> records_;  // (time, total samples at that time)
};

}  // namespace mg::example
