// The autocast policy table, op by op (DESIGN §4): every case of the op table runs inside an
// f16 and a bf16 Autocast region, once with f32 inputs and once with inputs already in the
// autocast dtype, and its output dtype must be what the op's policy says:
//   lower   -> the autocast dtype          fp32 -> f32
//   promote -> the widest floating input   keep -> the input dtype
//   banned  -> an error under f16 (f32 under bf16)
// Ops whose output dtype is fixed (comparisons, argmax, casts) keep it.
#include <catch2/catch.hpp>

#include <string>

#include "amp/autocast.h"
#include "autograd/grad_mode.h"
#include "op_cases.h"

using namespace mg;
using namespace mg::optable;

namespace {

DType expected_dtype(const OpCase& c, DType input, DType lowp) {
  if (c.out_dtype) return *c.out_dtype;
  switch (op_policy(c.op)) {
    case CastPolicy::Lower: return lowp;
    case CastPolicy::Fp32:
    case CastPolicy::Banned: return DType::F32;
    case CastPolicy::Promote:
    case CastPolicy::Keep: return input;
  }
  return input;
}

}  // namespace

TEST_CASE("autocast: every op's output dtype follows its policy under f16 and bf16", "[ops][amp]") {
  reset_policies();
  int checked = 0;
  for (const OpCase& c : all_op_cases()) {
    if (c.skip_lowp) continue;
    for (DType lowp : {DType::F16, DType::BF16}) {
      for (DType input : {DType::F32, lowp}) {
        INFO(c.name << " (" << policy_name(op_policy(c.op)) << ") under " << dtype_name(lowp) << " autocast, "
                    << dtype_name(input) << " inputs");
        const Tensors in = c.make_inputs(input);
        NoGradGuard no_grad;
        amp::Autocast autocast({.dtype = lowp});
        if (op_policy(c.op) == CastPolicy::Banned && lowp == DType::F16) {
          try {
            c.run(in);
            FAIL_CHECK("a banned op ran under f16 autocast");
          } catch (const DTypeError& e) {
            CHECK_THAT(e.what(), Catch::Matchers::Contains("banned under f16 autocast"));
          }
          continue;
        }
        Tensor y;
        try {
          y = c.run(in);
        } catch (const std::exception& e) {
          FAIL_CHECK("threw: " << e.what());
          continue;
        }
        CHECK(dtype_name(y.dtype()) == std::string(dtype_name(expected_dtype(c, input, lowp))));
        ++checked;
      }
    }
  }
  CHECK(checked > 400);
}

TEST_CASE("autocast: promote casts mixed inputs to the widest, f16 with bf16 to f32", "[ops][amp]") {
  NoGradGuard no_grad;
  amp::Autocast autocast({.dtype = DType::BF16});
  const Tensor a = ones({2}, {.dtype = DType::F16}), b = ones({2}, {.dtype = DType::BF16});
  CHECK(add(a, b).dtype() == DType::F32);
  CHECK(add(a, ones({2})).dtype() == DType::F32);
  CHECK(add(a, ones({2}, {.dtype = DType::F64})).dtype() == DType::F64);
  // lower leaves f64 alone, as PyTorch does
  CHECK(matmul(ones({2, 2}, {.dtype = DType::F64}), ones({2, 2}, {.dtype = DType::F64})).dtype() == DType::F64);
}
