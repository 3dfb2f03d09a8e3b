// ops/bitwise.h against PyTorch 2.15's answers (printed by PyTorch on the same inputs): and, or,
// xor, not on signed and unsigned integers and bool, promotion, the shifts at and beyond the
// width and with negative counts, the operators, refusals; and CUDA equal to the CPU.
#include <catch2/catch.hpp>

#include <cstdint>
#include <limits>
#include <vector>

#include "core/factory.h"
#include "ops/bitwise.h"
#include "ops/logical.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::V;
using mg::test::values;

namespace {
Tensor u8(std::vector<int64_t> v) { return to(from_vector<int64_t>(v), DType::U8); }
}  // namespace

TEST_CASE("bitwise and, or, xor and not as PyTorch's, with promotion", "[ops][bitwise]") {
  const Tensor i = from_vector<int32_t>({-7, 12});
  CHECK(values(~i) == V({6, -13}));
  CHECK(values(i & from_vector<int32_t>({3, 5})) == V({1, 4}));
  CHECK(values(i | full({}, 2.0, {.dtype = DType::I32})) == V({-5, 14}));
  CHECK(values(i ^ full({}, -1.0, {.dtype = DType::I32})) == V({6, -13}));
  CHECK((i & from_vector<int32_t>({3, 5})).dtype() == DType::I32);
  // u8: ~200 = 55, ~3 = 252
  CHECK(values(~u8({200, 3})) == V({55, 252}));
  // bool: logical; bool & integer promotes (PyTorch: True & 3 = 1, u8 & i32 is i32)
  const Tensor t = gt(from_vector<float>({1, -1}), zeros({}));
  CHECK(values(~t) == V({0, 1}));
  CHECK((t ^ t).dtype() == DType::Bool);
  CHECK(values(bitwise_and(gt(from_vector<float>({1}), zeros({})), from_vector<int64_t>({3}))) == V({1}));
  CHECK(bitwise_and(u8({1}), from_vector<int32_t>({3})).dtype() == DType::I32);
  // broadcasting
  CHECK(bitwise_or(from_vector<int64_t>({1, 2}, {2, 1}), from_vector<int64_t>({4, 8, 16})).shape() == Shape{2, 3});
}

TEST_CASE("shifts as PyTorch's: wrap to the left, sign fill to the right, counts outside 0 to bits - 1",
          "[ops][bitwise]") {
  // PyTorch 2.15, i64: [5, -5, 1, -1, 255] << [1, 1, 63, 64, 70] = [10, -10, min, 0, 0];
  // >> = [2, -3, 0, -1, 0]; with count -1: << gives 0s, >> gives [0, -1, 0, -1, 0]
  const Tensor a = from_vector<int64_t>({5, -5, 1, -1, 255});
  const Tensor c = from_vector<int64_t>({1, 1, 63, 64, 70});
  CHECK(values(a << c) == V({10, -10, double(std::numeric_limits<int64_t>::min()), 0, 0}));
  CHECK(values(a >> c) == V({2, -3, 0, -1, 0}));
  CHECK(values(a << full({5}, -1.0, {.dtype = DType::I64})) == V({0, 0, 0, 0, 0}));
  CHECK(values(a >> full({5}, -1.0, {.dtype = DType::I64})) == V({0, -1, 0, -1, 0}));
  // u8 and i32 (PyTorch: u8 [200, 3] << 1 = [144, 6], >> 9 and << 9 give 0; i32 -7 << 31 is
  // the minimum, -7 >> 40 is -1)
  CHECK(values(u8({200, 3}) << 1) == V({144, 6}));
  CHECK(values(u8({200, 3}) >> 9) == V({0, 0}));
  CHECK(values(u8({200, 3}) << 9) == V({0, 0}));
  const Tensor i = from_vector<int32_t>({-7, 12});
  CHECK(values(i << 31) == V({double(std::numeric_limits<int32_t>::min()), 0}));
  CHECK(values(i >> 40) == V({-1, 0}));
  CHECK((i << 2).dtype() == DType::I32);
  CHECK(values(from_vector<int64_t>({5, 6}) << 2) == V({20, 24}));
}

TEST_CASE("bitwise ops refuse floating operands, and shifts refuse bool, by name", "[ops][bitwise][errors]") {
  const Tensor f = from_vector<float>({1, 2});
  MG_REQUIRE_ERROR(bitwise_and(f, f), "bitwise_and: expected integer or bool tensors, got [2] f32 cpu and [2] f32 cpu");
  MG_REQUIRE_ERROR(bitwise_not(f), "bitwise_not: expected an integer or bool tensor, got [2] f32 cpu");
  MG_REQUIRE_ERROR(bitwise_xor(from_vector<int64_t>({1, 2}), f), "bitwise_xor: expected integer or bool tensors");
  const Tensor t = gt(f, zeros({}));
  MG_REQUIRE_ERROR(t << t, "bitwise_left_shift: expected integer tensors, got [2] bool cpu");
  MG_REQUIRE_ERROR(f >> 1, "bitwise_right_shift: expected integer tensors");
  MG_REQUIRE_ERROR(bitwise_or(Tensor(), t), "bitwise_or: got an undefined tensor");
}

TEST_CASE("bitwise ops: CUDA gives the CPU's values", "[ops][bitwise][cuda][gpu]") {
  manual_seed(12);
  const Tensor a = to(randn({257}) * 1000.0, DType::I64), b = to(rand({257}) * 70.0 - 3.0, DType::I64);
  const Device g = Device::cuda(0);
  for (const DType dt : {DType::I64, DType::I32, DType::U8}) {
    INFO(dtype_name(dt));
    const Tensor x = to(a, dt), s = to(b, dt);
    CHECK(values(x.to(g) & s.to(g)) == values(x & s));
    CHECK(values(x.to(g) | s.to(g)) == values(x | s));
    CHECK(values(x.to(g) ^ s.to(g)) == values(x ^ s));
    CHECK(values(~x.to(g)) == values(~x));
    CHECK(values(x.to(g) << s.to(g)) == values(x << s));
    CHECK(values(x.to(g) >> s.to(g)) == values(x >> s));
  }
  const Tensor m = gt(a, zeros({}, {.dtype = DType::I64}));
  CHECK(values(~m.to(g) & m.to(g)) == values(~m & m));
}
