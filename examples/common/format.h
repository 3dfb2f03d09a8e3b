// Text formatting of numbers for the examples' terminal output: durations ("1:02:03"), counts
// with thousands separators ("1,234,567"), compact numbers for progress fields ("0.4312",
// "65536") and fixed decimals for tables. Shared by progress.h and table users so that every
// example prints the same way.
//
//   std::printf("%s samples/s, ETA %s\n", format_count(1234567).c_str(), format_duration(75).c_str());
//   // 1,234,567 samples/s, ETA 1:15
#pragma once
#include <cstdint>
#include <string>

namespace mg::example {

// Seconds as "m:ss" below an hour, else "h:mm:ss" (rounded down to whole seconds); negative or
// non-finite → "--:--".
std::string format_duration(double seconds);

// An integer with ',' every three digits: 1234567 → "1,234,567", -1234 → "-1,234".
std::string format_count(int64_t v);

// A rate: thousands separators at 100 and above ("12,345"), one decimal below ("12.5");
// non-finite → "nan"/"inf".
std::string format_rate(double v);

// A compact value: integers up to 1e15 without decimals ("65536", "-3"), anything else with 4
// significant digits ("0.4312", "1.235e-05"), non-finite as "nan", "inf", "-inf".
std::string format_number(double v);

// Characters on screen of UTF-8 text (code points: bytes that do not continue one), for alignment.
std::size_t display_width(const std::string& s);

// Fixed decimals: format_fixed(0.43, 4) → "0.4300"; non-finite as "nan", "inf", "-inf".
std::string format_fixed(double v, int digits);

}  // namespace mg::example
