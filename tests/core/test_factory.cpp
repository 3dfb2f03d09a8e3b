// Tests of the non-random factories of core/factory.h: values, dtypes and shapes of
// zeros/ones/full/arange/linspace/eye/from_vector/from_buffer/scalar_tensor and the *_like forms.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "core/factory.h"

using mg::DType;

namespace {

template <typename T>
std::vector<T> values(const mg::Tensor& t) {
  const T* p = t.data<T>();
  return std::vector<T>(p, p + t.numel());
}

std::vector<uint16_t> half_bits(const mg::Tensor& t) {
  std::vector<uint16_t> out;
  for (const mg::Half& h : values<mg::Half>(t)) out.push_back(h.bits);
  return out;
}

}  // namespace

TEST_CASE("factory: zeros, ones and full", "[core]") {
  const mg::Tensor z = mg::zeros({2, 3});
  CHECK(z.dtype() == DType::F32);
  CHECK(z.shape() == mg::Shape{2, 3});
  CHECK(z.device() == mg::Device::cpu());
  CHECK(values<float>(z) == std::vector<float>(6, 0.0f));
  CHECK(values<double>(mg::ones({4}, {.dtype = DType::F64})) == std::vector<double>(4, 1.0));
  CHECK(values<int32_t>(mg::full({3}, -7, {.dtype = DType::I32})) == std::vector<int32_t>(3, -7));
  CHECK(values<uint8_t>(mg::ones({2}, {.dtype = DType::U8})) == std::vector<uint8_t>(2, 1));
  CHECK(values<bool>(mg::ones({2}, {.dtype = DType::Bool})) == std::vector<bool>(2, true));
  // f16/bf16 are rounded once from the f32 value: 1/3 -> 0x3555 (f16), 0x3eab (bf16).
  CHECK(half_bits(mg::full({2}, 1.0 / 3.0, {.dtype = DType::F16})) ==
        std::vector<uint16_t>{0x3555, 0x3555});
  CHECK(values<mg::BFloat16>(mg::full({1}, 1.0 / 3.0, {.dtype = DType::BF16}))[0].bits == 0x3eab);
  CHECK(half_bits(mg::full({1}, INFINITY, {.dtype = DType::F16})) == std::vector<uint16_t>{0x7c00});
  CHECK(half_bits(mg::full({1}, 65504.0, {.dtype = DType::F16})) == std::vector<uint16_t>{0x7bff});  // 1e6 is refused
  // Large enough to be filled by several threads.
  const mg::Tensor big = mg::full({1 << 20}, 2.5);
  CHECK(values<float>(big) == std::vector<float>(1 << 20, 2.5f));
  // Empty and 0-d shapes.
  CHECK(mg::zeros({0, 5}).numel() == 0);
  CHECK(mg::zeros({}).numel() == 1);
  CHECK(mg::zeros({}).dim() == 0);
}

TEST_CASE("factory: requires_grad option", "[core]") {
  CHECK(mg::zeros({2}, {.requires_grad = true}).requires_grad());
  CHECK_FALSE(mg::zeros({2}).requires_grad());
  CHECK_THROWS_MATCHES(
      mg::zeros({2}, {.dtype = DType::I64, .requires_grad = true}), mg::DTypeError,
      Catch::Matchers::Message(
          "requires_grad_: only floating tensors can require grad; got [2] i64 cpu"));
}

TEST_CASE("factory: arange", "[core]") {
  const mg::Tensor a = mg::arange(0, 5);
  CHECK(a.dtype() == DType::I64);
  CHECK(values<int64_t>(a) == std::vector<int64_t>{0, 1, 2, 3, 4});
  CHECK(values<int64_t>(mg::arange(0, 10, 3)) == std::vector<int64_t>{0, 3, 6, 9});
  CHECK(values<int64_t>(mg::arange(-2, 3, 2)) == std::vector<int64_t>{-2, 0, 2});
  // Negative steps count down and stop before `end`.
  CHECK(values<int64_t>(mg::arange(10, 0, -3)) == std::vector<int64_t>{10, 7, 4, 1});
  CHECK(values<int64_t>(mg::arange(3, -1, -1)) == std::vector<int64_t>{3, 2, 1, 0});
  CHECK(values<int64_t>(mg::arange(0, -6, -2)) == std::vector<int64_t>{0, -2, -4});
  // Empty ranges.
  CHECK(mg::arange(5, 5).numel() == 0);
  CHECK(mg::arange(0, 10, -1).numel() == 0);
  CHECK(mg::arange(10, 0).numel() == 0);
  // Near int64's ends neither the count nor start + i * step overflows.
  const int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  CHECK(values<int64_t>(mg::arange(hi - 1, hi, hi)) == std::vector<int64_t>{hi - 1});
  CHECK(values<int64_t>(mg::arange(lo, hi, hi)) == std::vector<int64_t>{lo, -1, hi - 1});
  CHECK(values<int64_t>(mg::arange(hi, lo, lo)) == std::vector<int64_t>{hi, -1});
  // Other dtypes.
  const mg::Tensor f = mg::arange(0, 4, 1, {.dtype = DType::F32});
  CHECK(f.dtype() == DType::F32);
  CHECK(values<float>(f) == std::vector<float>{0, 1, 2, 3});
  CHECK(half_bits(mg::arange(1, 3, 1, {.dtype = DType::F16})) == std::vector<uint16_t>{0x3c00, 0x4000});
  CHECK_THROWS_MATCHES(mg::arange(0, 5, 0), mg::Error,
                       Catch::Matchers::Message("arange: step must be non-zero"));
}

TEST_CASE("factory: linspace", "[core]") {
  CHECK(values<float>(mg::linspace(0, 1, 5)) == std::vector<float>{0, 0.25f, 0.5f, 0.75f, 1});
  CHECK(values<double>(mg::linspace(2, -2, 3, {.dtype = DType::F64})) ==
        std::vector<double>{2, 0, -2});
  // Endpoints are exact even when the step is not representable.
  const std::vector<double> v = values<double>(mg::linspace(-1.0, 2.3, 7, {.dtype = DType::F64}));
  CHECK(v.front() == -1.0);
  CHECK(v.back() == 2.3);
  CHECK(v[3] == Approx(0.65).margin(1e-15));
  const std::vector<float> w = values<float>(mg::linspace(0.1, 0.7, 1001));
  CHECK(w.front() == 0.1f);
  CHECK(w.back() == 0.7f);
  CHECK(w[500] == Approx(0.4f));
  // One step gives the start (as in NumPy and PyTorch); zero steps an empty tensor.
  CHECK(values<float>(mg::linspace(3, 9, 1)) == std::vector<float>{3});
  CHECK(values<float>(mg::linspace(3, 9, 2)) == std::vector<float>{3, 9});
  CHECK(mg::linspace(3, 9, 0).numel() == 0);
  CHECK_THROWS_MATCHES(mg::linspace(0, 1, -1), mg::Error,
                       Catch::Matchers::Message("linspace: steps must be >= 0, got -1"));
}

TEST_CASE("factory: eye", "[core]") {
  CHECK(values<float>(mg::eye(3)) == std::vector<float>{1, 0, 0, 0, 1, 0, 0, 0, 1});
  const mg::Tensor wide = mg::eye(2, 3);
  CHECK(wide.shape() == mg::Shape{2, 3});
  CHECK(values<float>(wide) == std::vector<float>{1, 0, 0, 0, 1, 0});
  const mg::Tensor tall = mg::eye(3, 2, {.dtype = DType::I32});
  CHECK(tall.shape() == mg::Shape{3, 2});
  CHECK(values<int32_t>(tall) == std::vector<int32_t>{1, 0, 0, 1, 0, 0});
  CHECK(mg::eye(0).numel() == 0);
  CHECK_THROWS_AS(mg::eye(-1), mg::Error);
}

TEST_CASE("factory: from_vector, from_buffer and scalar_tensor", "[core]") {
  const mg::Tensor v = mg::from_vector<float>({1, 2, 3, 4}, {2, 2});
  CHECK(v.shape() == mg::Shape{2, 2});
  CHECK(v.dtype() == DType::F32);
  CHECK(values<float>(v) == std::vector<float>{1, 2, 3, 4});
  const mg::Tensor d = mg::from_vector<int64_t>({5, -6, 7});
  CHECK(d.shape() == mg::Shape{3});  // 1-D by default
  CHECK(d.dtype() == DType::I64);
  CHECK(values<int64_t>(d) == std::vector<int64_t>{5, -6, 7});
  // The dtype comes from the element type, whatever the options say.
  CHECK(mg::from_vector<double>({1.5}, {}, {.dtype = DType::F16}).dtype() == DType::F64);
  CHECK_THROWS_MATCHES(mg::from_vector<float>({1, 2, 3}, {2, 2}), mg::ShapeError,
                       Catch::Matchers::Message("from_vector: 3 values do not fill shape [2, 2]"));

  // from_buffer copies: later writes to the source do not show.
  std::vector<mg::Half> src = {mg::Half(1.5f), mg::Half(-2.0f), mg::Half(65504.0f)};
  const mg::Tensor h = mg::from_buffer(src.data(), {3}, {.dtype = DType::F16});
  src[0] = mg::Half(0.0f);
  CHECK(h.dtype() == DType::F16);
  CHECK(half_bits(h) == std::vector<uint16_t>{0x3e00, 0xc000, 0x7bff});
  CHECK(mg::from_buffer(nullptr, {0}).numel() == 0);
  CHECK_THROWS_MATCHES(mg::from_buffer(nullptr, {2}), mg::Error,
                       Catch::Matchers::Message("from_buffer: null data pointer"));

  const mg::Tensor s = mg::scalar_tensor(2.5, {.dtype = DType::F64});
  CHECK(s.dim() == 0);
  CHECK(s.numel() == 1);
  CHECK(s.item<double>() == 2.5);
  CHECK(mg::scalar_tensor(-3).item<float>() == -3.0f);
}

TEST_CASE("factory: *_like keep shape, dtype and device", "[core]") {
  const mg::Tensor base = mg::full({2, 5}, 4.0, {.dtype = DType::BF16});
  for (const mg::Tensor& t :
       {mg::empty_like(base), mg::zeros_like(base), mg::ones_like(base), mg::full_like(base, -1)}) {
    CHECK(t.shape() == base.shape());
    CHECK(t.dtype() == DType::BF16);
    CHECK(t.device() == base.device());
    CHECK_FALSE(t.is_same(base));
    CHECK(t.data_ptr() != base.data_ptr());
  }
  std::vector<uint16_t> zeros_bits, ones_bits, full_bits;
  for (const auto& b : values<mg::BFloat16>(mg::zeros_like(base))) zeros_bits.push_back(b.bits);
  for (const auto& b : values<mg::BFloat16>(mg::ones_like(base))) ones_bits.push_back(b.bits);
  for (const auto& b : values<mg::BFloat16>(mg::full_like(base, -1))) full_bits.push_back(b.bits);
  CHECK(zeros_bits == std::vector<uint16_t>(10, 0x0000));
  CHECK(ones_bits == std::vector<uint16_t>(10, 0x3f80));
  CHECK(full_bits == std::vector<uint16_t>(10, 0xbf80));
}

// PyTorch's *_like default to preserve_format: a channels-last input gives a channels-last result.
TEST_CASE("factory: *_like keep the input's memory format", "[core]") {
  const mg::Tensor nchw = mg::full({2, 3, 4, 5}, 2.0);
  const mg::Tensor nhwc = nchw.to(mg::MemoryFormat::ChannelsLast);
  for (const mg::Tensor& t : {mg::empty_like(nhwc), mg::zeros_like(nhwc), mg::ones_like(nhwc), mg::full_like(nhwc, 7)}) {
    CHECK(t.shape() == nhwc.shape());
    CHECK(t.is_contiguous(mg::MemoryFormat::ChannelsLast));
    CHECK_FALSE(t.is_contiguous());
  }
  CHECK(mg::full_like(nhwc, 7).sum().item<double>() == 7.0 * 120);
  for (const mg::Tensor& t : {mg::empty_like(nchw), mg::zeros_like(nchw), mg::full_like(nchw.transpose(2, 3), 1)})
    CHECK(t.is_contiguous());  // a transposed (non-dense-in-either-format) input gives a contiguous result
}
