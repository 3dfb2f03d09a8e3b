// Size3: a {depth, height, width} triple for 3-D layer options that also accepts one number for
// all three, as PyTorch's: `.kernel = 3` or `.kernel = {3, 1, 1}`.
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include "mixgrad/core/error.h"

namespace mg::nn {

struct Size3 {
  int64_t d = 0;
  int64_t h = 0;
  int64_t w = 0;
  Size3() = default;
  Size3(int64_t all) : d(all), h(all), w(all) {}  // NOLINT: implicit on purpose (`.kernel = 3`)
  Size3(int64_t depth, int64_t height, int64_t width) : d(depth), h(height), w(width) {}
  std::array<int64_t, 3> array() const { return {d, h, w}; }
  bool operator==(const Size3&) const = default;
  // "3" when cubic, else "3x1x1".
  std::string str() const { return d == h && h == w ? str_cat(d) : str_cat(d, "x", h, "x", w); }
};

}  // namespace mg::nn
