// The op recorder: the flops it assigns to GEMM and conv calls, its per-dtype counts on real
// ops, and the timed mode's promise that the op times of a step add up to the step.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

#include "autograd/grad_mode.h"
#include "benchmarks/amp/op_recorder.h"
#include "core/factory.h"
#include "ops/conv.h"
#include "ops/ops.h"

using mg::bench::OpKey;
using mg::bench::OpRecorder;

TEST_CASE("op recorder: flops of linear, matmul, conv2d and attention calls", "[bench]") {
  const mg::Tensors lin_in{mg::zeros({4, 8}), mg::zeros({16, 8})};
  const mg::Tensors lin_out{mg::zeros({4, 16})};
  mg::OpEvent e;
  e.op = "linear", e.inputs = &lin_in, e.outputs = &lin_out;
  CHECK(mg::bench::gemm_conv_flops(e) == 2.0 * 4 * 16 * 8);  // 2 M N K

  const mg::Tensors bmm_in{mg::zeros({3, 4, 5}), mg::zeros({3, 5, 6})};
  const mg::Tensors bmm_out{mg::zeros({3, 4, 6})};
  e.op = "matmul", e.inputs = &bmm_in, e.outputs = &bmm_out;
  CHECK(mg::bench::gemm_conv_flops(e) == 2.0 * 3 * 4 * 6 * 5);

  const mg::Tensors conv_in{mg::zeros({2, 3, 8, 8}), mg::zeros({16, 3, 3, 3})};
  const mg::Tensors conv_out{mg::zeros({2, 16, 8, 8})};
  e.op = "conv2d", e.inputs = &conv_in, e.outputs = &conv_out;
  CHECK(mg::bench::gemm_conv_flops(e) == 2.0 * (2 * 16 * 8 * 8) * (3 * 3 * 3));

  // Fused attention, q [2, 3, 5, 8] k [2, 3, 7, 8] v [2, 3, 7, 4]: q kᵀ 2·(2·3·5)·7·8, P v 2·(2·3·5)·7·4.
  const mg::Tensors att_in{mg::zeros({2, 3, 5, 8}), mg::zeros({2, 3, 7, 8}), mg::zeros({2, 3, 7, 4})};
  const mg::Tensors att_out{mg::zeros({2, 3, 5, 4}), mg::zeros({2, 3, 5, 2})};
  e.op = "attention", e.inputs = &att_in, e.outputs = &att_out;
  CHECK(mg::bench::gemm_conv_flops(e) == 2.0 * 30 * 7 * 8 + 2.0 * 30 * 7 * 4);

  e.op = "add";
  CHECK(mg::bench::gemm_conv_flops(e) == 0);
  e.op = "linear", e.backward = true, e.inputs = &lin_in, e.outputs = &lin_out;
  CHECK(mg::bench::gemm_conv_flops(e) == 0);  // forward flops only
}

TEST_CASE("op recorder: backward flops, one product per operand that requires a gradient", "[bench]") {
  // linear x [4, 8] @ w [16, 8]ᵀ: a first layer (x needs no gradient) runs dW only, a hidden one dX and dW.
  const mg::Tensor w = mg::zeros({16, 8}).requires_grad_(true);
  const mg::Tensor x = mg::zeros({4, 8});
  const mg::Tensors first_in{x, w};
  const mg::Tensors first_out{mg::linear(x, w)};
  mg::OpEvent e;
  e.op = "linear", e.inputs = &first_in, e.outputs = &first_out;
  CHECK(mg::bench::gemm_conv_backward_flops(e) == 2.0 * 4 * 16 * 8);
  const mg::Tensor h = mg::zeros({4, 8}).requires_grad_(true);
  const mg::Tensors hidden_in{h, w};
  const mg::Tensors hidden_out{mg::linear(h, w)};
  e.inputs = &hidden_in, e.outputs = &hidden_out;
  CHECK(mg::bench::gemm_conv_backward_flops(e) == 2 * 2.0 * 4 * 16 * 8);
  {
    const mg::NoGradGuard no_grad;  // an output that needs no gradient: no backward
    const mg::Tensors eval_out{mg::linear(h, w)};
    e.outputs = &eval_out;
    CHECK(mg::bench::gemm_conv_backward_flops(e) == 0);
  }
  // addmm (c, a, b): a and b's gradients are products, c's a copy.
  const mg::Tensor c = mg::zeros({4, 6}).requires_grad_(true);
  const mg::Tensor a = mg::zeros({4, 5}).requires_grad_(true);
  const mg::Tensor b = mg::zeros({5, 6});
  const mg::Tensors addmm_in{c, a, b};
  const mg::Tensors addmm_out{mg::addmm(c, a, b)};
  e.op = "addmm", e.inputs = &addmm_in, e.outputs = &addmm_out;
  CHECK(mg::bench::gemm_conv_backward_flops(e) == 2.0 * 4 * 6 * 5);
  // attention q [2, 5, 8] k [2, 7, 8] v [2, 7, 4]: G1 = q kᵀ, G2 = P v. All three need gradients:
  // dq, dk (G1 each), dv and dP (G2 each); only v: dv alone.
  const double g1 = 2.0 * 10 * 7 * 8, g2 = 2.0 * 10 * 7 * 4;
  const mg::Tensor q = mg::zeros({2, 5, 8}), k = mg::zeros({2, 7, 8}), v = mg::zeros({2, 7, 4});
  const mg::Tensor qg = q.detach().requires_grad_(true), kg = k.detach().requires_grad_(true);
  const mg::Tensor vg = v.detach().requires_grad_(true);
  const mg::Tensors att_all{qg, kg, vg};
  const mg::Tensors att_v{q, k, vg};
  const mg::Tensors att_out{mg::zeros({2, 5, 4}).requires_grad_(true)};
  e.op = "attention", e.inputs = &att_all, e.outputs = &att_out;
  REQUIRE(mg::bench::gemm_conv_flops(e) == g1 + g2);
  CHECK(mg::bench::gemm_conv_backward_flops(e) == 2 * g1 + 2 * g2);
  e.inputs = &att_v;
  CHECK(mg::bench::gemm_conv_backward_flops(e) == g2);
  e.op = "linear", e.backward = true, e.inputs = &hidden_in, e.outputs = &hidden_out;
  CHECK(mg::bench::gemm_conv_backward_flops(e) == 0);  // a backward event counts nothing itself
}

TEST_CASE("op recorder: counts real ops by output dtype, forward and backward apart", "[bench]") {
  OpRecorder rec;
  const mg::Tensor a = mg::randn({8, 8}).to(mg::DType::BF16).requires_grad_(true);
  const mg::Tensor b = mg::randn({8, 8}).to(mg::DType::BF16);
  mg::Tensor y = mg::matmul(a, b);
  mg::matmul(mg::randn({2, 2}), mg::randn({2, 2}));
  y.sum().backward();
  const auto& s = rec.stats();
  REQUIRE(s.count(OpKey{"matmul", false}) == 1);
  const mg::bench::OpStats& m = s.at(OpKey{"matmul", false});
  CHECK(m.calls == 2);
  CHECK(m.low_outputs == 1);
  CHECK(m.f32_outputs == 1);
  CHECK(m.low_dtype == mg::DType::BF16);
  CHECK(m.flops == 2.0 * 8 * 8 * 8 + 2.0 * 2 * 2 * 2);
  CHECK(m.backward_flops == 2.0 * 8 * 8 * 8);  // only a needs a gradient, and only in the first call
  bool saw_backward = false;
  for (const auto& [key, st] : s) saw_backward = saw_backward || key.backward;
  CHECK(saw_backward);
}

TEST_CASE("op recorder: a timed step's op times add up to the step", "[bench]") {
  OpRecorder rec({.timed = true});
  const mg::Tensor x = mg::randn({64, 64});
  rec.begin_step();
  mg::Tensor y = mg::matmul(x, x);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // loop code after the last op
  rec.end_step();
  double total = 0;
  for (const auto& [key, st] : rec.stats()) total += st.seconds;
  CHECK(rec.steps() == 1);
  CHECK(total == Approx(rec.step_seconds()).epsilon(1e-9));
  CHECK(rec.stats().at(OpKey{mg::bench::kBetweenOps, false}).seconds >= 0.019);
  CHECK_THROWS_WITH(OpRecorder(), Catch::Contains("another recorder is installed"));
}

TEST_CASE("op recorder: named phases take the time since the previous event, ops inside them report as themselves",
          "[bench]") {
  OpRecorder rec({.timed = true});
  rec.phase("(outside a step)");  // not in a step: nothing recorded
  CHECK(rec.stats().empty());
  const mg::Tensor x = mg::randn({64, 64});
  rec.begin_step();
  std::this_thread::sleep_for(std::chrono::milliseconds(10));
  rec.phase("(first)");
  mg::Tensor y = mg::matmul(x, x);  // inside the second phase: the op reports itself
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  rec.phase("(second)");
  rec.end_step();
  const auto& s = rec.stats();
  CHECK(s.at(OpKey{"(first)", false}).calls == 1);
  CHECK(s.at(OpKey{"(first)", false}).seconds >= 0.009);
  CHECK(s.at(OpKey{"(second)", false}).seconds >= 0.019);
  CHECK(s.at(OpKey{"matmul", false}).calls == 1);
  CHECK(s.at(OpKey{"(first)", false}).seconds < s.at(OpKey{"(second)", false}).seconds);
  double total = 0;
  for (const auto& [key, st] : s) total += st.seconds;
  CHECK(total == Approx(rec.step_seconds()).epsilon(1e-9));
  CHECK(s.at(OpKey{mg::bench::kBetweenOps, false}).seconds < 0.005);  // nothing after the last phase
  CHECK_THROWS_WITH(rec.phase("optimizer"), Catch::Contains("a phase name is parenthesised"));
  CHECK(mg::bench::is_phase_name(mg::bench::kBetweenOps));
  CHECK_FALSE(mg::bench::is_phase_name("linear"));
}
