// ZeroRedundantOptimizer (distributed/zero.h) and broadcast_state_dict: the partition and the
// state-dict transfer in one process (a one-rank Gloo group), and the real thing across 2 and 3
// processes started by mixgrad-run (tests/distributed/worker/zero_scenarios.cpp checks its own
// results and prints how many checks passed; this file checks every rank finished them all).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <limits>

#include "core/factory.h"
#include "core/generator.h"
#include "distributed/solo_group.h"
#include "distributed/state_dict_broadcast.h"
#include "distributed/zero.h"
#include "distributed/worker_run.h"
#include "ops/ops.h"
#include "optim/optim.h"
#include "test_util.h"

using namespace mg;

namespace {

std::string run_zero(const std::string& mode, int world) { return test::run_worker(mode, world); }
using test::check_passed;

bool same_bits(const Tensor& a, const Tensor& b) {
  const Tensor x = a.contiguous(), y = b.contiguous();
  return x.dtype() == y.dtype() && x.shape() == y.shape() &&
         std::memcmp(x.data_ptr(), y.data_ptr(), std::size_t(x.numel()) * x.element_size()) == 0;
}

}  // namespace

TEST_CASE("zero: the partition balances elements greedily and gives every rank a parameter", "[distributed][zero]") {
  using distributed::partition_parameters;
  // Sizes 100, 60, 50, 40, 10 over 2 ranks: 100 -> 0; 60 -> 1; 50 -> 1 (60 < 100); 40 -> 0
  // (100 < 110); 10 -> 1 (140 > 110).
  CHECK(partition_parameters({40, 100, 10, 60, 50}, 2) == std::vector<int>{0, 0, 1, 1, 1});
  // Ties go to the earlier position and the lower rank.
  CHECK(partition_parameters({5, 5, 5}, 3) == std::vector<int>{0, 1, 2});
  // Empty parameters still go round (ties on elements are broken by the parameter count).
  CHECK(partition_parameters({0, 0, 0, 0}, 2) == std::vector<int>{0, 1, 0, 1});
  CHECK(partition_parameters({7}, 1) == std::vector<int>{0});
  for (int world = 1; world <= 5; ++world) {
    const std::vector<int> owners = partition_parameters({1000, 3, 3, 3, 3, 3, 3}, world);
    for (int r = 0; r < world; ++r) CHECK(std::count(owners.begin(), owners.end(), r) >= 1);
  }
  MG_REQUIRE_ERROR(partition_parameters({1}, 0), "world_size must be >= 1");
  // Frozen parameters go after every trainable one: a frozen embedding larger than the rest no
  // longer makes rank 0's whole shard (which then had no gradient for GradScaler to check).
  CHECK(partition_parameters({1000, 10, 20}, 2, {false, true, true}) == std::vector<int>{1, 1, 0});
  CHECK(partition_parameters({1000, 10, 20}, 2) == std::vector<int>{0, 1, 1});
}

TEST_CASE("zero: broadcast_state_dict sends every kind of entry exactly", "[distributed][zero]") {
  auto pg = test::solo_group();
  StateDict s;
  s.ints["a"] = -(int64_t(1) << 62);
  s.ints["step_count"] = 3;
  s.floats["nan"] = std::numeric_limits<double>::quiet_NaN();
  s.floats["neg zero"] = -0.0;
  s.floats["tiny"] = 4.9e-324;
  s.strings["optimizer"] = "AdamW";
  s.strings["odd bytes"] = std::string("a\0b\nc", 5);
  manual_seed(4);
  s.tensors.emplace_back("state.0.exp_avg", randn({3, 4}));
  s.tensors.emplace_back("f64", randn({5}).to(DType::F64));
  s.tensors.emplace_back("empty", empty({0, 3}));
  s.tensors.emplace_back("bf16", randn({7}).to(DType::BF16));
  s.tensors.emplace_back("i64", arange(0, 6, 1, {.dtype = DType::I64}).reshape({2, 3}));
  s.tensors.emplace_back("strided", randn({4, 6}).t());
  const StateDict r = distributed::broadcast_state_dict(*pg, s, 0, Device::cpu());
  CHECK(r.ints == s.ints);
  CHECK(r.strings == s.strings);
  REQUIRE(r.floats.size() == s.floats.size());
  for (const auto& [k, v] : s.floats) {
    INFO(k);
    CHECK(std::memcmp(&v, &r.floats.at(k), sizeof v) == 0);
  }
  REQUIRE(r.tensors.size() == s.tensors.size());
  for (std::size_t i = 0; i < s.tensors.size(); ++i) {
    INFO(s.tensors[i].first);
    CHECK(r.tensors[i].first == s.tensors[i].first);
    CHECK(same_bits(r.tensors[i].second, s.tensors[i].second));
    CHECK(!r.tensors[i].second.is_same(s.tensors[i].second));  // copies, also on the root
  }
  StateDict bad;
  bad.tensors.emplace_back("x", Tensor());
  MG_REQUIRE_ERROR(distributed::broadcast_state_dict(*pg, bad, 0, Device::cpu()), "tensor 'x' is undefined");
  MG_REQUIRE_ERROR(distributed::broadcast_state_dict(*pg, s, 1, Device::cpu()), "root 1 is not a rank");
}

TEST_CASE("zero: on one rank it is the plain optimizer, state dict included", "[distributed][zero]") {
  auto pg = test::solo_group();
  const auto make_params = [] {
    manual_seed(9);
    return Tensors{randn({6, 4}).to(DType::F64).requires_grad_(), randn({4}).to(DType::F64).requires_grad_(),
                   randn({3}).to(DType::F64).requires_grad_()};
  };
  Tensors a = make_params(), b = make_params();
  optim::AdamW plain(a, {.lr = 0.05, .weight_decay = 0.1});
  distributed::ZeroRedundantOptimizer zero(b, pg, [](const auto& shard) {
    return std::make_unique<optim::AdamW>(shard, optim::AdamWOptions{.lr = 0.05, .weight_decay = 0.1});
  });
  for (int s = 0; s < 3; ++s) {
    for (Tensors* ps : {&a, &b}) {
      Tensor loss = ((*ps)[0].sum({0}) * (*ps)[1]).pow(2.0).sum() + (*ps)[2].tanh().sum();
      loss.backward();
    }
    zero.clip_grad_norm_(0.5);
    optim::clip_grad_norm_(a, 0.5);
    plain.step();
    zero.local().step();
    plain.zero_grad();
    zero.local().zero_grad();
  }
  for (std::size_t i = 0; i < a.size(); ++i) CHECK_THAT((a[i] - b[i]).abs().max().item<double>(), Catch::Matchers::WithinAbs(0.0, 1e-14));
  const StateDict sp = plain.state_dict(), sz = zero.state_dict();
  CHECK(sz.ints == sp.ints);
  CHECK(sz.strings == sp.strings);
  CHECK(sz.floats == sp.floats);
  REQUIRE(sz.tensors.size() == sp.tensors.size());
  for (std::size_t i = 0; i < sp.tensors.size(); ++i) CHECK(sz.tensors[i].first == sp.tensors[i].first);
  CHECK(zero.local().state_bytes() == 2 * (24 + 4 + 3) * 8);
}

TEST_CASE("zero: bad input is refused with the reason", "[distributed][zero]") {
  auto pg = test::solo_group();
  const auto sgd = [](const auto& shard) { return std::make_unique<optim::SGD>(shard, optim::SGDOptions{.lr = 0.1}); };
  Tensor w = randn({3}).requires_grad_();
  MG_REQUIRE_ERROR(distributed::ZeroRedundantOptimizer(Tensors{}, pg, sgd), "0 parameters cannot be shared out over 1 ranks");
  MG_REQUIRE_ERROR(distributed::ZeroRedundantOptimizer(Tensors{w, w}, pg, sgd), "is given twice");
  MG_REQUIRE_ERROR(distributed::ZeroRedundantOptimizer(Tensors{w}, nullptr, sgd), "the process group is null");
  MG_REQUIRE_ERROR(distributed::ZeroRedundantOptimizer(Tensors{w * 2.0}, pg, sgd), "floating leaf tensors");
  // A factory that does not keep the shard as given.
  Tensor other = randn({2}).requires_grad_();
  MG_REQUIRE_ERROR(distributed::ZeroRedundantOptimizer(
                       Tensors{w}, pg, [&](const auto&) { return std::make_unique<optim::SGD>(Tensors{other}); }),
                   "pass the shard through unchanged");
  distributed::ZeroRedundantOptimizer zero(Tensors{w}, pg, sgd);
  MG_REQUIRE_ERROR(zero.state_dict(1), "'to' must be -1 (every rank) or a rank below 1");
  MG_REQUIRE_ERROR(zero.clip_grad_norm_(-1.0), "max_norm must be >= 0");
  StateDict s = zero.state_dict();
  s.ints["state.7.step"] = 1;
  MG_REQUIRE_ERROR(zero.load_state_dict(s), "unexpected integer 'state.7.step'");
  s = zero.state_dict();
  s.strings["group.0.params"] = "1";
  MG_REQUIRE_ERROR(zero.load_state_dict(s), "param group 0 holds parameters 0 but the saved group lists 1");
}

TEST_CASE("zero: 2 and 3 ranks train bitwise as DDP with the unsharded optimizer, with a share of its state",
          "[distributed][zero]") {
  // 8 configurations x 5 checks.
  check_passed(run_zero("zero-equivalence", 2), "zero equivalence", 2, 8 * 5);
  check_passed(run_zero("zero-equivalence", 3), "zero equivalence", 3, 8 * 5);
}

TEST_CASE("zero: the consolidated state dict is the unsharded optimizer's, and loads back", "[distributed][zero]") {
  check_passed(run_zero("zero-state", 3), "zero state", 3, 2 * 7);
}

TEST_CASE("zero: an inf in one rank's shard makes every rank skip", "[distributed][zero]") {
  check_passed(run_zero("zero-inf", 2), "zero inf", 2, 1 + 2 + 1);
  check_passed(run_zero("zero-inf", 3), "zero inf", 3, 1 + 3 + 1);
}

TEST_CASE("zero: different parameters, or a factory or a step failing on one rank, give errors and no wait",
          "[distributed][zero]") {
  check_passed(run_zero("zero-mismatch", 2), "zero mismatch", 2, 7);
}

TEST_CASE("zero: frozen parameters are not broadcast after each step, and are once unfrozen", "[distributed][zero]") {
  check_passed(run_zero("zero-frozen", 2), "zero frozen", 2, 6);
  check_passed(run_zero("zero-frozen", 3), "zero frozen", 3, 6);
}
