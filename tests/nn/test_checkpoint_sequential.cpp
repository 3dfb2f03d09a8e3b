// nn::checkpoint_sequential: the same output and gradients as the Sequential run plainly (bit for
// bit, dropout included, both checkpoint forms), only the tensors between segments kept, and a
// named error for a segment count the Sequential cannot have.
#include <catch2/catch.hpp>

#include <memory>
#include <vector>

#include "core/factory.h"
#include "nn/nn.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

TEST_CASE("checkpoint_sequential: equals the plain Sequential, any segment count, both forms", "[nn][checkpoint]") {
  manual_seed(21);
  auto seq = std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::UnaryModule>>{
      nn::make<nn::Linear>({.in = 6, .out = 16}), nn::make<nn::GELU>(), nn::make<nn::Dropout>({.p = 0.2}),
      nn::make<nn::Linear>({.in = 16, .out = 16}), nn::make<nn::Tanh>(), nn::make<nn::Linear>({.in = 16, .out = 3})});
  const Tensor x0 = randn({5, 6});
  auto run = [&](int64_t segments, CheckpointOptions form) {
    seq->zero_grad();
    manual_seed(5);
    const Tensor x = x0.clone().requires_grad_();
    const Tensor y = segments == 0 ? (*seq)(x) : nn::checkpoint_sequential(*seq, segments, x, form);
    sum(y * y).backward();
    std::vector<std::vector<double>> r = {values(y), values(x.grad())};
    for (const Tensor& p : seq->parameters()) r.push_back(values(p.grad()));
    return r;
  };
  const auto plain = run(0, {});
  for (const int64_t segments : {1, 2, 4, 6}) {
    for (const bool reentrant : {false, true}) {
      INFO(segments << " segments, reentrant " << reentrant);
      CHECK(run(segments, {.reentrant = reentrant}) == plain);
    }
  }
  MG_REQUIRE_ERROR(nn::checkpoint_sequential(*seq, 0, x0), "checkpoint_sequential: 0 segments for a Sequential of 6 layers (1 to 6 allowed)");
  MG_REQUIRE_ERROR(nn::checkpoint_sequential(*seq, 7, x0), "checkpoint_sequential: 7 segments");
}

TEST_CASE("checkpoint_sequential: keeps only the tensors between segments, and outlives its Sequential", "[nn][checkpoint]") {
  std::vector<std::weak_ptr<Storage>> seen;
  auto probe = [&](const Tensor& t) {
    seen.push_back(t.impl()->storage);
    return t;
  };
  auto seq = std::make_shared<nn::Sequential>();
  for (int i = 0; i < 4; ++i) {
    seq->push_back(nn::make<nn::Linear>({.in = 8, .out = 8}));
    seq->push_back(std::make_shared<nn::Functional>([&](const Tensor& t) { return probe(tanh(t)); }));
  }
  const Tensor x = randn({3, 8}).requires_grad_();
  const Tensor y = nn::checkpoint_sequential(*seq, 2, x);
  // Segment 1 (layers 0-3, checkpointed): its inner tanh output is freed, its output (the input of
  // segment 2) kept; segment 2 runs plainly and keeps what its ops saved.
  REQUIRE(seen.size() == 4);
  CHECK(seen[0].expired());
  CHECK_FALSE(seen[1].expired());
  CHECK_FALSE(seen[2].expired());
  seq.reset();  // the graph holds the layers it recomputes
  sum(y).backward();
  CHECK(x.grad().defined());
}
