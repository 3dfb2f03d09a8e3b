// The margin, embedding and likelihood losses of ops/margin_losses.h and the distances of
// ops/distance.h against PyTorch 2.15 (tests/data/reference/torch_margin_losses.json, written by
// tools/reference/gen_torch_margin_losses.py): every case's output and the gradients of
// sum(output * upstream) with respect to every input PyTorch differentiates, in f64 (to 1e-12) and
// in f32 (inputs rounded to f32, to 2e-5); an input PyTorch gives no gradient path (the target of
// hinge_embedding_loss and cosine_embedding_loss) gets no gradient or a zero one. Then the
// mixed-precision contract (bf16 autocast: an f32 result; a bf16 input outside autocast: the f32
// computation rounded once to bf16), the named errors, and a double backward of soft_margin_loss.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "core/factory.h"
#include "ops/distance.h"
#include "ops/loss.h"
#include "nn/margin_loss.h"
#include "ops/margin_losses.h"
#include "ops/ops.h"
#include "test_paths.h"
#include "test_util.h"

using namespace mg;

namespace {

Shape shape_of(const nlohmann::json& c, const std::string& key) {
  Shape shape;
  for (const auto& d : c[key + "_shape"]) shape.push_back(d.get<int64_t>());
  return shape;
}

// The tensor stored under `key`: integers as i64, floating values as `dt`.
Tensor tensor_of(const nlohmann::json& c, const std::string& key, DType dt) {
  std::vector<double> v;
  std::vector<int64_t> iv;
  for (const auto& e : c[key]) {
    if (e.is_number_integer()) iv.push_back(e.get<int64_t>());
    else v.push_back(e.get<double>());
  }
  if (!iv.empty() && v.empty()) return reshape(from_vector<int64_t>(iv), shape_of(c, key));
  return to(reshape(from_vector<double>(v), shape_of(c, key)), dt);
}

std::vector<double> flat(const Tensor& t) { return test::values(t.detach()); }

Reduction reduction_of(const nlohmann::json& o) {
  const std::string r = o["reduction"].get<std::string>();
  if (r == "none") return Reduction::None;
  if (r == "sum") return Reduction::Sum;
  REQUIRE(r == "mean");
  return Reduction::Mean;
}

double p_of(const nlohmann::json& o) {
  return o["p"].is_string() ? std::numeric_limits<double>::infinity() : o["p"].get<double>();
}

// Calls the mg function named by the case with its tensors and options.
Tensor run_case(const std::string& fn, const nlohmann::json& o, const std::map<std::string, Tensor>& t) {
  const auto at = [&](const std::string& k) {
    const auto it = t.find(k);
    return it == t.end() ? Tensor() : it->second;
  };
  if (fn == "margin_ranking_loss") {
    return margin_ranking_loss(at("x1"), at("x2"), at("target"), o["margin"].get<double>(), reduction_of(o));
  }
  if (fn == "hinge_embedding_loss") {
    return hinge_embedding_loss(at("input"), at("target"), o["margin"].get<double>(), reduction_of(o));
  }
  if (fn == "soft_margin_loss") return soft_margin_loss(at("input"), at("target"), reduction_of(o));
  if (fn == "cosine_embedding_loss") {
    return cosine_embedding_loss(at("x1"), at("x2"), at("target"), o["margin"].get<double>(), reduction_of(o));
  }
  if (fn == "triplet_margin_loss") {
    return triplet_margin_loss(at("anchor"), at("positive"), at("negative"), o["margin"].get<double>(), p_of(o),
                               o["eps"].get<double>(), o["swap"].get<bool>(), reduction_of(o));
  }
  if (fn == "multi_margin_loss") {
    return multi_margin_loss(at("input"), at("target"), o["p"].get<int64_t>(), o["margin"].get<double>(), at("weight"),
                             reduction_of(o));
  }
  if (fn == "multilabel_soft_margin_loss") {
    return multilabel_soft_margin_loss(at("input"), at("target"), at("weight"), reduction_of(o));
  }
  if (fn == "poisson_nll_loss") {
    return poisson_nll_loss(at("input"), at("target"), o["log_input"].get<bool>(), o["full"].get<bool>(),
                            o["eps"].get<double>(), reduction_of(o));
  }
  if (fn == "gaussian_nll_loss") {
    return gaussian_nll_loss(at("input"), at("target"), at("var"), o["full"].get<bool>(), o["eps"].get<double>(),
                             reduction_of(o));
  }
  if (fn == "cosine_similarity") {
    return cosine_similarity(at("x1"), at("x2"), o["dim"].get<int64_t>(), o["eps"].get<double>());
  }
  REQUIRE(fn == "pairwise_distance");
  return pairwise_distance(at("x1"), at("x2"), p_of(o), o["eps"].get<double>(), o["keepdim"].get<bool>());
}

void check_close(const std::vector<double>& got, const nlohmann::json& want, double rel, double abs,
                 const std::string& what) {
  REQUIRE(got.size() == want.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    INFO(what << "[" << i << "]");
    CHECK(got[i] == Approx(want[i].get<double>()).epsilon(rel).margin(abs));
  }
}

bool in_list(const nlohmann::json& list, const std::string& key) {
  for (const auto& e : list) {
    if (e.get<std::string>() == key) return true;
  }
  return false;
}

// Runs one reference case in `dt` and compares the output and the gradients.
void check_case(const std::string& name, const nlohmann::json& c, DType dt, double rel, double abs) {
  INFO(name << " in " << dtype_name(dt));
  std::map<std::string, Tensor> t;
  for (const auto& k : c["tensors"]) {
    const std::string key = k.get<std::string>();
    t[key] = tensor_of(c, key, dt);
    if (c.contains("grad_" + key) || in_list(c["no_grad_path"], key)) t[key].requires_grad_();
  }
  const Tensor out = run_case(c["fn"].get<std::string>(), c["options"], t);
  CHECK(out.dtype() == dt);
  CHECK(out.shape() == shape_of(c, "output"));
  check_close(flat(out), c["output"], rel, abs, "output");
  const Tensor s = c.contains("upstream") ? sum(out * tensor_of(c, "upstream", dt)) : sum(out);
  s.backward();
  for (const auto& [key, x] : t) {
    if (c.contains("grad_" + key)) {
      INFO("gradient of " << key);
      REQUIRE(x.grad().defined());
      CHECK(x.grad().dtype() == dt);
      CHECK(x.grad().shape() == x.shape());
      check_close(flat(x.grad()), c["grad_" + key], rel, abs, "grad_" + key);
    } else if (in_list(c["no_grad_path"], key) && x.grad().defined()) {
      for (double g : flat(x.grad())) CHECK(g == 0.0);  // PyTorch: no path through the comparisons
    }
  }
}

nlohmann::json load_reference() {
  std::ifstream f(test::source_dir() + "/tests/data/reference/torch_margin_losses.json");
  REQUIRE(f.good());
  return nlohmann::json::parse(f);
}

std::map<std::string, int> case_counts(const nlohmann::json& ref) {
  std::map<std::string, int> n;
  for (const auto& [name, c] : ref["cases"].items()) ++n[c["fn"].get<std::string>()];
  return n;
}

// The same values in every floating dtype: rounded to bf16 first, so f32 and bf16 hold them exactly.
Tensor bf16_exact(const Tensor& x) { return to(to(x, DType::BF16), DType::F32); }

Tensor cast_floating(const Tensor& x, DType dt) {
  return x.defined() && is_floating(x.dtype()) ? to(x, dt) : x;
}

// One call per function with fixed bf16-representable f32 arguments (the i64 multi_margin target stays).
struct Call {
  const char* name;
  std::function<Tensor(const std::vector<Tensor>&)> f;
  std::vector<Tensor> args;
};

std::vector<Call> calls_for_mixed_precision() {
  manual_seed(17);
  const Tensor a = bf16_exact(randn({5, 4})), b = bf16_exact(randn({5, 4})), c = bf16_exact(randn({5, 4}));
  const Tensor pm = bf16_exact(sign(randn({5, 4})));
  const Tensor rows = from_vector<float>({1.0f, -1.0f, -1.0f, 1.0f, -1.0f});
  const Tensor labels = from_vector<int64_t>({0, 3, 1, 2, 3});
  const Tensor bits = from_vector<float>({1, 0, 0, 1, 1, 1, 0, 0, 0, 1, 0, 1, 1, 0, 1, 0, 0, 0, 1, 1}, {5, 4});
  const Tensor counts = from_vector<float>({0, 1, 2, 3, 4, 0, 1, 5, 2, 2, 0, 7, 1, 3, 0, 6, 2, 1, 0, 4}, {5, 4});
  const Tensor var = bf16_exact(rand({5, 4}) + 0.2);
  const Tensor w = from_vector<float>({0.5f, 2.0f, 1.0f, 1.5f});
  using V = const std::vector<Tensor>&;
  return {
      {"margin_ranking_loss", [](V v) { return margin_ranking_loss(v[0], v[1], v[2], 0.3); }, {a, b, pm}},
      {"hinge_embedding_loss", [](V v) { return hinge_embedding_loss(v[0], v[1], 0.5); }, {a, pm}},
      {"soft_margin_loss", [](V v) { return soft_margin_loss(v[0], v[1]); }, {a, pm}},
      {"cosine_embedding_loss", [](V v) { return cosine_embedding_loss(v[0], v[1], v[2], 0.2); }, {a, b, rows}},
      {"triplet_margin_loss", [](V v) { return triplet_margin_loss(v[0], v[1], v[2], 0.5, 2.0, 1e-6, true); },
       {a, b, c}},
      {"multi_margin_loss", [](V v) { return multi_margin_loss(v[0], v[1], 2, 0.7, v[2]); }, {a, labels, w}},
      {"multilabel_soft_margin_loss", [](V v) { return multilabel_soft_margin_loss(v[0], v[1], v[2]); }, {a, bits, w}},
      {"poisson_nll_loss", [](V v) { return poisson_nll_loss(v[0], v[1], true, true); }, {a, counts}},
      {"gaussian_nll_loss", [](V v) { return gaussian_nll_loss(v[0], v[1], v[2], true); }, {a, b, var}},
      {"cosine_similarity", [](V v) { return cosine_similarity(v[0], v[1]); }, {a, b}},
      {"pairwise_distance", [](V v) { return pairwise_distance(v[0], v[1], 1.0); }, {a, b}},
  };
}

std::vector<Tensor> cast_all(const std::vector<Tensor>& args, DType dt) {
  std::vector<Tensor> out;
  for (const Tensor& x : args) out.push_back(cast_floating(x, dt));
  return out;
}

}  // namespace

TEST_CASE("margin losses, cosine_similarity and pairwise_distance equal PyTorch's (f64)", "[ops][loss]") {
  const nlohmann::json ref = load_reference();
  int checked = 0;
  for (const auto& [name, c] : ref["cases"].items()) {
    check_case(name, c, DType::F64, 1e-12, 1e-14);
    ++checked;
  }
  CHECK(checked == 56);
  const std::map<std::string, int> n = case_counts(ref);
  CHECK(n.size() == 11);  // every function of ops/margin_losses.h and ops/distance.h
}

TEST_CASE("margin losses, cosine_similarity and pairwise_distance equal PyTorch's (f32 inputs)", "[ops][loss]") {
  const nlohmann::json ref = load_reference();
  for (const auto& [name, c] : ref["cases"].items()) check_case(name, c, DType::F32, 2e-5, 1e-5);
}

TEST_CASE("margin losses and distances: fp32 under bf16 autocast, a bf16 input gives the f32 result rounded once",
          "[ops][loss][amp]") {
  for (const Call& call : calls_for_mixed_precision()) {
    INFO(call.name);
    const Tensor exact = call.f(call.args);  // f32 arguments: the f32 computation
    REQUIRE(exact.dtype() == DType::F32);
    // outside autocast: bf16 arguments give a bf16 result, the f32 computation rounded once
    std::vector<Tensor> bf = cast_all(call.args, DType::BF16);
    bf[0].requires_grad_();
    const Tensor out = call.f(bf);
    CHECK(out.dtype() == DType::BF16);
    CHECK(flat(out) == flat(to(exact, DType::BF16)));
    sum(out).backward();
    REQUIRE(bf[0].grad().defined());
    CHECK(bf[0].grad().dtype() == DType::BF16);
    // under CPU bf16 autocast (fp32 policy): an f32 result, equal to the f32 computation
    amp::Autocast ac({.dtype = DType::BF16});
    const Tensor in_region = call.f(cast_all(call.args, DType::BF16));
    CHECK(in_region.dtype() == DType::F32);
    CHECK(flat(in_region) == flat(exact));
    CHECK(call.f(call.args).dtype() == DType::F32);
  }
}

TEST_CASE("margin losses: bad inputs are named errors", "[ops][loss]") {
  const Tensor x = randn({4, 3}), y = randn({4, 3}), pm = sign(randn({4, 3}));
  const Tensor rows = from_vector<float>({1.0f, -1.0f, 1.0f, -1.0f});
  const Tensor labels = from_vector<int64_t>({0, 2, 1, 1});
  MG_REQUIRE_ERROR(margin_ranking_loss(x, randn({4}), pm),
                   "margin_ranking_loss: expected x1, x2 and target of the same number of dims");
  MG_REQUIRE_ERROR(cosine_embedding_loss(randn({2, 4, 3}), randn({2, 4, 3}), ones({2})),
                   "cosine_embedding_loss: expected x1 and x2 of 1 or 2 dims");
  MG_REQUIRE_ERROR(triplet_margin_loss(x, y, x * 2.0, 0.0), "triplet_margin_loss: margin must be > 0");
  MG_REQUIRE_ERROR(triplet_margin_loss(x, y, x * 2.0, -0.5), "triplet_margin_loss: margin must be > 0");
  MG_REQUIRE_ERROR(triplet_margin_loss(x, y, x * 2.0, 1.0, NAN), "norm: p must be a number");
  {  // More than 2 dims (the distance along the last) and p = 0, as PyTorch 2.15 computes them.
    const Tensor i = reshape(arange(0, 24, 1, {.dtype = DType::F64}), {2, 3, 4});
    const Tensor a = i / 7.0, b = cos(i), c = sin(i);
    const std::vector<double> want = {1.9343066701111093, 0.0, 1.3927583557089847,
                                      1.4603845316068775, 0.0, 2.1389168424379887};
    const std::vector<double> got = test::values(triplet_margin_loss(a, b, c, 1.0, 2.0, 1e-6, false, Reduction::None));
    REQUIRE(got.size() == 6);
    for (std::size_t k = 0; k < 6; ++k) CHECK(got[k] == Approx(want[k]).epsilon(1e-12));
    CHECK(triplet_margin_loss(a, b, c, 1.0, 0.0).item<double>() == 1.0);
    std::vector<double> every_third(24);
    for (std::size_t k = 0; k < 24; ++k) every_third[k] = k % 3 == 0 ? 1.0 : 0.0;
    const Tensor bits = from_vector<double>(every_third, {2, 3, 4});
    const std::vector<double> ml = test::values(multilabel_soft_margin_loss(b, bits, Tensor(), Reduction::None));
    const std::vector<double> ml_want = {0.7812843815864867, 0.681865828541578, 0.7316582969212244,
                                         0.8778688402123798, 0.6528429514798021, 0.6742486447687127};
    REQUIRE(ml.size() == 6);
    for (std::size_t k = 0; k < 6; ++k) CHECK(ml[k] == Approx(ml_want[k]).epsilon(1e-12));
  }
  MG_REQUIRE_ERROR(multi_margin_loss(x, labels, 3), "multi_margin_loss: p must be 1 or 2");
  MG_REQUIRE_ERROR(gaussian_nll_loss(x, y, from_vector<float>({1.0f, 0.5f, -0.25f, 2.0f})),
                   "gaussian_nll_loss: var has 1 negative value(s) (the lowest -0.25)");
  // A NaN beside it no longer hides it (NaN wins every min; PyTorch refuses this var too).
  MG_REQUIRE_ERROR(gaussian_nll_loss(zeros({2}), ones({2}), from_vector<float>({-1.0f, NAN}), false, 1e-6, Reduction::None),
                   "gaussian_nll_loss: var has 1 negative value(s) (the lowest -1)");
  // A scalar var rounds to the input's dtype as PyTorch's var * ones_like(input): 1e5 is inf in
  // f16, so the loss is inf (PyTorch 2.15), not an error of full().
  CHECK(std::isinf(gaussian_nll_loss(to(x, DType::F16), to(y, DType::F16), 1e5).item<double>()));
  CHECK(gaussian_nll_loss(to(x, DType::F16), to(y, DType::F16), 100.0).item<double>() ==
        gaussian_nll_loss(to(x, DType::F16), to(y, DType::F16), full({4}, 100.0, {.dtype = DType::F16})).item<double>());
  const Reduction bm = Reduction::BatchMean;
  const std::vector<std::pair<const char*, std::function<Tensor()>>> losses = {
      {"margin_ranking_loss", [&] { return margin_ranking_loss(x, y, pm, 0.0, bm); }},
      {"hinge_embedding_loss", [&] { return hinge_embedding_loss(x, pm, 1.0, bm); }},
      {"soft_margin_loss", [&] { return soft_margin_loss(x, pm, bm); }},
      {"cosine_embedding_loss", [&] { return cosine_embedding_loss(x, y, rows, 0.0, bm); }},
      {"triplet_margin_loss", [&] { return triplet_margin_loss(x, y, x * 2.0, 1.0, 2.0, 1e-6, false, bm); }},
      {"multi_margin_loss", [&] { return multi_margin_loss(x, labels, 1, 1.0, Tensor(), bm); }},
      {"multilabel_soft_margin_loss", [&] { return multilabel_soft_margin_loss(x, abs(pm), Tensor(), bm); }},
      {"poisson_nll_loss", [&] { return poisson_nll_loss(x, abs(y), true, false, 1e-8, bm); }},
      {"gaussian_nll_loss", [&] { return gaussian_nll_loss(x, y, ones({4, 3}), false, 1e-6, bm); }},
  };
  for (const auto& entry : losses) {  // not a structured binding: clang 14 cannot capture one
    const char* name = entry.first;
    const std::function<Tensor()>& f = entry.second;
    INFO(name);
    MG_REQUIRE_ERROR(f(), std::string(name) + ": reduction batchmean is only accepted by kl_div");
  }
}

TEST_CASE("soft_margin_loss: double backward gives sigmoid' (create_graph)", "[ops][loss][grad]") {
  // loss = mean(log(1 + exp(-y x))): d/dx = -y s / n, d2/dx2 = y^2 s (1 - s) / n, s = sigmoid(-y x)
  const std::vector<double> xs = {-3.0, -1.2, -0.3, 0.0, 0.4, 1.7}, ys = {1.0, -1.0, 1.0, -1.0, -1.0, 1.0};
  const Tensor x = from_vector<double>(xs).requires_grad_();
  const Tensor y = from_vector<double>(ys);
  const Tensor gx = autograd::grad({soft_margin_loss(x, y)}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
  REQUIRE(gx.requires_grad());
  const std::vector<double> first = flat(gx);
  sum(gx).backward();
  const std::vector<double> second = flat(x.grad());
  const double n = double(xs.size());
  for (std::size_t i = 0; i < xs.size(); ++i) {
    INFO("x " << xs[i] << " y " << ys[i]);
    const double s = 1.0 / (1.0 + std::exp(ys[i] * xs[i]));
    CHECK(first[i] == Approx(-ys[i] * s / n).epsilon(1e-12).margin(1e-15));
    CHECK(second[i] == Approx(ys[i] * ys[i] * s * (1.0 - s) / n).epsilon(1e-10).margin(1e-15));
  }
}

TEST_CASE("margin losses and distances: CUDA equals the CPU (values and input gradients)", "[ops][cuda][gpu]") {
  for (const Call& call : calls_for_mixed_precision()) {
    INFO(call.name);
    std::vector<Tensor> cpu = call.args, gpu;
    for (const Tensor& x : cpu) gpu.push_back(x.to(Device::cuda(0)));
    cpu[0] = clone(cpu[0]).requires_grad_();
    gpu[0] = clone(gpu[0]).requires_grad_();
    const Tensor want = call.f(cpu), got = call.f(gpu);
    REQUIRE(got.device().is_cuda());
    sum(want).backward();
    sum(got).backward();
    // The same f32 ops on both devices; reductions may add in another order.
    const std::vector<double> w = flat(want), g = flat(to(got, Device::cpu()));
    for (std::size_t i = 0; i < w.size(); ++i) CHECK(g[i] == Approx(w[i]).epsilon(1e-5).margin(1e-6));
    const std::vector<double> wg = flat(cpu[0].grad()), gg = flat(to(gpu[0].grad(), Device::cpu()));
    for (std::size_t i = 0; i < wg.size(); ++i) CHECK(gg[i] == Approx(wg[i]).epsilon(1e-5).margin(1e-6));
  }
}

TEST_CASE("gaussian_nll_loss: var with one dim of size 1, one per row, or one number, and label targets keep the dtype",
          "[ops][loss]") {
  manual_seed(5);
  const Tensor x = randn({4, 3, 5}), y = randn({4, 3, 5});
  const Tensor v = rand({4, 1, 5}) + 0.1;
  const Tensor expanded = contiguous(expand(v, {4, 3, 5}));
  CHECK(test::values(gaussian_nll_loss(x, y, v, true, 1e-6, Reduction::None)) ==
        test::values(gaussian_nll_loss(x, y, expanded, true, 1e-6, Reduction::None)));
  const Tensor first = rand({1, 3, 5}) + 0.1;
  CHECK(test::values(gaussian_nll_loss(x, y, first)) ==
        test::values(gaussian_nll_loss(x, y, contiguous(expand(first, {4, 3, 5})))));
  const Tensor rows = rand({4, 3}) + 0.1;
  CHECK(test::values(gaussian_nll_loss(x, y, rows)) ==
        test::values(gaussian_nll_loss(x, y, contiguous(expand(unsqueeze(rows, -1), {4, 3, 5})))));
  CHECK(test::values(gaussian_nll_loss(x, y, 0.5)) == test::values(gaussian_nll_loss(x, y, full({4, 3, 5}, 0.5))));
  MG_REQUIRE_ERROR(gaussian_nll_loss(x, y, rand({4, 1, 1})),
                   "gaussian_nll_loss: expected var of the input's shape [4, 3, 5], of it without the last dim [4, 3], "
                   "or of it with one dim of size 1; got [4, 1, 1] f32 cpu");
  MG_REQUIRE_ERROR(gaussian_nll_loss(x, y, -1.0), "gaussian_nll_loss: var has a negative value (-1)");
  // PyTorch's result dtypes: a +-1 target does not widen a bf16 input's loss (it does in margin_ranking).
  const Tensor hb = to(randn({3, 4}), DType::BF16);
  const Tensor pm = sign(randn({3, 4}));
  CHECK(hinge_embedding_loss(hb, pm).dtype() == DType::BF16);
  CHECK(soft_margin_loss(hb, pm).dtype() == DType::BF16);
  CHECK(cosine_embedding_loss(to(hb, DType::F32), to(hb, DType::F32), to(sign(randn({3})), DType::F64)).dtype() ==
        DType::F32);
  CHECK(margin_ranking_loss(hb, hb, pm).dtype() == DType::F32);
}

TEST_CASE("gaussian_nll_loss of an empty batch: NaN mean, 0 sum, empty none (PyTorch 2.15)", "[ops][loss]") {
  const Tensor x = zeros({0, 3}), v = ones({0, 3});
  CHECK(std::isnan(gaussian_nll_loss(x, x, v).item<double>()));
  CHECK(gaussian_nll_loss(x, x, v, false, 1e-6, Reduction::Sum).item<double>() == 0.0);
  CHECK(gaussian_nll_loss(x, x, v, false, 1e-6, Reduction::None).shape() == Shape{0, 3});
}

TEST_CASE("huber_loss keeps the input's dtype and kl_div refuses integer tensors, as PyTorch 2.15", "[ops][loss]") {
  // F.huber_loss(f16 [0.5, -1, 2], f32 [1, -1, 1]) is f16 0.2084 (mse/l1/smooth_l1 promote; huber
  // does not): computed in f32, rounded once. It was f32.
  const Tensor x = from_vector<float>({0.5f, -1.0f, 2.0f}).to(DType::F16);
  const Tensor y = huber_loss(x, from_vector<float>({1.0f, -1.0f, 1.0f}));
  CHECK(y.dtype() == DType::F16);
  CHECK(y.item<double>() == from_vector<double>({0.625 / 3.0}).to(DType::F16).item<double>());
  CHECK(huber_loss(from_vector<float>({0.5f, 3.0f}), from_vector<double>({1.0, 1.0})).dtype() == DType::F32);
  // kl_div: "Integral inputs not supported" in PyTorch; they were promoted and ran.
  MG_REQUIRE_ERROR(kl_div(from_vector<int64_t>({-1}), from_vector<float>({1.0f})), "kl_div: expected floating input");
  MG_REQUIRE_ERROR(kl_div(from_vector<float>({-1.0f}), from_vector<int64_t>({1})), "kl_div: expected floating input");
}

TEST_CASE("pairwise_distance and triplet_margin_loss take p < 0 and 0-d inputs, as PyTorch", "[ops][loss]") {
  // PyTorch 2.15, f64: pairwise_distance(a, b, p=-1.5) and its gradient; triplet with p = -1;
  // 0-d inputs are single numbers (|1 - 3 + 1e-6|).
  Tensor a = from_vector<double>({1.0, 2.0, 0.5, -1.0}, {2, 2}).requires_grad_();
  const Tensor b = from_vector<double>({3.0, 1.0, 0.25, 2.0}, {2, 2});
  const Tensor d = pairwise_distance(a, b, -1.5);
  sum(d).backward();
  const std::vector<double> want_d{0.8172407306632126, 0.2460702762442523};
  const std::vector<double> want_g{-0.10673345360219871, 0.6037733264189424, 0.9611552166161541,
                                   -0.0019268376206116008};
  for (std::size_t i = 0; i < 2; ++i) CHECK(test::values(d)[i] == Approx(want_d[i]).epsilon(1e-12));
  for (std::size_t i = 0; i < 4; ++i) CHECK(test::values(a.grad())[i] == Approx(want_g[i]).epsilon(1e-12));
  const std::vector<double> t = test::values(
      triplet_margin_loss(a.detach(), b, a.detach() * 0.5, 1.0, -1.0, 1e-6, false, Reduction::None));
  CHECK(t[0] == Approx(1.333333111110852).epsilon(1e-12));
  CHECK(t[1] == Approx(1.0641030769241024).epsilon(1e-12));
  const TensorOptions f64{.dtype = DType::F64};
  const Tensor d0 = pairwise_distance(scalar_tensor(1.0, f64), scalar_tensor(3.0, f64));
  CHECK(d0.dim() == 0);
  CHECK(d0.item<double>() == Approx(1.999999).epsilon(1e-12));
  CHECK(triplet_margin_loss(scalar_tensor(1.0, f64), scalar_tensor(3.0, f64), scalar_tensor(0.0, f64)).item<double>() ==
        Approx(1.999998).epsilon(1e-12));
}

TEST_CASE("multi_margin_loss takes a [1] target for a [C] input, as PyTorch", "[ops][loss]") {
  // PyTorch 2.15: multi_margin_loss([0.1, 0.2, 0.4], [1], reduction='none') = [0.7]; a 0-d target
  // gives a 0-d loss.
  const Tensor x = from_vector<double>({0.1, 0.2, 0.4}, {3});
  const Tensor per = multi_margin_loss(x, from_vector<int64_t>({1}, {1}), 1, 1.0, Tensor(), Reduction::None);
  CHECK(per.shape() == Shape{1});
  CHECK(per.item<double>() == Approx(0.7).epsilon(1e-12));
  CHECK(multi_margin_loss(x, scalar_tensor(1.0, {.dtype = DType::I64}), 1, 1.0, Tensor(), Reduction::None).dim() == 0);
  MG_REQUIRE_ERROR(multi_margin_loss(x, from_vector<int64_t>({1, 2}, {2})),
                   "multi_margin_loss: expected a target of shape [] or [1] for input [3] f64 cpu, got [2] i64 cpu");
}

TEST_CASE("multilabel_margin_loss equals PyTorch's: the list up to -1, repeated classes, gradients", "[ops][loss]") {
  // PyTorch 2.15, f64. Row 1 lists class 1 twice: its hinge terms count twice.
  Tensor x = from_vector<double>({0.1, 0.2, 0.4, 0.8, 0.5, -0.3, 0.9, 0.05}, {2, 4}).requires_grad_();
  const Tensor y = from_vector<int64_t>({3, 0, -1, 1, 1, 1, 2, -1}, {2, 4});
  const Tensor l = multilabel_margin_loss(x, y, Reduction::None);
  REQUIRE(l.shape() == Shape{2});
  CHECK(test::values(l)[0] == Approx(0.85).epsilon(1e-12));
  CHECK(test::values(l)[1] == Approx(1.7625).epsilon(1e-12));
  sum(l).backward();
  const std::vector<double> want_g{-0.5, 0.5, 0.5, -0.5, 0.75, -1.0, -0.5, 0.75};
  for (std::size_t i = 0; i < 8; ++i) CHECK(test::values(x.grad())[i] == Approx(want_g[i]).epsilon(1e-12));
  CHECK(multilabel_margin_loss(x.detach(), y).item<double>() == Approx(1.30625).epsilon(1e-12));
  CHECK(multilabel_margin_loss(x.detach(), y, Reduction::Sum).item<double>() == Approx(2.6125).epsilon(1e-12));
  // One row [C]: a 0-d loss.
  const Tensor one = multilabel_margin_loss(x.detach().select(0, 0), y.select(0, 0), Reduction::None);
  CHECK(one.dim() == 0);
  CHECK(one.item<double>() == Approx(0.85).epsilon(1e-12));
  // f32 in, f32 out; bf16 under autocast is computed in f32.
  CHECK(multilabel_margin_loss(x.detach().to(DType::F32), y).dtype() == DType::F32);
  // PyTorch: "argument #2 'target' is out of range" for -2 and for C.
  MG_REQUIRE_ERROR(multilabel_margin_loss(x.detach(), from_vector<int64_t>({3, 0, -2, 1, 1, 1, 2, -1}, {2, 4})),
                   "multilabel_margin_loss: target value -2 (row 0, position 2) is out of range [-1, 4)");
  MG_REQUIRE_ERROR(multilabel_margin_loss(x.detach(), from_vector<int64_t>({4, 0, -1, 1, 1, 1, 2, -1}, {2, 4})),
                   "is out of range [-1, 4)");
  MG_REQUIRE_ERROR(multilabel_margin_loss(x.detach(), y.to(DType::F32)), "expected integer class indices");
  MG_REQUIRE_ERROR(multilabel_margin_loss(x.detach(), y.narrow(1, 0, 3)), "of the same shape");
  // 0-d: one class (PyTorch: tensor(0.)); no classes is refused, as PyTorch's.
  CHECK(multilabel_margin_loss(scalar_tensor(0.5, {.dtype = DType::F64}), scalar_tensor(0.0, {.dtype = DType::I64}))
            .item<double>() == 0.0);
  MG_REQUIRE_ERROR(multilabel_margin_loss(zeros({2, 0}), zeros({2, 0}, {.dtype = DType::I64})),
                   "expected at least one class");
}

TEST_CASE("triplet_margin_with_distance_loss equals PyTorch's with a custom distance and swap", "[ops][loss]") {
  // PyTorch 2.15, f64: distance 1 - cosine_similarity, margin 0.5, swap.
  Tensor a = from_vector<double>({1.0, 2.0, 0.5, -1.0}, {2, 2}).requires_grad_();
  const Tensor p = from_vector<double>({3.0, 1.0, 0.25, 2.0}, {2, 2});
  const Tensor n = from_vector<double>({0.0, 1.0, 1.0, 1.0}, {2, 2});
  auto cosine_distance = [](const Tensor& u, const Tensor& v) { return 1.0 - cosine_similarity(u, v); };
  nn::TripletMarginWithDistanceLoss loss({.distance_function = cosine_distance, .margin = 0.5, .swap = true,
                                          .reduction = Reduction::None});
  const Tensor l = loss(a, p, n);
  sum(l).backward();
  CHECK(test::values(l)[0] == Approx(0.6873204098133684).epsilon(1e-12));
  CHECK(test::values(l)[1] == Approx(2.12140251171417).epsilon(1e-12));
  const std::vector<double> want_g{-0.46172815067460216, 0.23086407533730108, -0.44376015698018334,
                                   -0.22188007849009173};
  for (std::size_t i = 0; i < 4; ++i) CHECK(test::values(a.grad())[i] == Approx(want_g[i]).epsilon(1e-12));
  CHECK(triplet_margin_with_distance_loss(a.detach(), p, n).item<double>() == Approx(1.885349342383547).epsilon(1e-12));
  // The default distance is pairwise_distance: equal to triplet_margin_loss.
  CHECK(triplet_margin_with_distance_loss(a.detach(), p, n).item<double>() ==
        Approx(triplet_margin_loss(a.detach(), p, n).item<double>()).epsilon(1e-15));
  MG_REQUIRE_ERROR(triplet_margin_with_distance_loss(a, p, n, nullptr, 0.0),
                   "triplet_margin_with_distance_loss: margin must be > 0");
  MG_REQUIRE_ERROR(triplet_margin_with_distance_loss(a, p.select(0, 0), n),
                   "expected anchor, positive and negative of the same number of dims");
  MG_REQUIRE_ERROR(triplet_margin_with_distance_loss(a, p, n, [](const Tensor& u, const Tensor&) { return u.gt(0.0); }),
                   "the distance function must return a number tensor");
  // An integer distance promotes (PyTorch 2.15: tensor(3.) for this one).
  const Tensor l1 = triplet_margin_with_distance_loss(
      from_vector<double>({1, 2}, {1, 2}), from_vector<double>({3, 1}, {1, 2}), from_vector<double>({1, 2}, {1, 2}),
      [](const Tensor& u, const Tensor& v) { return sum(abs(u - v), {-1}).to(DType::I64); });
  CHECK(l1.dtype() == DType::F32);
  CHECK(l1.item<double>() == 4.0);
}
