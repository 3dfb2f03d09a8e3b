// mg_dist_worker's "precision16" mode: f16/bf16 all_reduce and reduce_scatter on both paths, the
// native one (16-bit on the wire, f32 adds, one rounding per hop) and reduce_in_f32 (widened,
// one rounding), for every op, with inputs that show where they differ:
//   column 0: ranks hold 2048, 2050, 0.5 (f16) / 256, 258, 0.5 (bf16): every order of native
//             adds gives 4096 (512); the f32 path rounds the exact 4098.5 (514.5) to 4100 (516);
//   column 1: 2048, 1, 1 (f16) / 256, 1, 1 (bf16): native gives 2048 or 2050 (256 or 258),
//             depending on where the ring starts adding, f32 gives 2050 (258);
//   column 2: f16 40000 on every rank: the native sum overflows to inf before avg divides, the
//             widened avg is 40000 (bf16: 1 everywhere);
//   columns 3..: seeded random 16-bit values whose sums are exact in f32: the f32 path must equal
//             the exact sum rounded once; the native path must stay within the recursive
//             summation bound gamma(W-1) * sum |x_i| (u = 2^-11 for f16, 2^-8 for bf16).
// Every rank checks every all_reduce and reduce_scatter result and that all ranks hold the same
// all_reduce bits (an all_gather).
// Prints "rank R: precision16 N checks passed, D of M random sums differ between the paths".
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "core/factory.h"
#include "distributed/init.h"
#include "ops/ops.h"

namespace mg::test_worker {

using namespace mg::distributed;

namespace {

constexpr int64_t kColumns = 4099;  // 3 special + 4096 random

[[noreturn]] void die(int rank, const std::string& what) {
  std::printf("rank %d: FAIL precision16: %s\n", rank, what.c_str());
  std::fflush(stdout);
  std::_Exit(1);
}

double round_to(DType t, double v) {
  return t == DType::F16 ? double(float(Half(float(v)))) : double(float(BFloat16(float(v))));
}

// A 16-bit value for (rank, column): sign * (1 + k / 2^mbits) * 2^e with e in [-4, 3]; sums of
// up to 3 such values need at most mbits + 10 bits, so they are exact in f32.
double random_value(DType t, int r, int64_t i) {
  uint64_t x = uint64_t(i) * 0x9E3779B97F4A7C15ull + uint64_t(r + 1) * 0xBF58476D1CE4E5B9ull;
  x ^= x >> 31;
  x *= 0x94D049BB133111EBull;
  x ^= x >> 29;
  const int mbits = t == DType::F16 ? 10 : 7;
  const double frac = double(x & ((1u << mbits) - 1)) / double(1u << mbits);
  const int e = int((x >> 12) % 8) - 4;
  const double sign = (x >> 20) & 1 ? -1.0 : 1.0;
  return sign * std::ldexp(1.0 + frac, e);
}

double value(DType t, int r, int64_t i) {
  const double big = t == DType::F16 ? 2048.0 : 256.0;
  if (i == 0) return r == 0 ? big : r == 1 ? big + 2.0 : 0.5;
  if (i == 1) return r == 0 ? big : 1.0;
  if (i == 2) return t == DType::F16 ? 40000.0 : 1.0;
  return random_value(t, r, i);
}

Tensor input(DType t, int r) {
  std::vector<double> v(static_cast<std::size_t>(kColumns));
  for (int64_t i = 0; i < kColumns; ++i) v[std::size_t(i)] = value(t, r, i);
  return from_vector<double>(v, {kColumns}).to(t);
}

std::vector<double> values(const Tensor& t) {
  Tensor d = t.to(DType::F64).contiguous();
  return std::vector<double>(d.data<double>(), d.data<double>() + d.numel());
}

}  // namespace

int precision16(std::chrono::milliseconds timeout) {
  auto pg = init_process_group({.timeout = timeout});
  const int W = pg->world_size(), R = pg->rank();
  int checks = 0, differ = 0, random_sums = 0;
  auto check = [&](bool ok, const std::string& what) {
    if (!ok) die(R, what);
    ++checks;
  };
  for (DType t : {DType::F16, DType::BF16}) {
    const double u = t == DType::F16 ? std::ldexp(1.0, -11) : std::ldexp(1.0, -8);  // unit roundoff
    auto gamma = [&](int k) { return k * u / (1 - k * u); };
    const double big = t == DType::F16 ? 2048.0 : 256.0;
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max, ReduceOp::Min}) {
      std::vector<double> got[2];
      for (int wide = 0; wide < 2; ++wide) {
        const std::string what = std::string(dtype_name(t)) + " " + reduce_op_name(op) +
                                  (wide ? " reduce_in_f32" : " native");
        Tensor x = input(t, R);
        pg->all_reduce(x, AllReduceOptions{.op = op, .reduce_in_f32 = wide == 1});
        check(x.dtype() == t, what + ": dtype kept");
        got[wide] = values(x);
        // Every rank holds the same bits.
        Tensor rows = pg->all_gather(x).contiguous();  // [W, kColumns]
        const auto* bytes = static_cast<const char*>(rows.data_ptr());
        for (int r = 1; r < W; ++r) {
          check(std::memcmp(bytes, bytes + r * kColumns * 2, kColumns * 2) == 0,
                what + ": rank " + std::to_string(r) + " holds other bits");
        }
        // reduce_scatter of [W * kColumns] (every block is this rank's input): the same checks
        // (not the same bits: the ring chunks the longer buffer differently, so where the order
        // of the native adds matters it may start elsewhere).
        Tensors copies(static_cast<std::size_t>(W), input(t, R));
        Tensor mine = pg->reduce_scatter(cat(copies), AllReduceOptions{.op = op, .reduce_in_f32 = wide == 1});
        check(mine.dtype() == t && mine.numel() == kColumns, what + ": reduce_scatter's result");
        const std::vector<double> scattered = values(mine);
        for (int64_t k = 0; k < 2 * kColumns; ++k) {
          const int64_t i = k % kColumns;
          const bool from_scatter = k >= kColumns;
          double exact = 0, abs_sum = 0, mx = -INFINITY, mn = INFINITY;
          for (int r = 0; r < W; ++r) {
            const double v = value(t, r, i);
            exact += v;  // exact in f64 (and in f32) for these inputs
            abs_sum += std::fabs(v);
            mx = std::max(mx, v);
            mn = std::min(mn, v);
          }
          const double g = from_scatter ? scattered[std::size_t(i)] : got[wide][std::size_t(i)];
          const std::string at = what + (from_scatter ? " reduce_scatter" : " all_reduce") + " column " +
                                 std::to_string(i) + ": got " + std::to_string(g);
          if (op == ReduceOp::Max || op == ReduceOp::Min) {
            check(g == (op == ReduceOp::Max ? mx : mn), at);
            continue;
          }
          // The widened path: the exact sum (f32 sums of these are exact) rounded once; avg
          // divided in f32, then rounded.
          const double once = op == ReduceOp::Sum ? round_to(t, exact)
                                                  : round_to(t, double(float(exact) / float(W)));
          if (wide) {
            check(g == once, at + ", expected " + std::to_string(once));
            continue;
          }
          if (i == 0 && W == 3) {
            const double native = 2 * big;  // 4096 (f16) / 512 (bf16) in every order
            check(g == (op == ReduceOp::Sum ? native : round_to(t, double(float(native) / 3.f))),
                  at + ": one rounding per hop");
            check(g != once, at + ": should differ from the widened path");
          } else if (i == 1 && W == 3) {
            const double s = op == ReduceOp::Sum ? 1.0 : 1.0 / 3;
            const double a = round_to(t, double(float(big * s))), b = round_to(t, double(float((big + 2) * s)));
            check(g == a || g == b, at + ": 2048 + 1 + 1 in some order");
          } else if (i == 2 && t == DType::F16) {
            check(std::isinf(g) && g > 0, at + ": the native f16 sum overflows");
            check(op == ReduceOp::Sum || once == 40000.0, at + ": the widened avg does not");
          } else if (i < 3 || W == 2) {
            // One addition (W = 2) is one rounding: the paths agree; columns 0-2 with W = 2 too.
            check(g == once, at + ", expected " + std::to_string(once));
          } else {
            const double bound = op == ReduceOp::Sum ? gamma(W - 1) * abs_sum : gamma(W) * abs_sum / W;
            const double target = op == ReduceOp::Sum ? exact : exact / W;
            check(std::fabs(g - target) <= bound, at + ": outside the bound gamma(W-1) sum|x|");
          }
          if (i >= 3 && op == ReduceOp::Sum && !from_scatter) {
            ++random_sums;
            if (g != once) ++differ;
          }
        }
      }
    }
  }
  if (W == 2) check(differ == 0, "with 2 ranks the paths must agree");
  if (W >= 3) check(differ > 0, "with 3 ranks some random sums should differ between the paths");
  std::printf("rank %d: precision16 %d checks passed, %d of %d random sums differ between the paths\n", R,
              checks, differ, random_sums);
  pg->shutdown();
  return 0;
}

}  // namespace mg::test_worker
