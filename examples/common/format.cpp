#include "examples/common/format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace mg::example {

namespace {

std::string non_finite(double v) { return std::isnan(v) ? "nan" : v > 0 ? "inf" : "-inf"; }

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "--:--";
  // Durations beyond ~30 years are not meaningful for a progress bar; clamp before the cast.
  const int64_t total = int64_t(std::floor(std::fmin(seconds, 1e9)));
  const int64_t h = total / 3600, m = total / 60 % 60, s = total % 60;
  char buf[48];
  if (h > 0) {
    std::snprintf(buf, sizeof buf, "%lld:%02lld:%02lld", (long long)h, (long long)m, (long long)s);
  } else {
    std::snprintf(buf, sizeof buf, "%lld:%02lld", (long long)m, (long long)s);
  }
  return buf;
}

std::string format_count(int64_t v) {
  // Digits of |v| from an unsigned magnitude, so INT64_MIN does not overflow.
  const uint64_t mag = v < 0 ? uint64_t(0) - uint64_t(v) : uint64_t(v);
  const std::string digits = std::to_string(mag);
  std::string out = v < 0 ? "-" : "";
  for (std::size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

std::string format_rate(double v) {
  if (!std::isfinite(v)) return non_finite(v);
  if (std::fabs(v) >= 100 && std::fabs(v) < 9e18) return format_count(int64_t(std::llround(v)));
  return format_fixed(v, 1);
}

std::string format_number(double v) {
  if (!std::isfinite(v)) return non_finite(v);
  char buf[48];
  if (v == std::floor(v) && std::fabs(v) < 1e15) {
    std::snprintf(buf, sizeof buf, "%.0f", v == 0 ? 0.0 : v);  // no "-0"
  } else {
    std::snprintf(buf, sizeof buf, "%.4g", v);
  }
  return buf;
}

std::size_t display_width(const std::string& s) {
  return std::size_t(
      std::count_if(s.begin(), s.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xC0) != 0x80; }));
}

std::string format_fixed(double v, int digits) {
  if (!std::isfinite(v)) return non_finite(v);
  char buf[400];  // %.*f of 1e308 has 309 digits before the point
  std::snprintf(buf, sizeof buf, "%.*f", digits < 0 ? 0 : digits > 17 ? 17 : digits, v);
  return buf;
}

}  // namespace mg::example
