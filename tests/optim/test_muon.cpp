// Muon (optim/muon.h) against PyTorch 2.15's torch.optim.Muon (tools/reference/gen_torch_optim_extra.py:
// a wide, a tall and a square matrix, one with gradients under eps and one with zero gradients, four
// option sets, 6 steps): with the Newton–Schulz iteration
// in f64 against the same iteration in f64 (every formula of the step), and in bf16 against PyTorch's
// own bf16 run; then option and shape errors, the state-dict round trip, and O2 training beside AdamW.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"
#include "core/factory.h"
#include "core/generator.h"
#include "core/parallel.h"
#include "core/state_dict.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "optim/optim.h"
#include "optim_test_util.h"
#include "path_compare.h"
#include "test_util.h"

using namespace mg;

namespace {

const char* const kCases[] = {"default", "plain_match_rms", "spectral_custom", "no_momentum"};
constexpr int kParams = 5;  // [3, 4], [5, 2], [6, 6], [4, 3] (gradients 1e-6 smaller), [2, 2] (zero gradients)

optim::MuonOptions options_of(const test::ReferenceFile& f, const std::string& c, bool ns_bf16) {
  const std::vector<double> v = test::values(f.tensor("muon." + c + ".options"));
  REQUIRE(v.size() == 10);
  return {.lr = v[0], .weight_decay = v[1], .momentum = v[2], .nesterov = v[3] != 0.0,
          .ns_coefficients = {v[4], v[5], v[6]}, .eps = v[7], .ns_steps = int64_t(v[8]),
          .adjust_lr = int64_t(v[9]), .ns_bf16 = ns_bf16};
}

// The worst relative error of the parameters against muon.<case>.<variant>.p<k>.steps over all
// steps, with params of `dtype` and the iteration in bf16 or in opmath.
double run_case(const test::ReferenceFile& f, const std::string& c, const std::string& variant, DType dtype,
                bool ns_bf16) {
  Tensors ps;
  for (int k = 0; k < kParams; ++k) ps.push_back(to(f.tensor("muon.p" + std::to_string(k) + ".init"), dtype).requires_grad_());
  optim::Muon opt(ps, options_of(f, c, ns_bf16));
  double worst = 0.0;
  const int64_t steps = f.tensor("muon.p0.grads").size(0);
  for (int64_t s = 0; s < steps; ++s) {
    for (int k = 0; k < kParams; ++k) {
      ps[std::size_t(k)].set_grad(to(f.tensor("muon.p" + std::to_string(k) + ".grads").select(0, s), dtype));
    }
    opt.step();
    for (int k = 0; k < kParams; ++k) {
      const std::string n = "muon." + c + "." + variant + ".p" + std::to_string(k) + ".steps";
      worst = std::max(worst, test::rel_error(ps[std::size_t(k)], test::stored_row(f, n, s)));
    }
  }
  return worst;
}

}  // namespace

TEST_CASE("Muon: every formula of the step matches PyTorch 2.15 with the Newton-Schulz iteration in f64",
          "[optim][muon]") {
  const test::ReferenceFile f = test::load_reference("optim_extra.txt");
  for (const char* c : kCases) {
    const double e64 = run_case(f, c, "f64", DType::F64, /*ns_bf16=*/false);
    const double e32 = run_case(f, c, "f64", DType::F32, /*ns_bf16=*/false);
    INFO(c << ": f64 " << e64 << ", f32 " << e32);
    CHECK(e64 <= 1e-12);
    CHECK(e32 <= 2e-6);
    test::report(std::string("muon ") + c + " (f64 iteration, f64)", e64);
    test::report(std::string("muon ") + c + " (f32 iteration, f32)", e32);
  }
}

TEST_CASE("Muon: the bf16 iteration follows PyTorch's bf16 run, not the f64 one", "[optim][muon]") {
  const test::ReferenceFile f = test::load_reference("optim_extra.txt");
  for (const char* c : kCases) {
    // f64 parameters: only the iteration is rounded, as in PyTorch's f64 run. Bit-identical to it
    // on an AMD EPYC (AVX512-BF16); a processor whose bf16 GEMM sums in another order may land a
    // bf16 rounding on a neighbour.
    const double near = run_case(f, c, "bf16", DType::F64, /*ns_bf16=*/true);
    const double far = run_case(f, c, "f64", DType::F64, /*ns_bf16=*/true);
    INFO(c << ": against PyTorch's bf16 run " << near << ", against the f64 iteration " << far);
    CHECK(near <= 2e-3);
    CHECK(far > 2.0 * near);  // the iteration did run in bf16
    test::report(std::string("muon ") + c + " (bf16 iteration vs PyTorch's)", near);
  }
}

TEST_CASE("newton_schulz_orthogonalize: singular values near 1 for a wide and a tall matrix", "[optim][muon]") {
  Generator gen(5);
  for (const Shape& s : std::vector<Shape>{{24, 64}, {64, 24}}) {
    const Tensor u = randn(s, {.dtype = DType::F64}, &gen);
    for (DType dt : {DType::F64, DType::BF16}) {
      const Tensor o = optim::newton_schulz_orthogonalize(u, {}, dt);
      CHECK(o.dtype() == dt);
      CHECK(o.shape() == s);
      // O = U S' V^T with S' in about (0.5, 1.5) (Jordan's coefficients stop short of 1): the Gram
      // matrix of the short side has eigenvalues S'^2, so its trace / 24 lies in (0.25, 2.25) and
      // its off-diagonal entries are small against its diagonal.
      const Tensor of = to(o, DType::F64);
      const Tensor gram = s[0] < s[1] ? matmul(of, transpose(of, 0, 1)) : matmul(transpose(of, 0, 1), of);
      const Tensor id = eye(24, -1, {.dtype = DType::F64});
      const double mean_sq = sum(gram * id).item<double>() / 24.0;
      CHECK(mean_sq > 0.25);
      CHECK(mean_sq < 2.25);
      const double off = amax(abs(gram * (1.0 - id))).item<double>();
      CHECK(off < 0.35);
    }
  }
}

TEST_CASE("Muon: bad options and parameters that are not matrices are named errors", "[optim][muon]") {
  Tensor w = zeros({3, 4}).requires_grad_();
  Tensor b = zeros({4}).requires_grad_();
  MG_REQUIRE_ERROR(optim::Muon({w, b}), "Muon: parameter 1 (group 0) is [4]");
  MG_REQUIRE_ERROR(optim::Muon({w}, {.ns_steps = 100}), "ns_steps must be an integer in [0, 100)");
  MG_REQUIRE_ERROR(optim::Muon({w}, {.adjust_lr = 3}), "adjust_lr must be 0 (original)");
  MG_REQUIRE_ERROR(optim::Muon({w}, {.momentum = -0.1}), "momentum must be >= 0");
  MG_REQUIRE_ERROR(optim::Muon({w}, {.ns_coefficients = {NAN, 1.0, 1.0}}), "ns_a must be finite");
  optim::Muon opt({w});
  w.set_grad(ones({3, 4}));
  opt.param_groups()[0].set_option("ns_steps", 2.5);
  MG_REQUIRE_ERROR(opt.step(), "ns_steps must be an integer");
  opt.param_groups()[0].set_option("ns_steps", 5);
  opt.add_param_group({b});  // PyTorch checks at construction only; the step names it
  b.set_grad(ones({4}));
  MG_REQUIRE_ERROR(opt.step(), "Muon: parameter 1 (group 1) is [4]");
}

TEST_CASE("Muon: a state dict saved after two steps resumes bit for bit", "[optim][muon]") {
  Generator gen(8);
  const Tensor w0 = randn({16, 8}, {}, &gen);
  std::vector<Tensor> grads;
  for (int s = 0; s < 5; ++s) grads.push_back(randn({16, 8}, {}, &gen));
  Tensor a = clone(w0).requires_grad_();
  optim::Muon opt_a({a}, {.lr = 0.02});
  for (int s = 0; s < 5; ++s) {
    a.set_grad(grads[std::size_t(s)]);
    opt_a.step();
  }
  Tensor b = clone(w0).requires_grad_();
  optim::Muon first({b}, {.lr = 0.02});
  for (int s = 0; s < 2; ++s) {
    b.set_grad(grads[std::size_t(s)]);
    first.step();
  }
  const StateDict saved = first.state_dict();
  optim::Muon resumed({b}, {.lr = 0.5});  // the saved lr comes back
  resumed.load_state_dict(saved);
  for (int s = 2; s < 5; ++s) {
    b.set_grad(grads[std::size_t(s)]);
    resumed.step();
  }
  CHECK(test::bits_equal(a.detach(), b.detach()));
}

TEST_CASE("Muon: an O2 bf16 MLP trains with Muon on its matrices and AdamW on its biases, and a skipped step "
          "changes nothing",
          "[optim][muon][amp]") {
  Generator gen(21);
  const Tensor x = randn({64, 16}, {}, &gen), y = randn({64, 4}, {}, &gen);
  Tensor w1 = to(randn({32, 16}, {}, &gen) * 0.25, DType::BF16).requires_grad_();
  Tensor b1 = zeros({32}, {.dtype = DType::BF16}).requires_grad_();
  Tensor w2 = to(randn({4, 32}, {}, &gen) * 0.2, DType::BF16).requires_grad_();
  optim::Muon muon({w1, w2}, {.lr = 0.02});
  optim::AdamW adamw({b1}, {.lr = 1e-2});
  muon.use_master_weights();
  adamw.use_master_weights();
  const auto loss_of = [&] {
    const Tensor h = relu(add(matmul(x.to(DType::BF16), transpose(w1, 0, 1)), b1));
    return mse_loss(to(matmul(h, transpose(w2, 0, 1)), DType::F32), y);
  };
  const double first = loss_of().item<double>();
  for (int s = 0; s < 30; ++s) {
    muon.zero_grad();
    adamw.zero_grad();
    loss_of().backward();
    muon.step();
    adamw.step();
  }
  const double last = loss_of().item<double>();
  INFO("loss " << first << " -> " << last);
  CHECK(last < 0.8 * first);
  // An overflowed step: the flag set, masters, buffers and model untouched.
  const Tensor master = clone(muon.parameters()[0].detach());
  const Tensor buf = clone(muon.state(muon.parameters()[0])->buffers.at("momentum_buffer"));
  const Tensor model = clone(w1.detach());
  muon.zero_grad();
  (loss_of() * 1e38 * 1e38).backward();
  muon.step_unless_found_inf(full({1}, 1.0, {.dtype = DType::F32}));
  CHECK(muon.last_step_skipped());
  CHECK(test::bits_equal(muon.parameters()[0].detach(), master));
  CHECK(test::bits_equal(muon.state(muon.parameters()[0])->buffers.at("momentum_buffer"), buf));
  CHECK(test::bits_equal(w1.detach(), model));
}

// use_muon = 0 groups run optim::AdamW's update: a Muon over both kinds of group must step each
// parameter bit for bit as a Muon over the matrices plus an AdamW over the rest (each tested
// against PyTorch on its own), on the fused CPU path and on the device-generic one.
TEST_CASE("Muon: use_muon = 0 groups step bit for bit as optim::AdamW, the matrices as a plain Muon",
          "[optim][muon]") {
  const DType dtype = GENERATE(DType::F32, DType::BF16, DType::F64);
  const bool generic = GENERATE(false, true);
  INFO(dtype_name(dtype) << (generic ? ", generic path" : ", fused CPU path"));
  Generator gen(5);
  const std::vector<Shape> shapes = {{6, 4}, {4, 9}, {7}, {3, 5}, {1, 1, 3}};
  const std::vector<bool> matrix = {true, true, false, false, false};  // [3, 5]: an embedding-like matrix on AdamW
  std::vector<Tensor> init;
  for (const Shape& s : shapes) init.push_back(to(randn(s, {}, &gen), dtype));
  std::vector<std::vector<Tensor>> grads(5);
  for (int step = 0; step < 4; ++step) {
    for (std::size_t k = 0; k < shapes.size(); ++k) grads[k].push_back(to(randn(shapes[k], {}, &gen), dtype));
  }
  const optim::MuonOptions mo{.lr = 0.03, .weight_decay = 0.05, .adjust_lr = optim::MuonOptions::kMatchRmsAdamW,
                              .adamw_beta1 = 0.8, .adamw_beta2 = 0.95, .adamw_eps = 1e-6};
  Tensors hybrid, alone;
  for (const Tensor& t : init) {
    hybrid.push_back(clone(t).requires_grad_());
    alone.push_back(clone(t).requires_grad_());
  }
  optim::Muon combined({{.params = {hybrid[0], hybrid[1]}},
                        {.params = {hybrid[2], hybrid[3]}, .options = {{"use_muon", 0}}},
                        {.params = {hybrid[4]}, .options = {{"use_muon", 0}, {"weight_decay", 0}}}},
                       mo);
  optim::Muon muon({alone[0], alone[1]}, mo);
  optim::AdamW adamw({{.params = {alone[2], alone[3]}}, {.params = {alone[4]}, .options = {{"weight_decay", 0}}}},
                     {.lr = mo.lr, .betas = {0.8, 0.95}, .eps = 1e-6, .weight_decay = mo.weight_decay});
  for (int step = 0; step < 4; ++step) {
    for (std::size_t k = 0; k < shapes.size(); ++k) {
      hybrid[k].set_grad(grads[k][std::size_t(step)]);
      alone[k].set_grad(grads[k][std::size_t(step)]);
    }
    if (generic) {
      optim::ForceGenericPathGuard force;
      combined.step();
      muon.step();
      adamw.step();
    } else {
      combined.step();
      muon.step();
      adamw.step();
    }
  }
  for (std::size_t k = 0; k < shapes.size(); ++k) {
    INFO("parameter " << k);
    CHECK(test::bits_equal(hybrid[k].detach(), alone[k].detach()));
    CHECK_FALSE(test::bits_equal(hybrid[k].detach(), init[k]));
    const optim::Optimizer& owner = matrix[k] ? static_cast<const optim::Optimizer&>(muon) : adamw;
    for (const auto& [name, b] : owner.state(alone[k])->buffers) {
      INFO(name);
      CHECK(test::bits_equal(combined.state(hybrid[k])->buffers.at(name), b));
    }
    CHECK(combined.state(hybrid[k])->buffers.size() == owner.state(alone[k])->buffers.size());
  }
}

TEST_CASE("Muon: use_muon = 0 groups take any shape, check their AdamW options, and round-trip the state dict",
          "[optim][muon]") {
  Tensor w = zeros({3, 4}).requires_grad_();
  Tensor b = zeros({4}).requires_grad_();
  const std::vector<optim::ParamGroupSpec> groups = {{.params = {w}}, {.params = {b}, .options = {{"use_muon", 0}}}};
  MG_REQUIRE_ERROR(optim::Muon(groups, {.adamw_beta1 = 1.0}), "adamw_beta1 must be in [0, 1)");
  MG_REQUIRE_ERROR(optim::Muon(groups, {.adamw_beta2 = -0.5}), "adamw_beta2 must be in [0, 1)");
  MG_REQUIRE_ERROR(optim::Muon(groups, {.adamw_eps = -1.0}), "adamw_eps must be >= 0");
  MG_REQUIRE_ERROR(optim::Muon({{.params = {b}, .options = {{"use_muon", 0.5}}}}), "'use_muon' is a boolean");
  optim::Muon opt(groups, {.lr = 0.02});
  // The precision plan's count: one buffer per matrix element, two per AdamW element.
  CHECK(opt.planned_state_values(w, opt.param_groups()[0].options) == 12);
  CHECK(opt.planned_state_values(b, opt.param_groups()[1].options) == 8);
  Generator gen(3);
  for (int s = 0; s < 2; ++s) {
    w.set_grad(randn({3, 4}, {}, &gen));
    b.set_grad(randn({4}, {}, &gen));
    opt.step();
  }
  const StateDict saved = opt.state_dict();
  CHECK(saved.has_tensor("state.0.momentum_buffer"));
  CHECK(saved.has_tensor("state.1.exp_avg_sq"));
  CHECK_FALSE(saved.has_tensor("state.1.momentum_buffer"));
  optim::Muon resumed(groups, {.lr = 0.02});
  resumed.load_state_dict(saved);
  CHECK(test::bits_equal(resumed.state(b)->buffers.at("exp_avg"), opt.state(b)->buffers.at("exp_avg")));
  // The AdamW group's moments are part of every step's state: a dict without them is refused.
  StateDict missing = saved;
  std::erase_if(missing.tensors, [](const auto& kv) { return kv.first == "state.1.exp_avg"; });
  MG_REQUIRE_ERROR(resumed.load_state_dict(missing), "'state.1.exp_avg' is missing");
  // A state saved before the AdamW options existed loads as Muon groups.
  optim::Muon plain({w}, {.lr = 0.02});
  StateDict old_one_group = plain.state_dict();
  for (const char* k : {"use_muon", "adamw_beta1", "adamw_beta2", "adamw_eps"}) {
    old_one_group.floats.erase(std::string("group.0.") + k);
  }
  plain.param_groups()[0].set_option("use_muon", 0.0);
  plain.load_state_dict(old_one_group);
  CHECK(plain.param_groups()[0].option("use_muon") == 1.0);
}

// The CPU step gives whole matrices to the threads: a group of several matrices stepped at 2 threads
// must equal each matrix stepped alone at 1 thread (f64 with the f64 iteration, so only the GEMMs'
// summation order may differ).
TEST_CASE("Muon: the threads' share of a group's matrices equals each matrix stepped alone", "[optim][muon]") {
  Generator gen(17);
  const std::vector<Shape> shapes = {{12, 7}, {7, 12}, {9, 9}, {16, 5}, {5, 16}, {3, 11}, {8, 8}};
  Tensors together, alone;
  for (const Shape& s : shapes) {
    const Tensor w = randn(s, {.dtype = DType::F64}, &gen);
    together.push_back(clone(w).requires_grad_());
    alone.push_back(clone(w).requires_grad_());
  }
  const optim::MuonOptions o{.lr = 0.05, .weight_decay = 0.02, .ns_bf16 = false};
  optim::Muon group(together, o);
  std::vector<std::unique_ptr<optim::Muon>> single;
  for (const Tensor& p : alone) single.push_back(std::make_unique<optim::Muon>(Tensors{p}, o));
  const int threads = num_threads();
  for (int step = 0; step < 3; ++step) {
    for (std::size_t k = 0; k < shapes.size(); ++k) {
      const Tensor g = randn(shapes[k], {.dtype = DType::F64}, &gen);
      together[k].set_grad(clone(g));
      alone[k].set_grad(g);
    }
    set_num_threads(2);
    group.step();
    set_num_threads(1);
    for (auto& opt : single) opt->step();
    set_num_threads(threads);
  }
  for (std::size_t k = 0; k < shapes.size(); ++k) {
    INFO("matrix " << k);
    CHECK(test::path_rel_error(together[k].detach(), alone[k].detach()) <= 1e-13);
    CHECK(test::path_rel_error(group.state(together[k])->buffers.at("momentum_buffer"),
                               single[k]->state(alone[k])->buffers.at("momentum_buffer")) == 0.0);
  }
}
