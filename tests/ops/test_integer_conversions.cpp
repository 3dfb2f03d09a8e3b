// Where a double becomes an integer element: the factories (full, linspace, randint), fill_,
// masked_fill, the scalar of x + v (scalar_like), add/sub's alpha and clamp's bounds. C++ leaves a
// NaN, an infinity or an out-of-range double converted to an integer undefined (x86 gives INT_MIN,
// u8(300.0) may be anything), so each place either refuses the value with PyTorch's message or
// computes in f32; none may produce an unspecified integer.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>

#include "core/dtype.h"
#include "core/factory.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

TEST_CASE("integral_holds: the range of each integer dtype, truncated toward zero", "[core][dtype]") {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (DType t : {DType::I64, DType::I32, DType::U8}) {
    INFO(dtype_name(t));
    CHECK(integral_holds(t, 0.0));
    CHECK(integral_holds(t, 2.7));
    CHECK(integral_holds(t, -0.9));  // truncates to -0: held even by u8
    CHECK_FALSE(integral_holds(t, nan));
    CHECK_FALSE(integral_holds(t, inf));
    CHECK_FALSE(integral_holds(t, -inf));
  }
  CHECK(integral_holds(DType::U8, 255.9));
  CHECK_FALSE(integral_holds(DType::U8, 256.0));
  CHECK_FALSE(integral_holds(DType::U8, -1.0));
  CHECK(integral_holds(DType::I32, -2147483648.0));
  CHECK(integral_holds(DType::I32, 2147483647.5));
  CHECK_FALSE(integral_holds(DType::I32, 2147483648.0));
  CHECK_FALSE(integral_holds(DType::I32, -2147483649.0));
  CHECK(integral_holds(DType::I64, -0x1p63));
  CHECK(integral_holds(DType::I64, std::nextafter(0x1p63, 0.0)));
  CHECK_FALSE(integral_holds(DType::I64, 0x1p63));  // double(INT64_MAX) rounds up to 2^63
  for (DType t : {DType::F64, DType::F32, DType::F16, DType::BF16, DType::Bool}) CHECK(integral_holds(t, nan));
}

TEST_CASE("full, zeros_like and scalar_tensor refuse a value an integer dtype cannot hold", "[ops][core]") {
  CHECK(values(full({2}, 2.7, {.dtype = DType::I64})) == std::vector<double>{2, 2});  // truncated, as PyTorch
  CHECK(values(full({1}, -2147483648.0, {.dtype = DType::I32})) == std::vector<double>{-2147483648.0});
  CHECK(values(full({1}, 255.0, {.dtype = DType::U8})) == std::vector<double>{255});
  MG_REQUIRE_ERROR(full({2}, 1e20, {.dtype = DType::I32}), "full: value 1e+20 cannot be converted to i32 without overflow");
  MG_REQUIRE_ERROR(full({2}, std::nan(""), {.dtype = DType::I64}), "cannot be converted to i64 without overflow");
  MG_REQUIRE_ERROR(full({2}, -INFINITY, {.dtype = DType::I64}), "cannot be converted to i64");
  MG_REQUIRE_ERROR(full({2}, 256, {.dtype = DType::U8}), "full: value 256 cannot be converted to u8");
  MG_REQUIRE_ERROR(full({2}, -1, {.dtype = DType::U8}), "full: value -1 cannot be converted to u8");
  MG_REQUIRE_ERROR(full_like(zeros({3}, {.dtype = DType::U8}), 300), "cannot be converted to u8");
  MG_REQUIRE_ERROR(scalar_tensor(0x1p63, {.dtype = DType::I64}), "cannot be converted to i64");
  // bool takes any value (nonzero is true); a scalar_tensor (the v of x op v) overflows to inf as
  // arithmetic does, where a fill refuses it (below).
  CHECK(values(full({1}, std::nan(""), {.dtype = DType::Bool})) == std::vector<double>{1});
  CHECK(std::isinf(values(scalar_tensor(1e300, {.dtype = DType::F32}))[0]));
}

TEST_CASE("linspace and randint into integer dtypes check their ends", "[ops][core]") {
  CHECK(values(linspace(0, 1, 5, {.dtype = DType::I64})) == std::vector<double>{0, 0, 0, 0, 1});
  CHECK(values(linspace(-3, 255, 2, {.dtype = DType::I32})) == std::vector<double>{-3, 255});
  MG_REQUIRE_ERROR(linspace(0, 1e12, 3, {.dtype = DType::I32}), "linspace: start 0 or end 1e+12 cannot be converted to i32");
  MG_REQUIRE_ERROR(linspace(-1, 10, 3, {.dtype = DType::U8}), "cannot be converted to u8");
  MG_REQUIRE_ERROR(linspace(0, NAN, 3, {.dtype = DType::I64}), "cannot be converted to i64");

  MG_REQUIRE_ERROR(randint(0, 300, {3}, {.dtype = DType::U8}), "randint: the range [0, 300) does not fit in u8");
  MG_REQUIRE_ERROR(randint(-1, 5, {3}, {.dtype = DType::U8}), "does not fit in u8");
  MG_REQUIRE_ERROR(randint(0, 3, {3}, {.dtype = DType::Bool}), "randint: the range [0, 3) does not fit in bool");
  MG_REQUIRE_ERROR(randint(0, int64_t(1) << 32, {3}, {.dtype = DType::I32}), "does not fit in i32");
  // The widest ranges each dtype holds.
  for (double v : values(randint(0, 256, {64}, {.dtype = DType::U8}))) CHECK((v >= 0 && v < 256));
  for (double v : values(randint(0, 2, {64}, {.dtype = DType::Bool}))) CHECK((v == 0 || v == 1));
  const Tensor wide = randint(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), {8},
                              {.dtype = DType::I64});
  CHECK(wide.numel() == 8);
  CHECK(values(randint(-2147483648LL, 2147483648LL, {4}, {.dtype = DType::I32})).size() == 4);
}

TEST_CASE("fill_ and masked_fill refuse a value the tensor's integer dtype cannot hold", "[ops]") {
  Tensor x = zeros({3}, {.dtype = DType::I32});
  x.fill_(7.9);
  CHECK(values(x) == std::vector<double>{7, 7, 7});
  MG_REQUIRE_ERROR(x.fill_(3e9), "fill_: value 3e+09 cannot be converted to i32 without overflow; got [3] i32 cpu");
  MG_REQUIRE_ERROR(x.fill_(NAN), "fill_: value nan cannot be converted to i32");
  CHECK(values(x) == std::vector<double>{7, 7, 7});  // refused before anything was written
  Tensor u = zeros({2}, {.dtype = DType::U8});
  MG_REQUIRE_ERROR(u.fill_(-1), "fill_: value -1 cannot be converted to u8");
  const Tensor mask = full({2}, 1.0, {.dtype = DType::Bool});
  MG_REQUIRE_ERROR(masked_fill(u, mask, 256), "masked_fill: value 256 cannot be converted to u8");
  MG_REQUIRE_ERROR(masked_fill(u, mask, INFINITY), "masked_fill: value inf cannot be converted to u8");
  CHECK(values(masked_fill(u, mask, 255.5)) == std::vector<double>{255, 255});
}

TEST_CASE("x op v: a double an integer tensor cannot hold exactly computes in f32", "[ops]") {
  const Tensor x = full({2}, 3, {.dtype = DType::I32});
  // Whole numbers the dtype holds keep it.
  CHECK((x + 4.0).dtype() == DType::I32);
  CHECK(values(x * -2.0) == std::vector<double>{-6, -6});
  // Fractions (as before), NaN, infinities and values beyond the dtype compute in f32.
  const Tensor big = x * 1e20;
  CHECK(big.dtype() == DType::F32);
  CHECK(values(big)[0] == double(3e20f));
  CHECK((x + 0x1p40).dtype() == DType::F32);
  CHECK(values(x + 0x1p40)[0] == 0x1p40);  // 2^40 + 3 in f32
  CHECK(std::isnan(values(x + NAN)[0]));
  CHECK(values(x.lt(1e10)) == std::vector<double>{1, 1});
  const Tensor b = full({1}, 1, {.dtype = DType::Bool});
  CHECK((b + 2.0).dtype() == DType::I64);
  CHECK((b * 1e300).dtype() == DType::F32);
  const Tensor u = full({1}, 5, {.dtype = DType::U8});
  CHECK((u - 6.0).dtype() == DType::U8);  // 6 is a u8: integer arithmetic wraps, as PyTorch's
  CHECK(values(u - 6.0) == std::vector<double>{255});
  CHECK((u + -1.0).dtype() == DType::F32);  // -1 is not a u8
}

TEST_CASE("add and sub on integer tensors take a whole alpha the dtype holds", "[ops]") {
  const Tensor a = full({2}, 10, {.dtype = DType::I32}), b = full({2}, 3, {.dtype = DType::I32});
  CHECK(values(add(a, b, -2)) == std::vector<double>{4, 4});
  CHECK(values(sub(a, b, 3)) == std::vector<double>{1, 1});
  MG_REQUIRE_ERROR(add(a, b, 0.5), "add: alpha 0.5 is not a whole number that i32 holds; got [2] i32 cpu and [2] i32 cpu");
  MG_REQUIRE_ERROR(sub(a, b, 1e10), "sub: alpha 1e+10 is not a whole number that i32 holds");
  MG_REQUIRE_ERROR(add(a, b, NAN), "add: alpha nan is not a whole number");
  const Tensor u = full({1}, 5, {.dtype = DType::U8});
  MG_REQUIRE_ERROR(sub(u, u, -1), "sub: alpha -1 is not a whole number that u8 holds");
  // Floating tensors take any alpha.
  CHECK(values(add(full({1}, 1.0), full({1}, 1.0), 0.5)) == std::vector<double>{1.5});
}

TEST_CASE("clamp's bounds beyond an integer dtype saturate", "[ops]") {
  const Tensor x = from_vector<int32_t>({-5, 0, 7});
  CHECK(values(clamp(x, 1e20, 2e20)) ==
        std::vector<double>{2147483647.0, 2147483647.0, 2147483647.0});
  CHECK(values(clamp(x, -2e20, -1e20)) ==
        std::vector<double>{-2147483648.0, -2147483648.0, -2147483648.0});
  CHECK(values(clamp(x, -1.5, 2.5)) == std::vector<double>{-1.5, 0, 2.5});  // fractional bounds: f32, as PyTorch
  CHECK(clamp(x, -1.5, 2.5).dtype() == DType::F32);
  const Tensor l = from_vector<int64_t>({0, 200});
  CHECK(values(clamp(l, -10, 100)) == std::vector<double>{0, 100});
  CHECK(values(clamp(l, 1e30, 1e31)) == std::vector<double>{0x1p63 - 1, 0x1p63 - 1});
}

TEST_CASE("u8 neg/abs/sign/relu/clamp, and bool + bool, as PyTorch", "[ops]") {
  // PyTorch 2.15: -[0, 3, 200] (u8) = [0, 253, 56]; abs and relu are the identity; sign is 0/1.
  const Tensor u = from_vector<uint8_t>({0, 3, 200});
  CHECK(neg(u).dtype() == DType::U8);
  CHECK(values(neg(u)) == std::vector<double>{0, 253, 56});
  CHECK(values(abs(u)) == std::vector<double>{0, 3, 200});
  CHECK(values(sign(u)) == std::vector<double>{0, 1, 1});
  CHECK(values(relu(u)) == std::vector<double>{0, 3, 200});
  CHECK(values(clamp(u, 2, 100)) == std::vector<double>{2, 3, 100});
  CHECK(values(clamp(u, -1, 300)) == std::vector<double>{0, 3, 200});  // bounds saturate to 0 and 255
  // bool + bool is a logical or (and bool * bool a logical and), with a bool result.
  const Tensor a = to(from_vector<uint8_t>({1, 1, 0, 0}), DType::Bool), b = to(from_vector<uint8_t>({1, 0, 1, 0}), DType::Bool);
  CHECK(add(a, b).dtype() == DType::Bool);
  CHECK(values(add(a, b)) == std::vector<double>{1, 1, 1, 0});
  CHECK(values(mul(a, b)) == std::vector<double>{1, 0, 0, 0});
}

TEST_CASE("fills refuse a finite value beyond a floating dtype's range, as PyTorch", "[ops]") {
  // PyTorch 2.15: full/fill_/masked_fill of 1e6 into f16 is "value cannot be converted to type
  // c10::Half without overflow"; 65504 (f16's max), +-inf and NaN are fine; bf16 holds 1e6.
  MG_REQUIRE_ERROR(full({2}, 1e6, {.dtype = DType::F16}), "full: value 1e+06 cannot be converted to f16 without overflow");
  MG_REQUIRE_ERROR(zeros({2}, {.dtype = DType::F16}).fill_(-65520.0), "fill_: value -65520 cannot be converted to f16");
  const Tensor mask = to(from_vector<uint8_t>({1, 0}), DType::Bool);
  MG_REQUIRE_ERROR(masked_fill(zeros({2}, {.dtype = DType::F16}), mask, 1e6), "masked_fill: value 1e+06 cannot be converted to f16");
  MG_REQUIRE_ERROR(full({1}, 1e39, {.dtype = DType::BF16}), "cannot be converted to bf16");
  MG_REQUIRE_ERROR(full({1}, 1e39, {.dtype = DType::F32}), "cannot be converted to f32");
  CHECK(values(full({1}, 65504.0, {.dtype = DType::F16})) == std::vector<double>{65504.0});
  CHECK(values(full({1}, 1e6, {.dtype = DType::BF16}))[0] == 999424.0);
  CHECK(std::isinf(values(masked_fill(zeros({2}, {.dtype = DType::F16}), mask, -INFINITY))[0]));
  CHECK(std::isnan(values(full({1}, NAN, {.dtype = DType::F16}))[0]));
  CHECK(values(full({1}, 1e300, {.dtype = DType::F64})) == std::vector<double>{1e300});
}
