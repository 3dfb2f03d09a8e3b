// The numeric flags of the distributed benchmarks (bench_allreduce, bench_allreduce_sweep): a flag's
// value read strictly, so "--mib abc" or "--mib -1" is an error naming the flag instead of a
// silent 0 (atof) or an abort later.
#pragma once
#include <cmath>
#include <cstdlib>
#include <stdexcept>

#include "core/error.h"

namespace mg::bench {

// The number after `flag`, whole text consumed, finite and within [lo, hi]; std::invalid_argument
// naming the flag otherwise (the programs' main turns it into exit code 2).
inline double number_arg(const char* flag, const char* text, double lo, double hi) {
  char* end = nullptr;
  const double v = std::strtod(text, &end);
  if (end == text || *end != '\0' || !std::isfinite(v) || v < lo || v > hi) {
    throw std::invalid_argument(str_cat(flag, " ", text, ": expected a number in [", lo, ", ", hi, "]"));
  }
  return v;
}

}  // namespace mg::bench
