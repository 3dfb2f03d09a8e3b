// A floating tensor times or over a C++ double (mul_scalar / div_scalar): the scalar stays in the
// compute type (f32 for f16/bf16), as PyTorch's wrapped numbers, so x * s is f16(f32(x) * f32(s))
// bit for bit — before, the scalar was rounded to the tensor's dtype first: h * 65536.0 was inf,
// h / 70000.0 and h * 1e-8 were 0 in f16, and about a third of ordinary products (s = 0.1, 1.1)
// were an ulp off. Also s / x (reciprocal(x) * s in f32, as PyTorch), the in-place forms, the
// gradients, and integer tensors keeping their promotion.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <vector>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "core/factory.h"
#include "core/half.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;

namespace {

// f32 -> the 16-bit dtype (round to nearest even) -> back
float round16(float v, DType dt) {
  return dt == DType::F16 ? f16_bits_to_f32(f32_to_f16_bits(v)) : bf16_bits_to_f32(f32_to_bf16_bits(v));
}

}  // namespace

TEST_CASE("f16/bf16 tensor times or over a double: the scalar in f32, one rounding", "[ops][scalar]") {
  for (DType dt : {DType::F16, DType::BF16}) {
    INFO(dtype_name(dt));
    std::vector<float> xs;
    for (int i = 0; i < 2000; ++i) xs.push_back(round16(1.0f + 0.37f * float(i), dt) * (i % 2 ? -1.0f : 1.0f));
    const Tensor x = to(from_vector<float>(xs), dt);
    for (double s : {0.1, 0.3, 1.1, 7.0, 1e-3, 1e-8, 70000.0, 65536.0}) {
      INFO("s = " << s);
      const std::vector<double> mul = test::values(x * s), div = test::values(x / s), left = test::values(s * x);
      Tensor inplace = clone(x);
      inplace.mul_(s);
      const std::vector<double> mul_ip = test::values(inplace);
      int bad = 0;
      for (std::size_t i = 0; i < xs.size(); ++i) {
        const float want_mul = round16(xs[i] * float(s), dt), want_div = round16(xs[i] / float(s), dt);
        bad += !(float(mul[i]) == want_mul || (std::isinf(want_mul) && mul[i] == double(want_mul)));
        bad += float(div[i]) != want_div;
        bad += float(left[i]) != want_mul;
        bad += float(mul_ip[i]) != want_mul;
      }
      CHECK(bad == 0);
    }
  }
  // the cases that were inf or 0 because the scalar was
  const Tensor h = to(from_vector<float>({0.5f, 0.25f, 1000.0f}), DType::F16);
  CHECK(test::values(h * 65536.0) == std::vector<double>{32768, 16384, INFINITY});
  CHECK(test::values(h / 70000.0)[2] == Approx(1000.0 / 70000.0).epsilon(1e-3));
  CHECK(test::values(h * 1e-8)[2] == Approx(1e-5).epsilon(2e-3));
  const std::vector<double> r = test::values(70000.0 / h);
  CHECK(r[0] == INFINITY);  // 140000: beyond f16's range
  CHECK(r[2] == 70.0);
  Tensor d = clone(h);
  d.div_(70000.0);
  CHECK(test::values(d)[2] == test::values(h / 70000.0)[2]);
}

TEST_CASE("mul_scalar / div_scalar: gradients, autocast and integer tensors", "[ops][scalar]") {
  // d(x s)/dx = s and d(x / s)/dx = 1 / s, each in the gradient's dtype rounded once
  const Tensor x = to(from_vector<float>({1.0f, 2.0f, -3.0f}), DType::F16).requires_grad_();
  const Tensor gm = autograd::grad({sum(x * 1e-3)}, {x})[0];
  CHECK(gm.dtype() == DType::F16);
  CHECK(test::values(gm)[0] == double(round16(1e-3f, DType::F16)));
  const Tensor gd = autograd::grad({sum(x / 3.0)}, {x})[0];
  CHECK(test::values(gd)[0] == double(round16(1.0f / 3.0f, DType::F16)));
  // keep policy: an f16 tensor stays f16 under autocast (PyTorch's wrapped numbers do not promote)
  {
    amp::Autocast ac({.dtype = DType::F16});
    CHECK((x * 2.5).dtype() == DType::F16);
    CHECK((x / 2.5).dtype() == DType::F16);
  }
  // integers: a fractional scalar promotes to f32, a whole one keeps the dtype
  const Tensor i = from_vector<int32_t>({1, 2, 3});
  CHECK((i * 2.5).dtype() == DType::F32);
  CHECK(test::values(i * 2.5) == std::vector<double>{2.5, 5.0, 7.5});
  CHECK((i * 2.0).dtype() == DType::I32);
  CHECK((i / 2.0).dtype() == DType::F32);
}

TEST_CASE("pow of integer tensors: whole exponents keep the dtype and wrap, others give f32, as PyTorch's",
          "[ops][scalar]") {
  // Expected values printed by PyTorch 2.15 for torch.arange(-3, 5) ** e.
  const Tensor a = arange(-3, 5);
  const auto ints = [](const Tensor& t) {
    std::vector<int64_t> v;
    for (double x : test::values(t)) v.push_back(int64_t(x));
    return v;
  };
  CHECK(pow(a, 2.0).dtype() == DType::I64);
  CHECK(ints(pow(a, 2.0)) == std::vector<int64_t>{9, 4, 1, 0, 1, 4, 9, 16});
  CHECK(ints(pow(a, 3.0)) == std::vector<int64_t>{-27, -8, -1, 0, 1, 8, 27, 64});
  CHECK(ints(pow(a, 0.0)) == std::vector<int64_t>{1, 1, 1, 1, 1, 1, 1, 1});  // 0 ** 0 is 1
  // u8 and i32 wrap: (-3 as u8 = 253) ** 2 = 9 mod 256; i32 ** 31 overflows as PyTorch's does.
  const Tensor u = pow(to(a, DType::U8), 2.0);
  CHECK(u.dtype() == DType::U8);
  CHECK(ints(u) == std::vector<int64_t>{9, 4, 1, 0, 1, 4, 9, 16});
  const Tensor i = pow(to(a, DType::I32), 31.0);
  CHECK(i.dtype() == DType::I32);
  CHECK(ints(i) == std::vector<int64_t>{-1264544299, -2147483648LL, -1, 0, 1, -2147483648LL, 1264544299, 0});
  // bool is i64 (its scalars' rule)
  const Tensor b = pow(gt(a, zeros_like(a)), 2.0);
  CHECK(b.dtype() == DType::I64);
  CHECK(ints(b) == std::vector<int64_t>{0, 0, 0, 0, 1, 1, 1, 1});
  // A fractional exponent gives f32; a negative whole one is refused, as PyTorch refuses it.
  const Tensor f = pow(a, 0.5);
  CHECK(f.dtype() == DType::F32);
  const std::vector<double> fv = test::values(f);
  CHECK(std::isnan(fv[0]));
  CHECK(fv[3] == 0.0);
  CHECK(fv[5] == Approx(std::sqrt(2.0)).epsilon(1e-7));
  MG_REQUIRE_ERROR(pow(a, -1.0), "pow: integers to negative integer powers are not allowed, got [8] i64 cpu ** -1");
  // In place: a whole exponent stays in the tensor; any other is refused with the reason.
  Tensor c = a.clone();
  c.pow_(2.0);
  CHECK(ints(c) == std::vector<int64_t>{9, 4, 1, 0, 1, 4, 9, 16});
  Tensor d = a.clone();
  MG_REQUIRE_ERROR(d.pow_(0.5), "pow_: [8] i64 cpu ** 0.5 is not an integer of its dtype");
  // Strided and broadcast views take the same kernel.
  const Tensor m = reshape(arange(0, 12), {3, 4}).transpose(0, 1);
  CHECK(ints(pow(m, 2.0)) == ints(pow(contiguous(m), 2.0)));
}
