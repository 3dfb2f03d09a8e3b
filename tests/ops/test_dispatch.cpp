// The dispatcher and the ops that need no group of their own: dtype promotion, scalars, views,
// copies and casts, in-place ops, error messages for device/shape/dtype/index mistakes, printing.
#include <catch2/catch.hpp>

#include <cmath>

#include "core/storage.h"
#include "cuda/cuda.h"
#include "ops/dispatcher.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

TEST_CASE("binary ops promote dtypes - scalars never widen", "[ops][dispatch]") {
  const Tensor h = ones({2}, {.dtype = DType::F16});
  const Tensor b = ones({2}, {.dtype = DType::BF16});
  const Tensor f = ones({2}, {.dtype = DType::F32});
  const Tensor i = ones({2}, {.dtype = DType::I32});
  const Tensor l = ones({2}, {.dtype = DType::I64});
  REQUIRE((h + h).dtype() == DType::F16);
  REQUIRE((h + b).dtype() == DType::F32);  // f16 with bf16 meets at f32
  REQUIRE((h + f).dtype() == DType::F32);
  REQUIRE((i + l).dtype() == DType::I64);
  REQUIRE((i + h).dtype() == DType::F16);
  REQUIRE((h * 2.0).dtype() == DType::F16);   // a C++ scalar takes the tensor's dtype
  REQUIRE((i * 2.0).dtype() == DType::I32);   // whole-number scalar keeps integers
  REQUIRE((i * 0.5).dtype() == DType::F32);   // fractional scalar on integers gives f32
  REQUIRE(values(i * 0.5) == std::vector<double>{0.5, 0.5});
  REQUIRE((i / l).dtype() == DType::F32);     // true division
  REQUIRE(eq(h, f).dtype() == DType::Bool);
}

TEST_CASE("f16 arithmetic computes in f32 and rounds once", "[ops][dispatch][numerics]") {
  // 2049 is not an f16 value: f16 spacing in [2048, 4096) is 2. 2048 + 1 = 2049 rounds to even 2048,
  // while (2048 + 1) + 1 computed as two f16 ops stays 2048 — but one op on 2048 + 3 = 2051 -> 2052.
  const Tensor a = full({1}, 2048.0, {.dtype = DType::F16});
  REQUIRE(values(a + 1.0)[0] == 2048.0);
  REQUIRE(values(a + 3.0)[0] == 2052.0);
  // overflow to inf
  const Tensor m = full({1}, 65504.0, {.dtype = DType::F16});
  REQUIRE(std::isinf(values(m + m)[0]));
  REQUIRE(std::isinf(values(exp(full({1}, 12.0, {.dtype = DType::F16})))[0]));
  // underflow: 1e-8 is below half the smallest subnormal 2^-24 ~ 5.96e-8
  REQUIRE(values(full({1}, 1e-8, {.dtype = DType::F16}))[0] == 0.0);
  REQUIRE(values(full({1}, 6e-8, {.dtype = DType::F16}))[0] == std::ldexp(1.0, -24));
}

TEST_CASE("views share storage and have the expected strides", "[ops][views]") {
  Tensor x = arange(0, 24, 1, {.dtype = DType::F32}).view({2, 3, 4});
  Tensor p = x.permute({2, 0, 1});
  REQUIRE(p.shape() == Shape{4, 2, 3});
  REQUIRE(p.strides() == Strides{1, 12, 4});
  REQUIRE(!p.is_contiguous());
  Tensor t = x.transpose(0, 2);
  REQUIRE(t.shape() == Shape{4, 3, 2});
  Tensor s = x.slice(2, 1, 4, 2);  // columns 1 and 3
  REQUIRE(s.shape() == Shape{2, 3, 2});
  REQUIRE(values(s.select(0, 1).select(0, 2)) == std::vector<double>{21, 23});
  Tensor e = from_vector<float>({1, 2, 3}, {3, 1}).expand({2, 3, 4});
  REQUIRE(e.shape() == Shape{2, 3, 4});
  REQUIRE(e.strides() == Strides{0, 1, 0});
  REQUIRE(x.unsqueeze(1).shape() == Shape{2, 1, 3, 4});
  REQUIRE(x.unsqueeze(-1).shape() == Shape{2, 3, 4, 1});
  REQUIRE(x.unsqueeze(1).squeeze(1).shape() == Shape{2, 3, 4});
  REQUIRE(x.flatten(1).shape() == Shape{2, 12});
  REQUIRE(x.view({-1, 4}).shape() == Shape{6, 4});
  REQUIRE(x.narrow(1, 1, 2).shape() == Shape{2, 2, 4});
  // writes through a view are visible in the base
  {
    NoGradGuard no_grad;
    x.select(1, 0).fill_(-1.0);
  }
  REQUIRE(values(x.select(0, 1).select(0, 0)) == std::vector<double>{-1, -1, -1, -1});
  REQUIRE(values(x.select(0, 1).select(0, 1)) == std::vector<double>{16, 17, 18, 19});
}

TEST_CASE("view of a non-contiguous tensor: view refuses, reshape copies", "[ops][views]") {
  Tensor x = arange(0, 6, 1, {.dtype = DType::F32}).view({2, 3});
  Tensor t = x.t();
  MG_REQUIRE_ERROR(t.view({6}), "view: cannot view [3, 2] f32 cpu with strides [1, 3] as shape [6] without copying");
  MG_REQUIRE_ERROR(t.view({6}), "hint: use reshape()");
  REQUIRE(values(t.reshape({6})) == std::vector<double>{0, 3, 1, 4, 2, 5});
  // a view that merges only compatible dims is allowed
  Tensor y = arange(0, 24, 1, {.dtype = DType::F32}).view({2, 3, 4}).permute({1, 0, 2});
  MG_REQUIRE_ERROR(y.view({3, 8}), "without copying");
  REQUIRE(y.view({3, 2, 2, 2}).shape() == Shape{3, 2, 2, 2});
}

TEST_CASE("view/expand/permute/slice argument errors", "[ops][views][errors]") {
  Tensor x = zeros({2, 3});
  MG_REQUIRE_ERROR(x.view({4, 2}), "view: shape [4, 2] is invalid for input [2, 3] f32 cpu with 6 elements");
  MG_REQUIRE_ERROR(x.view({-1, -1}), "view: only one dimension can be -1, got [-1, -1]");
  MG_REQUIRE_ERROR(x.expand({2, 4}), "expand: cannot expand [2, 3] f32 cpu to [2, 4] (dim 1: 3 vs 4)");
  MG_REQUIRE_ERROR(x.permute({0}), "permute: expected 2 dims for [2, 3] f32 cpu, got [0]");
  MG_REQUIRE_ERROR(x.permute({0, 0}), "permute: dim 0 appears twice in [0, 0]");
  MG_REQUIRE_ERROR(x.transpose(0, 2), "transpose: dim 2 is out of range for a 2-d tensor (expected a dim in [-2, 1])");
  MG_REQUIRE_ERROR(x.select(1, 3), "select: index 3 is out of range for dim 1 of size 3 in [2, 3] f32 cpu");
  MG_REQUIRE_ERROR(x.narrow(0, 1, 2), "narrow: start 1 and length 2 are out of bounds for dim 0 of size 2");
  MG_REQUIRE_ERROR(x.slice(0, 0, 2, 0), "slice: step must be positive, got 0");
  MG_REQUIRE_ERROR(x.unsqueeze(4), "unsqueeze: dim 4 is out of range for a 3-d tensor");
}

TEST_CASE("shape mismatch errors name the op and both shapes", "[ops][errors]") {
  MG_REQUIRE_ERROR(zeros({2, 3}) + zeros({4}), "add: shapes [2, 3] and [4] cannot be broadcast together (dim 1: 3 vs 4)");
  MG_REQUIRE_ERROR(mul(zeros({5}), zeros({2, 3})), "mul: shapes [5] and [2, 3] cannot be broadcast together");
  MG_REQUIRE_ERROR(sum(zeros({2, 3}), {2}), "sum: dim 2 is out of range for a 2-d tensor");
  MG_REQUIRE_ERROR(sum(zeros({2, 3}), {1, -1}), "sum: dim appears more than once in [1, -1]");
}

TEST_CASE("dtype errors", "[ops][errors]") {
  MG_REQUIRE_ERROR(exp(arange(0, 3)), "exp: expected a floating tensor (f64, f32, f16, bf16), got [3] i64 cpu");
  MG_REQUIRE_ERROR(where(zeros({2}), zeros({2}), zeros({2})), "where: expected a bool condition, got [2] f32 cpu");
  MG_REQUIRE_ERROR(mean(arange(0, 3)), "mean: expected a floating tensor");
  MG_REQUIRE_ERROR(neg(full({1}, 1.0, {.dtype = DType::Bool})), "neg: not supported for bool tensors");
}

namespace {
// Host memory registered as "cuda" so device checks can be exercised on a machine without a GPU.
class FakeDeviceAllocator final : public Allocator {
 public:
  void* allocate(std::size_t n, Device) override { return allocator_for(DeviceType::CPU).allocate(n, Device::cpu()); }
  void deallocate(void* p, Device) override { allocator_for(DeviceType::CPU).deallocate(p, Device::cpu()); }
};
}  // namespace

TEST_CASE("device mismatch is an error naming both devices", "[ops][errors]") {
  if (find_allocator(DeviceType::CUDA) != nullptr) {
    WARN("a real CUDA allocator is registered; device-mismatch text is checked by the CUDA tests");
    return;
  }
  FakeDeviceAllocator fake;
  set_allocator(DeviceType::CUDA, &fake);
  {
    const Tensor a = empty({2}, {.device = Device::cuda(0)});
    const Tensor b = zeros({2});
    const std::string msg = mg::test::error_of([&] { (void)add(b, a); });
    set_allocator(DeviceType::CUDA, nullptr);
    REQUIRE_THAT(msg, Catch::Matchers::Contains(
                          "add: expected all tensors on the same device, got [2] f32 cpu and [2] f32 cuda:0"));
    REQUIRE_THAT(msg, Catch::Matchers::Contains("hint: move them with .to(device)"));
  }
  set_allocator(DeviceType::CUDA, nullptr);
}

TEST_CASE("a CUDA tensor where CUDA cannot be used is a clear error", "[ops][errors]") {
  // No init() here: the allocation registers the backends itself (core/storage.cpp).
  if (!cuda::built_with_cuda()) {
    MG_REQUIRE_ERROR(zeros({2}, {.device = Device::cuda(0)}), "no allocator for device cuda:0");
  } else if (!cuda::is_available()) {
    MG_REQUIRE_ERROR(zeros({2}, {.device = Device::cuda(0)}), cuda::unavailable_reason());
  } else {
    REQUIRE(zeros({2}, {.device = Device::cuda(0)}).device() == Device::cuda(0));
  }
}

TEST_CASE("in-place ops: broadcasting, dtype casts, strided destinations", "[ops][inplace]") {
  Tensor x = zeros({2, 3});
  const uint64_t v0 = x.version();
  x.add_(from_vector<float>({1, 2, 3}));
  REQUIRE(values(x) == std::vector<double>{1, 2, 3, 1, 2, 3});
  REQUIRE(x.version() == v0 + 1);
  x.mul_(2.0);
  REQUIRE(values(x) == std::vector<double>{2, 4, 6, 2, 4, 6});
  x.sub_(ones({2, 3}), 2.0);
  REQUIRE(values(x) == std::vector<double>{0, 2, 4, 0, 2, 4});
  // f16 destination with an f32 source: computed in f32, rounded once into f16
  Tensor h = full({1}, 2048.0, {.dtype = DType::F16});
  h.add_(full({1}, 3.0));
  REQUIRE(h.dtype() == DType::F16);
  REQUIRE(values(h)[0] == 2052.0);
  // destination is a transposed view
  Tensor base = zeros({2, 3});
  Tensor tv = base.t();
  tv.copy_(from_vector<float>({1, 2, 3, 4, 5, 6}, {3, 2}));
  REQUIRE(values(base) == std::vector<double>{1, 3, 5, 2, 4, 6});
  base.zero_();
  REQUIRE(values(base) == std::vector<double>(6, 0.0));
  MG_REQUIRE_ERROR(zeros({3}).add_(zeros({2, 3})), "add_: the result has shape [2, 3] but the tensor written in place is [3] f32 cpu");
}

TEST_CASE("copies and casts", "[ops][copy]") {
  Tensor x = from_vector<double>({1.5, -2.25, 1e6, 1e-9});
  REQUIRE(values(x.to(DType::F16)) == std::vector<double>{1.5, -2.25, INFINITY, 0.0});
  REQUIRE(values(x.to(DType::I64)) == std::vector<double>{1, -2, 1e6, 0});
  REQUIRE(values(x.to(DType::Bool)) == std::vector<double>{1, 1, 1, 1});
  Tensor c = x.clone();
  REQUIRE(c.storage().data() != x.storage().data());
  Tensor t = arange(0, 6, 1, {.dtype = DType::F32}).view({2, 3}).t();
  Tensor tc = t.contiguous();
  REQUIRE(tc.is_contiguous());
  REQUIRE(values(tc) == values(t));
  REQUIRE(contiguous(tc).is_same(tc));
  REQUIRE(x.to(Device::cpu()).is_same(x));
  REQUIRE(x.to(DType::F64).is_same(x));
}

TEST_CASE("casts from floating to integer: truncation, NaN to 0, out of range saturates (as on CUDA)", "[ops][copy]") {
  // C++ leaves these undefined and g++ gave INT_MIN for NaN and u8(-3.7) = 253, CUDA 0 and 0.
  const std::vector<double> v = {2.9, -2.9, double(NAN), 3e9, -3e9, 1e20, -1e20, INFINITY, -INFINITY, -3.7, 300.5};
  for (DType src : {DType::F64, DType::F32, DType::BF16, DType::F16}) {
    INFO(dtype_name(src));
    const Tensor x = from_vector(v).to(src);  // f16: 3e9 and beyond become inf, the same ends
    const std::vector<double> i32 = values(x.to(DType::I32)), i64 = values(x.to(DType::I64)), u8 = values(x.to(DType::U8));
    CHECK(i32[0] == 2);
    CHECK(i32[1] == -2);
    CHECK(i32[2] == 0);
    CHECK(i32[3] == 2147483647.0);
    CHECK(i32[4] == -2147483648.0);
    CHECK(i32[7] == 2147483647.0);
    CHECK(i32[8] == -2147483648.0);
    CHECK(i64[2] == 0);
    CHECK(x.to(DType::I64).data<int64_t>()[5] == INT64_MAX);
    CHECK(x.to(DType::I64).data<int64_t>()[6] == INT64_MIN);
    CHECK(x.to(DType::I64).data<int64_t>()[7] == INT64_MAX);
    CHECK(x.to(DType::I64).data<int64_t>()[8] == INT64_MIN);
    CHECK(u8[1] == 0);
    CHECK(u8[2] == 0);
    CHECK(u8[9] == 0);
    CHECK(u8[10] == 255);
    CHECK(u8[0] == 2);
  }
}

TEST_CASE("printing abbreviates like PyTorch", "[ops][print]") {
  const Tensor x = from_vector<float>({1, 2.5, -3, 4}, {2, 2});
  REQUIRE(x.str() == "tensor([[ 1.0000,  2.5000],\n        [-3.0000,  4.0000]], shape=[2, 2], dtype=f32, device=cpu)");
  REQUIRE(arange(0, 3).str() == "tensor([0, 1, 2], shape=[3], dtype=i64, device=cpu)");
  REQUIRE(scalar_tensor(2.0).str() == "tensor(2.0000, shape=[], dtype=f32, device=cpu)");
  const std::string big = zeros({2000}).str();
  REQUIRE_THAT(big, Catch::Matchers::Contains("0.0000, 0.0000, 0.0000, ..., 0.0000"));
  REQUIRE(from_vector<float>({1e-6f}).str() == "tensor([1.0000e-06], shape=[1], dtype=f32, device=cpu)");
  Tensor g = ones({1}).requires_grad_();
  REQUIRE_THAT((g * 2.0).str(), Catch::Matchers::Contains("grad_fn=mul_scalar_backward"));
  REQUIRE_THAT(full({1}, 1.0, {.dtype = DType::Bool}).str(), Catch::Matchers::StartsWith("tensor([true]"));
}

TEST_CASE("item and scalar access", "[ops]") {
  REQUIRE(scalar_tensor(3.5).item<float>() == 3.5f);
  REQUIRE(full({1, 1}, 7, {.dtype = DType::I64}).item<int64_t>() == 7);
  MG_REQUIRE_ERROR(zeros({2}).item<float>(), "item: expected a tensor with one element, got [2] f32 cpu");
}

TEST_CASE("integer pow is exact and wraps like the other integer ops, negative exponents as PyTorch",
          "[ops][numerics]") {
  auto i64 = [](std::vector<int64_t> v) {
    Tensor t = empty({int64_t(v.size())}, {.dtype = DType::I64});
    std::copy(v.begin(), v.end(), t.data<int64_t>());
    return t;
  };
  // 3^39 needs 62 bits (a double's 53 gave ...256); 2^63 and 3^41 wrap modulo 2^64.
  const Tensor got = pow(i64({3, 2, 3, -3, 7, 0, 5, 1, -1, -1, 0, 2, -5}), i64({39, 63, 41, 3, 0, 0, 1, -7, -3, -4, -1, -2, 2}));
  std::vector<int64_t> expect = {4052555153018976267LL, INT64_MIN, 0, -27, 1, 1, 5, 1, -1, 1, 0, 0, 25};
  uint64_t w = 1;
  for (int i = 0; i < 41; ++i) w *= 3u;  // 3^41 modulo 2^64
  expect[2] = int64_t(w);
  for (std::size_t i = 0; i < expect.size(); ++i) {
    INFO("element " << i);
    CHECK(got.data<int64_t>()[i] == expect[i]);
  }
  // u8 and i32 wrap in their own width.
  const Tensor u8 = pow(from_vector(std::vector<double>{3, 2, 255}).to(DType::U8), from_vector(std::vector<double>{5, 8, 2}).to(DType::U8));
  CHECK(values(u8) == std::vector<double>{243 % 256, 0, 1});  // 243, 256 -> 0, 65025 -> 1
  const Tensor i32 = pow(from_vector(std::vector<double>{3, -2, 46341}).to(DType::I32), from_vector(std::vector<double>{20, 31, 2}).to(DType::I32));
  CHECK(values(i32) == std::vector<double>{double(int32_t(3486784401u)), double(INT32_MIN), double(int32_t(2147488281u))});
}
