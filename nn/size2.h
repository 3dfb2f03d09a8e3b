// Size2: a {height, width} pair for layer options that also accepts one number for both, so
// options read like PyTorch's: `.kernel = 3` or `.kernel = {3, 1}`.
#pragma once
#include <array>
#include <cstdint>
#include <string>

#include "mixgrad/core/error.h"

namespace mg::nn {

struct Size2 {
  int64_t h = 0;
  int64_t w = 0;
  Size2() = default;
  Size2(int64_t both) : h(both), w(both) {}  // NOLINT: implicit on purpose (`.kernel = 3`)
  Size2(int64_t height, int64_t width) : h(height), w(width) {}
  std::array<int64_t, 2> array() const { return {h, w}; }
  bool operator==(const Size2&) const = default;
  // "3" when square, else "3x1".
  std::string str() const { return h == w ? str_cat(h) : str_cat(h, "x", w); }
};

}  // namespace mg::nn
