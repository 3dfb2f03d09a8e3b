// The CUDA reductions' math, as host-device code: the reducers (what each op folds, how partials
// combine, what it stores) and the per-thread part of the summation tree. The kernels
// (cuda/kernels/reduce.cuh) run exactly these functions; simulate_reduce() below runs them on the
// CPU, thread by thread, so tests/cuda/test_reduce_plan.cpp checks the GPU's algorithm — coverage,
// tails, splits, tie rules — without a GPU. Not its last bits where a reducer multiplies and adds
// (var/std's Welford updates, the 2-norm's v*v sums, logsumexp's combine): nvcc contracts those
// into FMAs (its default --fmad=true) and the host compiler does not; sums, max/min and cumsum
// have no products and agree bit for bit.
//
// The tree of one output (its n terms spread over ry · splits thread lanes, plan in reduce_plan.h):
// 1. each thread folds leaves of kReduceLeaf = 128 of its terms: in order (scalar loads), or in
//    vec interleaved lanes of 128 / vec terms each (16-byte loads), lanes combined pairwise;
// 2. its leaves combine pairwise by a binary counter (ThreadCascade: core/cascade_sum.h's tree);
// 3. the ry threads of a block combine pairwise in shared memory (log2 ry levels);
// 4. with splits > 1, the splits blocks' partials go to a workspace, and a second kernel combines
//    them: each thread at most 4 in order, then pairwise over ry2 threads.
// Depth of any term: d_leaf + ceil(log2 leaves per thread) + log2 ry (+ 3 + log2 ry2 with splits,
// where ry2 <= splits / 2). A thread's leaves hold at least half its terms' worth of 128 each, and
// ry · splits <= n / 16 (the plan keeps >= 8 loads per thread before widening ry and >= 16 before
// splitting), so the levels above the leaf add at most ceil(log2 n) + 6, and with u = 2^-24 (f32
// accumulation) or 2^-53 (f64):
//     |computed - exact| <= (d_leaf + ceil(log2 n) + 6) · u · Σ|x_i|   (+ O(u²))
// with d_leaf = 128 (scalar loads) or 128 / vec + log2 vec (vector loads: 34 for f32, 19 for f16
// and bf16, 65 for f64). No float atomics; the grid depends on the shape, layout and the data's
// 16-byte alignment only (reduce_plan.h): the same bits on every run and every GPU.
// Accumulation (acc_t): f32 for f16/bf16/f32, f64 for f64, i64 (wrapping) for integers and bool.
// NaN wins every max/min comparison; argmax/max_dim ties (and NaNs) resolve to the first index.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "mixgrad/core/dtype.h"
#include "mixgrad/core/macros.h"
#include "mixgrad/cuda/host/reduce_plan.h"

namespace mg::cuda {

// ---- math helpers that name the f32 or f64 function on both compilers ----
MG_HOST_DEVICE float r_exp(float x) { return expf(x); }
MG_HOST_DEVICE double r_exp(double x) { return exp(x); }
MG_HOST_DEVICE float r_log(float x) { return logf(x); }
MG_HOST_DEVICE double r_log(double x) { return log(x); }
MG_HOST_DEVICE float r_sqrt(float x) { return sqrtf(x); }
MG_HOST_DEVICE double r_sqrt(double x) { return sqrt(x); }
MG_HOST_DEVICE float r_pow(float x, float y) { return powf(x, y); }
MG_HOST_DEVICE double r_pow(double x, double y) { return pow(x, y); }
template <typename A>
MG_HOST_DEVICE A r_abs(A x) {
  return x < A(0) ? -x : (x == A(0) ? A(0) : x);  // NaN stays NaN; -0 gives +0 (as std::abs)
}
template <typename A>
MG_HOST_DEVICE bool r_isnan(A v) {
  return v != v;  // false for every integer
}

// Integer sums and products wrap (two's complement) as on the CPU.
template <typename A>
MG_HOST_DEVICE A r_add(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    return A(static_cast<std::make_unsigned_t<A>>(a) + static_cast<std::make_unsigned_t<A>>(b));
  } else {
    return a + b;
  }
}
template <typename A>
MG_HOST_DEVICE A r_mul(A a, A b) {
  if constexpr (std::is_integral_v<A>) {
    return A(static_cast<std::make_unsigned_t<A>>(a) * static_cast<std::make_unsigned_t<A>>(b));
  } else {
    return a * b;
  }
}

template <typename A>
MG_HOST_DEVICE A r_lowest() {
  if constexpr (std::numeric_limits<A>::has_infinity) {
    return -std::numeric_limits<A>::infinity();
  } else {
    return std::numeric_limits<A>::lowest();
  }
}
template <typename A>
MG_HOST_DEVICE A r_highest() {
  if constexpr (std::numeric_limits<A>::has_infinity) {
    return std::numeric_limits<A>::infinity();
  } else {
    return std::numeric_limits<A>::max();
  }
}

// True when v replaces `best` in a max (is_max) or min: NaN beats everything, nothing beats NaN.
template <typename A>
MG_HOST_DEVICE bool r_beats(bool is_max, A v, A best) {
  if (r_isnan(best)) return false;
  return r_isnan(v) || (is_max ? v > best : v < best);
}

// ---- reducers: init, fold(acc, term, position), combine(a, b), store(o, acc, count) ----

// sum (mean = true: mean). O: the output type (T for floats, i64 for integers and bool).
template <typename T, typename O>
struct SumOp {
  using Acc = acc_t<T>;  // f32 for f16/bf16/f32, f64 for f64, i64 for integers
  O* out;
  bool mean;
  MG_HOST_DEVICE Acc init() const { return Acc(0); }
  MG_HOST_DEVICE Acc fold(Acc a, T x, int64_t) const { return r_add(a, static_cast<Acc>(x)); }
  MG_HOST_DEVICE Acc combine(Acc a, Acc b) const { return r_add(a, b); }
  MG_HOST_DEVICE void store(int64_t o, Acc a, int64_t count) const {
    if constexpr (std::is_floating_point_v<Acc>) {
      if (mean) {
        out[o] = static_cast<O>(a / static_cast<Acc>(count));  // 0 / 0 = NaN for an empty mean
        return;
      }
    }
    out[o] = static_cast<O>(a);
  }
};

template <typename T, typename O>
struct ProdOp {
  using Acc = acc_t<T>;  // f32 for f16/bf16/f32, f64 for f64, i64 for integers
  O* out;
  MG_HOST_DEVICE Acc init() const { return Acc(1); }
  MG_HOST_DEVICE Acc fold(Acc a, T x, int64_t) const { return r_mul(a, static_cast<Acc>(x)); }
  MG_HOST_DEVICE Acc combine(Acc a, Acc b) const { return r_mul(a, b); }
  MG_HOST_DEVICE void store(int64_t o, Acc a, int64_t) const { out[o] = static_cast<O>(a); }
};

template <typename A>
struct ValueIndexAcc {
  A value;
  int64_t index;  // -1: nothing yet
};

// The first position of the max (is_max) or min, shared by ExtremumOp and ArgOp. Partials need
// not arrive in order: equal values (two NaNs, +0 and -0) keep the smaller index.
template <typename A>
MG_HOST_DEVICE ValueIndexAcc<A> first_extremum_fold(bool is_max, ValueIndexAcc<A> a, A v, int64_t r) {
  if (a.index < 0 || r_beats(is_max, v, a.value)) return {v, r};  // strict: the first tie stays
  return a;
}
template <typename A>
MG_HOST_DEVICE ValueIndexAcc<A> first_extremum_combine(bool is_max, ValueIndexAcc<A> a, ValueIndexAcc<A> b) {
  if (b.index < 0) return a;
  if (a.index < 0) return b;
  if (r_beats(is_max, b.value, a.value)) return b;
  if (r_beats(is_max, a.value, b.value)) return a;
  return b.index < a.index ? b : a;
}

// amax (is_max) / amin: the value itself, exact: the first occurrence of the extremum, as the CPU's
// in-order fold returns. Equal values differ only as +0 and -0 (or NaN payloads), and partials
// arrive in any order, so each carries its position, as ArgOp's.
template <typename T>
struct ExtremumOp {
  using Acc = ValueIndexAcc<opmath_t<T>>;
  T* out;
  bool is_max;
  MG_HOST_DEVICE Acc init() const { return {is_max ? r_lowest<opmath_t<T>>() : r_highest<opmath_t<T>>(), -1}; }
  MG_HOST_DEVICE Acc fold(Acc a, T x, int64_t r) const {
    return first_extremum_fold(is_max, a, static_cast<opmath_t<T>>(x), r);
  }
  MG_HOST_DEVICE Acc combine(Acc a, Acc b) const { return first_extremum_combine(is_max, a, b); }
  MG_HOST_DEVICE void store(int64_t o, Acc a, int64_t) const { out[o] = static_cast<T>(a.value); }
};

// max_dim/min_dim (values != nullptr) and argmax/argmin: the first position of the max (min).
template <typename T>
struct ArgOp {
  using Acc = ValueIndexAcc<opmath_t<T>>;  // the value itself (exact) and its position
  T* values;         // may be null (argmax)
  int64_t* indices;
  bool is_max;
  MG_HOST_DEVICE Acc init() const { return {is_max ? r_lowest<opmath_t<T>>() : r_highest<opmath_t<T>>(), -1}; }
  MG_HOST_DEVICE Acc fold(Acc a, T x, int64_t r) const {
    return first_extremum_fold(is_max, a, static_cast<opmath_t<T>>(x), r);
  }
  MG_HOST_DEVICE Acc combine(Acc a, Acc b) const { return first_extremum_combine(is_max, a, b); }
  MG_HOST_DEVICE void store(int64_t o, Acc a, int64_t) const {
    if (values != nullptr) values[o] = static_cast<T>(a.value);
    indices[o] = a.index;
  }
};

template <typename A>
struct MomentsAcc {
  int64_t n;
  A mean;
  A m2;  // Σ (x - mean)²
};

// var / std (is_std): Welford's update per term, partials merged by Chan's formula
//   m2 = m2a + m2b + d² na nb / n,  d = mean_b - mean_a.
// A constant input gives its value as the mean and m2 = 0 exactly.
template <typename T>
struct VarOp {
  using A = acc_t<T>;  // f32 for f16/bf16/f32, f64 for f64
  using Acc = MomentsAcc<A>;
  T* out;
  double correction;
  bool is_std;
  MG_HOST_DEVICE Acc init() const { return {0, A(0), A(0)}; }
  MG_HOST_DEVICE Acc fold(Acc a, T x, int64_t) const {
    const A v = static_cast<A>(x);
    const int64_t n = a.n + 1;
    const A d = v - a.mean;
    const A mean = a.mean + d / A(n);
    return {n, mean, a.m2 + d * (v - mean)};
  }
  MG_HOST_DEVICE Acc combine(Acc a, Acc b) const {
    if (b.n == 0) return a;
    if (a.n == 0) return b;
    const int64_t n = a.n + b.n;
    const A d = b.mean - a.mean;
    const A fb = A(b.n) / A(n);
    return {n, a.mean + d * fb, a.m2 + b.m2 + d * d * A(a.n) * fb};
  }
  // m2 / max(0, N - correction): 0/0 (one term, correction 1; or no term) gives NaN, as the CPU.
  MG_HOST_DEVICE void store(int64_t o, Acc a, int64_t count) const {
    const double c = double(count) - correction;
    const A v = a.m2 / A(c > 0 ? c : 0.0);
    out[o] = static_cast<T>(is_std ? r_sqrt(v) : v);
  }
};

enum class NormKind : int { Zero = 0, One = 1, Two = 2, Inf = 3, NegInf = 4, General = 5 };

// p-norms: Σ|x|^p (the count of nonzeros for p = 0; max / min |x| for p = ±inf).
template <typename T>
struct NormOp {
  using Acc = acc_t<T>;  // f32 for f16/bf16/f32, f64 for f64
  T* out;
  NormKind kind;
  Acc p;
  MG_HOST_DEVICE bool extremum() const { return kind == NormKind::Inf || kind == NormKind::NegInf; }
  MG_HOST_DEVICE Acc init() const { return kind == NormKind::NegInf ? r_highest<Acc>() : Acc(0); }
  MG_HOST_DEVICE Acc fold(Acc a, T x, int64_t) const {
    const Acc v = r_abs(static_cast<Acc>(x));
    switch (kind) {
      case NormKind::Zero: return a + (v != Acc(0) ? Acc(1) : Acc(0));
      case NormKind::One: return a + v;
      case NormKind::Two: return a + v * v;
      case NormKind::Inf: return r_beats(true, v, a) ? v : a;
      case NormKind::NegInf: return r_beats(false, v, a) ? v : a;
      default: return a + r_pow(v, p);
    }
  }
  MG_HOST_DEVICE Acc combine(Acc a, Acc b) const {
    if (extremum()) return r_beats(kind == NormKind::Inf, b, a) ? b : a;
    return a + b;
  }
  MG_HOST_DEVICE void store(int64_t o, Acc a, int64_t) const {
    if (kind == NormKind::Two) a = r_sqrt(a);
    if (kind == NormKind::General) a = r_pow(a, Acc(1) / p);
    out[o] = static_cast<T>(a);
  }
};

template <typename A>
struct MaxSumAcc {
  A m;  // the largest term so far
  A s;  // Σ e^(x - m)
};

// logsumexp = m + log Σ e^(x - m). Only -inf (or nothing) gives -inf, any +inf +inf, NaN NaN.
template <typename T>
struct LogSumExpOp {
  using A = acc_t<T>;  // f32 for f16/bf16/f32, f64 for f64
  using Acc = MaxSumAcc<A>;
  T* out;
  MG_HOST_DEVICE static A inf() { return std::numeric_limits<A>::infinity(); }
  MG_HOST_DEVICE Acc init() const { return {-inf(), A(0)}; }
  MG_HOST_DEVICE Acc combine(Acc a, Acc b) const {
    if (b.m == -inf()) return a;  // b holds nothing but -inf
    if (a.m == -inf()) return b;
    if (r_isnan(a.m) || r_isnan(b.m)) return {std::numeric_limits<A>::quiet_NaN(), A(1)};
    if (a.m == inf() || b.m == inf()) return {inf(), A(1)};
    if (a.m >= b.m) return {a.m, a.s + b.s * r_exp(b.m - a.m)};
    return {b.m, b.s + a.s * r_exp(a.m - b.m)};
  }
  MG_HOST_DEVICE Acc fold(Acc a, T x, int64_t) const {
    const A v = static_cast<A>(x);
    if (v <= a.m && v != -inf() && a.m != inf()) {
      a.s += r_exp(v - a.m);  // common case: no new maximum
      return a;
    }
    return combine(a, {v, A(1)});
  }
  MG_HOST_DEVICE void store(int64_t o, Acc a, int64_t) const {
    if (a.m == -inf() || a.m == inf() || r_isnan(a.m)) {
      out[o] = static_cast<T>(a.m);
      return;
    }
    out[o] = static_cast<T>(a.m + r_log(a.s));
  }
};

// ---- the per-thread part of the tree ----

// core/cascade_sum.h's Cascade for one thread: push leaves in order; result() combines the
// partials of the set bits from the smallest up. combine(a, b): a's leaves before b's.
template <typename Acc>
struct ThreadCascade {
  Acc levels[32];
  uint32_t count;

  template <typename R>
  MG_HOST_DEVICE void push(Acc leaf, const R& r) {
    int level = 0;
    for (uint32_t c = count; c & 1u; c >>= 1, ++level) leaf = r.combine(levels[level], leaf);
    levels[level] = leaf;
    ++count;
  }
  template <typename R>
  MG_HOST_DEVICE Acc result(const R& r) const {
    if (count == 0) return r.init();
    uint32_t c = count;
    int level = 0;
    while ((c & 1u) == 0) {
      c >>= 1;
      ++level;
    }
    Acc acc = levels[level];
    for (c >>= 1; c != 0; c >>= 1) {
      ++level;
      if (c & 1u) acc = r.combine(levels[level], acc);
    }
    return acc;
  }
};

template <typename T, int V>
struct alignas(sizeof(T) * V) ReduceVec {
  T v[V];
};

// The lanes of a vector leaf, combined pairwise: (0 + V/2), ..., then halves again.
template <int V, typename Acc, typename R>
MG_HOST_DEVICE Acc combine_lanes(Acc (&lanes)[V], const R& r) {
  for (int w = V / 2; w >= 1; w /= 2) {
    for (int j = 0; j < w; ++j) lanes[j] = r.combine(lanes[j], lanes[j + w]);
  }
  return lanes[0];
}

// nvcc unrolls the leaf loop so that several loads are in flight; g++ (the CPU model) ignores it.
#ifdef __CUDA_ARCH__
#define MG_REDUCE_UNROLL8 _Pragma("unroll 8")
#else
#define MG_REDUCE_UNROLL8
#endif

// Elements per 16-byte load of T.
template <typename T>
inline constexpr int kReduceVecWidth = int(16 / sizeof(T));

// The partial of one thread: its load units g, g + step, ... of the output whose terms start at
// data + base, folded in leaves of kReduceLeaf terms that combine by ThreadCascade.
template <typename T, typename R>
MG_HOST_DEVICE typename R::Acc reduce_thread(const ReducePlan& p, const R& r, const T* data, int64_t base,
                                             int64_t g, int64_t step) {
  using Acc = typename R::Acc;
  ThreadCascade<Acc> cascade;
  cascade.count = 0;
  constexpr int kV = kReduceVecWidth<T>;
  if (kV > 1 && p.vec == kV) {
    using Vec = ReduceVec<T, kV>;
    constexpr int64_t kLeafUnits = kReduceLeaf / kV;
    const T* row = data + base;
    int64_t u = g;
    // Full leaves: kLeafUnits units, unrolled so that several 16-byte loads are in flight.
    while (u + (kLeafUnits - 1) * step < p.units) {
      Acc lanes[kV];
      for (int j = 0; j < kV; ++j) lanes[j] = r.init();
      MG_REDUCE_UNROLL8
      for (int64_t k = 0; k < kLeafUnits; ++k) {
        const int64_t unit = u + k * step;
        const Vec v = *reinterpret_cast<const Vec*>(row + unit * kV);
        for (int j = 0; j < kV; ++j) lanes[j] = r.fold(lanes[j], v.v[j], unit * kV + j);
      }
      u += kLeafUnits * step;
      cascade.push(combine_lanes<kV>(lanes, r), r);
    }
    if (u < p.units) {  // the last, partial leaf
      Acc lanes[kV];
      for (int j = 0; j < kV; ++j) lanes[j] = r.init();
      for (; u < p.units; u += step) {
        const Vec v = *reinterpret_cast<const Vec*>(row + u * kV);
        for (int j = 0; j < kV; ++j) lanes[j] = r.fold(lanes[j], v.v[j], u * kV + j);
      }
      cascade.push(combine_lanes<kV>(lanes, r), r);
    }
    // The tail: fewer than kV terms after the last full vector, one leaf each.
    for (int64_t t = g; t < p.tail; t += step) {
      const int64_t pos = p.units * kV + t;
      cascade.push(r.fold(r.init(), row[pos], pos), r);
    }
  } else {
    int64_t u = g;
    // Full leaves of kReduceLeaf terms, unrolled so that several loads are in flight.
    while (u + (kReduceLeaf - 1) * step < p.units) {
      Acc leaf = r.init();
      MG_REDUCE_UNROLL8
      for (int64_t k = 0; k < kReduceLeaf; ++k) {
        const int64_t unit = u + k * step;
        leaf = r.fold(leaf, data[base + p.red.offset(unit)], unit);
      }
      u += kReduceLeaf * step;
      cascade.push(leaf, r);
    }
    if (u < p.units) {  // the last, partial leaf
      Acc leaf = r.init();
      for (; u < p.units; u += step) leaf = r.fold(leaf, data[base + p.red.offset(u)], u);
      cascade.push(leaf, r);
    }
  }
  return cascade.result(r);
}

// One level of the shared-memory tree: slot red_lane < w takes in slot red_lane + w.
template <typename Acc, typename R>
MG_HOST_DEVICE void reduce_tree_level(Acc* slots, int slot, int red_lane, int w, const R& r) {
  if (red_lane < w) slots[slot] = r.combine(slots[slot], slots[slot + w]);
}

// Second pass, per thread: partials j = red_lane, red_lane + ry2, ... (< splits, at most 4) of
// output o, in order.
template <typename R>
MG_HOST_DEVICE typename R::Acc reduce_partials(const ReducePlan& p, const R& r, const typename R::Acc* partials,
                                               int64_t o, int red_lane) {
  typename R::Acc acc = r.init();
  for (int64_t j = red_lane; j < p.splits; j += p.ry2) acc = r.combine(acc, partials[o * p.splits + j]);
  return acc;
}

// The whole reduction on the CPU, thread by thread and level by level as the kernels run it:
// the test suite's model of the GPU. data: the input's first element (strides as in the plan).
template <typename T, typename R>
void simulate_reduce(const ReducePlan& p, const R& r, const T* data) {
  using Acc = typename R::Acc;
  if (p.out_numel == 0) return;
  std::vector<Acc> partials(std::size_t(p.splits > 1 ? p.out_numel * p.splits : 0));
  std::vector<Acc> slots(kReduceThreads);
  for (int64_t b = 0; b < p.blocks; ++b) {
    for (int t = 0; t < kReduceThreads; ++t) {
      const ReduceLane l = reduce_lane(p, b, t);
      slots[std::size_t(l.slot)] = l.valid ? reduce_thread<T>(p, r, data, p.kept.offset(l.o), l.g, l.step) : r.init();
    }
    for (int w = p.ry / 2; w >= 1; w /= 2) {
      for (int t = 0; t < kReduceThreads; ++t) {
        const ReduceLane l = reduce_lane(p, b, t);
        reduce_tree_level(slots.data(), l.slot, l.red_lane, w, r);
      }
    }
    for (int t = 0; t < kReduceThreads; ++t) {
      const ReduceLane l = reduce_lane(p, b, t);
      if (l.red_lane != 0 || !l.valid) continue;
      if (p.splits == 1) {
        r.store(l.o, slots[std::size_t(l.slot)], p.red_numel);
      } else {
        partials[std::size_t(l.o * p.splits + l.s)] = slots[std::size_t(l.slot)];
      }
    }
  }
  for (int64_t b = 0; b < p.blocks2; ++b) {
    for (int t = 0; t < kReduceThreads; ++t) {
      const ReduceLane2 l = reduce_lane2(p, b, t);
      slots[std::size_t(l.slot)] = l.valid ? reduce_partials(p, r, partials.data(), l.o, l.red_lane) : r.init();
    }
    for (int w = p.ry2 / 2; w >= 1; w /= 2) {
      for (int t = 0; t < kReduceThreads; ++t) {
        const ReduceLane2 l = reduce_lane2(p, b, t);
        reduce_tree_level(slots.data(), l.slot, l.red_lane, w, r);
      }
    }
    for (int t = 0; t < kReduceThreads; ++t) {
      const ReduceLane2 l = reduce_lane2(p, b, t);
      if (l.red_lane == 0 && l.valid) r.store(l.o, slots[std::size_t(l.slot)], p.red_numel);
    }
  }
}

}  // namespace mg::cuda

namespace mg::cuda {

// ---- cumsum: one line per thread, by the CPU's rule (ops/cpu/reduce_more_kernels.cpp) ----

// The leaf offsets of a floating cumsum (the CPU's PrefixCascade): push the leaves' sums in order;
// offset() is the sum of the leaves so far as the left-to-right sum of the pairwise nodes that
// cover them, largest first.
template <typename Acc>
struct PrefixCascade {
  Acc levels[32];
  Acc running[32];  // running[l]: the partials of the set bits >= l, added from the largest
  uint32_t count;

  MG_HOST_DEVICE static int lowest_bit(uint32_t c) {
    int b = 0;
    while ((c & 1u) == 0) {
      c >>= 1;
      ++b;
    }
    return b;
  }
  MG_HOST_DEVICE void push(Acc leaf) {
    int level = 0;
    for (uint32_t c = count; c & 1u; c >>= 1, ++level) leaf = levels[level] + leaf;
    levels[level] = leaf;
    ++count;
    const uint32_t above = level + 1 < 32 ? count >> (level + 1) : 0;
    running[level] = above == 0 ? leaf : running[level + 1 + lowest_bit(above)] + leaf;
  }
  MG_HOST_DEVICE Acc offset() const { return count == 0 ? Acc(0) : running[lowest_bit(count)]; }
};

// dst[i · dst_stride] = Σ_{k <= i} src[k · src_stride] for i < n. Floating: in order within each
// leaf of kReduceLeaf terms, each leaf's offset from PrefixCascade, so every prefix is within
// (129 + 2 ceil(log2 leaves)) · u · Σ|x| and the result equals the CPU's bit for bit (the same
// additions in the same order; there is no product to contract). Integers: in order, wrapping.
template <typename T, typename O>
MG_HOST_DEVICE void cumsum_line(const T* src, int64_t src_stride, int64_t n, O* dst, int64_t dst_stride) {
  using Acc = acc_t<T>;  // f32 for f16/bf16/f32, f64 for f64, i64 for integers
  if constexpr (std::is_floating_point_v<Acc>) {
    if (n > kReduceLeaf) {
      PrefixCascade<Acc> before;
      before.count = 0;
      for (int64_t l0 = 0; l0 < n; l0 += kReduceLeaf) {
        const Acc offset = before.offset();
        const int64_t l1 = l0 + kReduceLeaf < n ? l0 + kReduceLeaf : n;
        Acc leaf = Acc(0);
        for (int64_t i = l0; i < l1; ++i) {
          leaf += static_cast<Acc>(src[i * src_stride]);
          dst[i * dst_stride] = static_cast<O>(offset + leaf);
        }
        before.push(leaf);
      }
      return;
    }
  }
  Acc acc = Acc(0);
  for (int64_t i = 0; i < n; ++i) {
    acc = r_add(acc, static_cast<Acc>(src[i * src_stride]));
    dst[i * dst_stride] = static_cast<O>(acc);
  }
}

}  // namespace mg::cuda

namespace mg::cuda {

// ---- cumsum of lines longer than a leaf, in parallel and with the same bits ----
// The CPU's rule computed out of order: (1) every leaf's in-order sum, one thread per leaf;
// (2) the pairwise nodes above them, level by level (node (b, j) = node (b-1, 2j) + node (b-1, 2j+1),
// exactly the Cascade's partials); (3) one thread per leaf: its offset is the left-to-right sum of
// the nodes covering the leaves before it, largest first (what PrefixCascade::offset() returns),
// then the leaf's in-order running sum from that offset. The same additions as the CPU's
// sequential loop, so the same bits.

// Where each level's nodes sit in a line's workspace: level b holds leaves >> b nodes.
struct ScanLevels {
  int count;            // levels: the largest b with leaves >> b >= 1, plus one
  int64_t leaves;
  int64_t start[40];    // first node of level b
  int64_t total;        // nodes of all levels: a line's workspace
};

inline ScanLevels make_scan_levels(int64_t leaves) {
  ScanLevels lv{};
  lv.leaves = leaves;
  for (int64_t nodes = leaves; nodes >= 1 && lv.count < 40; nodes >>= 1) {
    lv.start[lv.count++] = lv.total;
    lv.total += nodes;
  }
  return lv;
}

// The in-order sum of terms [l0, l1) of a line.
template <typename T>
MG_HOST_DEVICE acc_t<T> cumsum_leaf_total(const T* src, int64_t src_stride, int64_t l0, int64_t l1) {
  acc_t<T> leaf = acc_t<T>(0);  // f32 for f16/bf16/f32, f64 for f64, i64 (wrapping) for integers
  for (int64_t i = l0; i < l1; ++i) leaf = r_add(leaf, static_cast<acc_t<T>>(src[i * src_stride]));
  return leaf;
}

// Leaf k's offset from the line's nodes (PrefixCascade::offset() after k pushes).
template <typename Acc>
MG_HOST_DEVICE Acc cumsum_leaf_offset(const Acc* nodes, const ScanLevels& lv, int64_t k) {
  Acc run = Acc(0);
  bool first = true;
  int64_t covered = 0;  // leaves before k already in `run`
  for (int b = lv.count - 1; b >= 0; --b) {
    if (((k >> b) & 1) == 0) continue;
    const Acc node = nodes[lv.start[b] + (covered >> b)];
    run = first ? node : r_add(run, node);
    first = false;
    covered += int64_t(1) << b;
  }
  return run;
}

// Writes leaf [l0, l1) of a line: dst[i] = offset + the in-order sum of terms l0..i.
template <typename T, typename O>
MG_HOST_DEVICE void cumsum_leaf_scan(const T* src, int64_t src_stride, int64_t l0, int64_t l1, acc_t<T> offset,
                                     O* dst, int64_t dst_stride) {
  acc_t<T> leaf = acc_t<T>(0);
  for (int64_t i = l0; i < l1; ++i) {
    leaf = r_add(leaf, static_cast<acc_t<T>>(src[i * src_stride]));
    dst[i * dst_stride] = static_cast<O>(r_add(offset, leaf));
  }
}

}  // namespace mg::cuda
