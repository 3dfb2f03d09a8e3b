// format.h and timer.h: durations, counts, rates, compact and fixed numbers, display widths; the
// Stopwatch and the RateMeter's sliding window on a fake clock.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>

#include "examples/common/format.h"
#include "examples/common/timer.h"

using namespace mg::example;

TEST_CASE("format: durations, counts, rates and numbers", "[examples][format]") {
  CHECK(format_duration(0) == "0:00");
  CHECK(format_duration(75.9) == "1:15");
  CHECK(format_duration(3599) == "59:59");
  CHECK(format_duration(3723) == "1:02:03");
  CHECK(format_duration(-1) == "--:--");
  CHECK(format_duration(std::nan("")) == "--:--");
  CHECK(format_duration(1e300) == "277777:46:40");  // clamped to 1e9 s
  CHECK(format_count(0) == "0");
  CHECK(format_count(999) == "999");
  CHECK(format_count(1000) == "1,000");
  CHECK(format_count(-1234567) == "-1,234,567");
  CHECK(format_count(std::numeric_limits<int64_t>::min()) == "-9,223,372,036,854,775,808");
  CHECK(format_rate(12.46) == "12.5");
  CHECK(format_rate(99.94) == "99.9");
  CHECK(format_rate(1234.5) == "1,235");  // llround: half away from zero
  CHECK(format_rate(std::numeric_limits<double>::infinity()) == "inf");
  CHECK(format_number(65536) == "65536");
  CHECK(format_number(-0.0) == "0");
  CHECK(format_number(0.43121) == "0.4312");
  CHECK(format_number(1.23456e-5) == "1.235e-05");
  CHECK(format_number(1e20) == "1e+20");
  CHECK(format_number(-std::numeric_limits<double>::infinity()) == "-inf");
  CHECK(format_number(std::nan("")) == "nan");
  CHECK(format_fixed(0.43, 4) == "0.4300");
  CHECK(format_fixed(2.5, 0) == "2");  // round half to even, like printf
  CHECK(format_fixed(1e308, 2).size() == 312);
  CHECK(display_width("±0.01 × 3") == 9);
  CHECK(display_width("") == 0);
}

TEST_CASE("timer: stopwatch and rate meter on a fake clock", "[examples][timer]") {
  double now = 10.0;
  Clock clock = [&] { return now; };
  Stopwatch sw(clock);
  now = 12.5;
  CHECK(sw.seconds() == 2.5);
  CHECK(sw.restart() == 2.5);
  now = 13.0;
  CHECK(sw.seconds() == 0.5);

  now = 0.0;
  RateMeter rate(/*window_seconds=*/2.0, clock);
  CHECK(rate.per_second() == 0.0);  // nothing recorded yet
  for (int i = 1; i <= 4; ++i) {
    now = i * 0.5;
    rate.add(100);  // 200 samples/s
  }
  CHECK(rate.per_second() == Approx(200.0));
  CHECK(rate.total() == 400);
  for (int i = 5; i <= 12; ++i) {
    now = i * 0.5;
    rate.add(400);  // 800 samples/s from t = 2.5 on
  }
  // the window (2 s) now covers only the fast steps
  CHECK(rate.per_second() == Approx(800.0));
  CHECK(rate.total() == 400 + 8 * 400);
  Stopwatch real;
  CHECK(real.seconds() >= 0.0);
  CHECK(steady_seconds() > 0.0);
}
