#include "examples/common/timer.h"

#include <chrono>

namespace mg::example {

double steady_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

RateMeter::RateMeter(double window_seconds, Clock clock) : window_(window_seconds), clock_(std::move(clock)) {
  records_.emplace_back(clock_(), 0);
}

void RateMeter::add(int64_t count) {
  total_ += count;
  const double now = clock_();
  records_.emplace_back(now, total_);
  // Keep one record at or before the window's start so the window is always fully covered.
  while (records_.size() > 2 && records_[1].first <= now - window_) records_.pop_front();
}

double RateMeter::per_second() const {
  if (records_.size() < 2) return 0.0;
  const auto& [t0, n0] = records_.front();
  const auto& [t1, n1] = records_.back();
  return t1 > t0 ? double(n1 - n0) / (t1 - t0) : 0.0;
}

}  // namespace mg::example
