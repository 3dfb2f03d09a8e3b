// Reducers of the remaining reductions (prod, amax/amin, max_dim/argmax, var/std, norm,
// logsumexp) for the CPU launcher reduce_loop (ops/cpu/reduce_loop.h: Acc, init, run, combine,
// finish). Sums accumulate in f32 for f16/bf16/f32 and f64 for f64 (acc_t); reduce_loop hands each
// reducer one leaf (<= kSumLeaf elements) at a time and combines leaves pairwise (core/cascade_sum.h),
// so run() is a plain fold; max/min keep the value in opmath, which is exact. NaN wins every max/min
// comparison (as PyTorch), and the first index wins ties, also across parallel chunks.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "mixgrad/core/cascade_sum.h"
#include "mixgrad/core/dtype.h"
#include "mixgrad/ops/functors.h"

namespace mg::cpu {

template <typename V>
inline bool is_nan(V v) {
  return v != v;  // false for every integer
}

// Integer products and sums wrap around (two's complement) instead of overflowing (UB).
using fn::wrapping_add;
using fn::wrapping_mul;

// Smallest / largest value of the opmath type: ±inf for floats, the limits for integers.
template <typename A>
constexpr A lowest_value() {
  return std::numeric_limits<A>::has_infinity ? -std::numeric_limits<A>::infinity()
                                              : std::numeric_limits<A>::lowest();
}
template <typename A>
constexpr A highest_value() {
  return std::numeric_limits<A>::has_infinity ? std::numeric_limits<A>::infinity()
                                              : std::numeric_limits<A>::max();
}

// True when v should replace `best` in a max (kMax) or min reduction: NaN beats everything, and
// nothing beats NaN.
template <bool kMax, typename A>
inline bool beats(A v, A best) {
  if (is_nan(best)) return false;
  return is_nan(v) || (kMax ? v > best : v < best);
}

// The max (kMax) or min of m and v where NaN wins, written as a select so that loops of it
// vectorize (unlike beats, it lets a later NaN replace an earlier one).
template <bool kMax, typename A>
inline A extremum_step(A m, A v) {
  return ((kMax ? v > m : v < m) || v != v) ? v : m;
}

// The max (kMax) or min of x[0, n) in A, folded in 16 lanes that gcc vectorizes (-inf / +inf
// when empty, NaN when any value is NaN). The extremum is exact; with several NaNs or a tie of +0
// and -0, which one comes out is unspecified (callers that care fold those cases serially).
template <bool kMax, typename A, typename T>
A lanes_extremum(const T* x, int64_t n) {
  const A init = kMax ? lowest_value<A>() : highest_value<A>();
  A lanes[16];
  std::fill(lanes, lanes + 16, init);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
#pragma GCC unroll 1
    for (int k = 0; k < 16; ++k) lanes[k] = extremum_step<kMax>(lanes[k], static_cast<A>(x[i + k]));
  }
  A m = init;
  for (int k = 0; k < 16; ++k) m = extremum_step<kMax>(m, lanes[k]);
  for (; i < n; ++i) m = extremum_step<kMax>(m, static_cast<A>(x[i]));
  return m;
}

// prod; O is T for floating T and i64 for integers and bool.
template <typename T, typename O>
struct ProdReducer {
  using Acc = acc_t<T>;  // f32 for f16/bf16/f32, f64 for f64, i64 for integers
  Acc init() const { return Acc(1); }
  Acc run(Acc acc, const T* p, int64_t n, int64_t stride, int64_t) const {
    for (int64_t i = 0; i < n; ++i) acc = wrapping_mul(acc, static_cast<Acc>(p[i * stride]));
    return acc;
  }
  Acc combine(Acc a, Acc b) const { return wrapping_mul(a, b); }
  O finish(Acc acc, int64_t) const { return static_cast<O>(acc); }
};

// amax (kMax) / amin. The caller rejects empty reductions.
template <typename T, bool kMax>
struct ExtremumReducer {
  using Acc = opmath_t<T>;  // the value itself (exact); no accumulation
  Acc init() const { return kMax ? lowest_value<Acc>() : highest_value<Acc>(); }
  Acc run(Acc acc, const T* p, int64_t n, int64_t stride, int64_t) const {
    if constexpr (std::is_floating_point_v<T>) {
      // A contiguous f32/f64 run in 16 lanes, which gcc vectorizes (the serial fold ran at ~3 ns per
      // element). The lanes find the same extremum; only which NaN or which signed zero comes out
      // could differ, so a NaN or zero result is found again by the serial fold below.
      if (stride == 1 && n >= 32) {
        const Acc m = lanes_extremum<kMax, Acc>(p, n);
        if (!is_nan(m) && m != Acc(0)) return beats<kMax>(m, acc) ? m : acc;
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      const Acc v = static_cast<Acc>(p[i * stride]);
      if (beats<kMax>(v, acc)) acc = v;
    }
    return acc;
  }
  Acc combine(Acc a, Acc b) const { return beats<kMax>(b, a) ? b : a; }
  T finish(Acc acc, int64_t) const { return static_cast<T>(acc); }
};

// (value, index) of the max (kMax) / min along the reduced range; index -1 while empty.
template <typename T>
struct ValueIndex {
  opmath_t<T> value;
  int64_t index;
};

// max_dim/min_dim (finish gives the pair) and argmax/argmin (ArgIndexReducer gives the index).
template <typename T, bool kMax>
struct ArgReducer {
  using Acc = ValueIndex<T>;  // the value itself (exact) and its position
  Acc init() const { return {kMax ? lowest_value<opmath_t<T>>() : highest_value<opmath_t<T>>(), -1}; }
  Acc run(Acc acc, const T* p, int64_t n, int64_t stride, int64_t first) const {
    for (int64_t i = 0; i < n; ++i) {
      const opmath_t<T> v = static_cast<opmath_t<T>>(p[i * stride]);
      if (acc.index < 0 || beats<kMax>(v, acc.value)) acc = {v, first + i};  // strict: first tie wins
    }
    return acc;
  }
  // a's range lies before b's, so b wins only when strictly better.
  Acc combine(Acc a, Acc b) const {
    if (b.index < 0) return a;
    if (a.index < 0) return b;
    return beats<kMax>(b.value, a.value) ? b : a;
  }
  Acc finish(Acc acc, int64_t) const { return acc; }
};

template <typename T, bool kMax>
struct ArgIndexReducer : ArgReducer<T, kMax> {
  int64_t finish(ValueIndex<T> acc, int64_t) const { return acc.index; }
};

// var / std by Chan's parallel update: every leaf is reduced by two passes over its <= 128 values
// (the corrected two-pass form below), and leaves are merged pairwise with
//   m2 = m2a + m2b + d^2 na nb / n,  d = mean_b - mean_a.
template <typename T, bool kStd>
struct VarReducer {
  using A = acc_t<T>;  // f32 for f16/bf16/f32, f64 for f64
  struct Acc {
    int64_t n;
    A mean;
    A m2;
  };
  double correction = 1.0;

  Acc init() const { return {0, A(0), A(0)}; }
  static Acc merge(Acc a, Acc b) {
    if (b.n == 0) return a;
    if (a.n == 0) return b;
    const int64_t n = a.n + b.n;
    const A d = b.mean - a.mean;
    const A fb = A(b.n) / A(n);
    return {n, a.mean + d * fb, a.m2 + b.m2 + d * d * A(a.n) * fb};
  }
  // One leaf (n <= 128): m0 = Σx / n, then with d = x - m0 both Σd and Σd² in one pass, in 8
  // lanes (vectorizes when contiguous): mean = m0 + Σd / n, m2 = Σd² - (Σd)² / n. A constant leaf
  // gets its value as the mean exactly (x - m0 is exact near m0) and m2 = 0.
  Acc run(Acc acc, const T* p, int64_t n, int64_t stride, int64_t) const {
    auto leaf = [&](auto load) {
      const A m0 = lane_fold<A>(n, load) / A(n);
      A ld[8] = {}, lq[8] = {};
      int64_t i = 0;
      for (; i + 8 <= n; i += 8) {
#pragma GCC unroll 1
        for (int k = 0; k < 8; ++k) {
          const A d = load(i + k) - m0;
          ld[k] += d;
          lq[k] += d * d;
        }
      }
      for (int k = 0; i < n; ++i, ++k) {  // the tail into its lanes, as lane_fold
        const A d = load(i) - m0;
        ld[k] += d;
        lq[k] += d * d;
      }
      const A sd = ((ld[0] + ld[1]) + (ld[2] + ld[3])) + ((ld[4] + ld[5]) + (ld[6] + ld[7]));
      const A sq = ((lq[0] + lq[1]) + (lq[2] + lq[3])) + ((lq[4] + lq[5]) + (lq[6] + lq[7]));
      // Clamped at 0 against rounding, but a NaN (a NaN or an infinity in the line) stays NaN:
      // std::max(0, NaN) is 0, which made var([1, NaN]) 0.
      const A m2 = sq - sd * sd / A(n);
      return Acc{n, m0 + sd / A(n), m2 < A(0) ? A(0) : m2};
    };
    const Acc l = stride == 1 ? leaf([p](int64_t i) { return static_cast<A>(p[i]); })
                              : leaf([p, stride](int64_t i) { return static_cast<A>(p[i * stride]); });
    return merge(acc, l);
  }
  Acc combine(Acc a, Acc b) const { return merge(a, b); }
  // m2 / max(0, N - correction): 0/0 (one element, correction 1) gives NaN, as PyTorch.
  T finish(Acc acc, int64_t count) const {
    const A divisor = A(std::max(0.0, double(count) - correction));
    const A v = acc.m2 / divisor;
    return static_cast<T>(kStd ? std::sqrt(v) : v);
  }
};

enum class NormKind { Zero, One, Two, Inf, NegInf, General };

// p-norms: sum of |x|^p (count of nonzeros for p = 0, max/min |x| for p = ±inf).
template <typename T, NormKind kKind>
struct NormReducer {
  using Acc = acc_t<T>;  // f32 for f16/bf16/f32, f64 for f64
  Acc p = 2;

  Acc init() const { return kKind == NormKind::NegInf ? highest_value<Acc>() : Acc(0); }
  Acc term(Acc a) const {
    if constexpr (kKind == NormKind::Zero) return a != Acc(0) ? Acc(1) : Acc(0);
    if constexpr (kKind == NormKind::Two) return a * a;
    if constexpr (kKind == NormKind::General) return std::pow(a, p);
    return a;
  }
  Acc run(Acc acc, const T* ptr, int64_t n, int64_t stride, int64_t) const {
    if constexpr (kKind == NormKind::Inf || kKind == NormKind::NegInf) {
      for (int64_t i = 0; i < n; ++i) {
        const Acc a = std::abs(static_cast<Acc>(ptr[i * stride]));
        if (beats<kKind == NormKind::Inf>(a, acc)) acc = a;
      }
      return acc;
    } else {
      Acc leaf = 0;
      for (int64_t i = 0; i < n; ++i) leaf += term(std::abs(static_cast<Acc>(ptr[i * stride])));
      acc += leaf;
      return acc;
    }
  }
  Acc combine(Acc a, Acc b) const {
    if constexpr (kKind == NormKind::Inf || kKind == NormKind::NegInf) {
      return beats<kKind == NormKind::Inf>(b, a) ? b : a;
    } else {
      return a + b;
    }
  }
  T finish(Acc acc, int64_t) const {
    if constexpr (kKind == NormKind::Two) return static_cast<T>(std::sqrt(acc));
    if constexpr (kKind == NormKind::General) return static_cast<T>(std::pow(acc, Acc(1) / p));
    return static_cast<T>(acc);
  }
};

// logsumexp by a running (max m, sum s of e^(x - m)) pair: log(sum e^x) = m + log s. A slice of
// only -inf (or an empty one) gives -inf, any +inf gives +inf, any NaN gives NaN.
template <typename T>
struct LogSumExpReducer {
  using A = acc_t<T>;  // f32 for f16/bf16/f32, f64 for f64
  struct Acc {
    A m;
    A s;
  };
  static constexpr A kInf = std::numeric_limits<A>::infinity();

  Acc init() const { return {-kInf, A(0)}; }
  static Acc merge(Acc a, Acc b) {
    if (b.m == -kInf) return a;  // b holds nothing but -inf
    if (a.m == -kInf) return b;
    if (is_nan(a.m) || is_nan(b.m)) return {std::numeric_limits<A>::quiet_NaN(), A(1)};
    if (a.m == kInf || b.m == kInf) return {kInf, A(1)};
    if (a.m >= b.m) return {a.m, a.s + b.s * std::exp(b.m - a.m)};
    return {b.m, b.s + a.s * std::exp(a.m - b.m)};
  }
  Acc run(Acc acc, const T* p, int64_t n, int64_t stride, int64_t) const {
    for (int64_t i = 0; i < n; ++i) {
      const A x = static_cast<A>(p[i * stride]);
      if (x <= acc.m && x != -kInf && acc.m != kInf) {
        acc.s += std::exp(x - acc.m);  // common case: no new maximum
      } else {
        acc = merge(acc, {x, A(1)});
      }
    }
    return acc;
  }
  Acc combine(Acc a, Acc b) const { return merge(a, b); }
  T finish(Acc acc, int64_t) const {
    if (acc.m == -kInf || acc.m == kInf || is_nan(acc.m)) return static_cast<T>(acc.m);
    return static_cast<T>(acc.m + std::log(acc.s));
  }
};

}  // namespace mg::cpu
