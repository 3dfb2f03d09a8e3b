// The op recorder: the flops it assigns to GEMM and conv calls, its per-dtype counts on real
// ops, and the timed mode's promise that the op times of a step add up to the step.
#include <catch2/catch.hpp>

#include <chrono>
#include <thread>

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
