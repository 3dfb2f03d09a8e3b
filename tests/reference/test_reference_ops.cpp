// mixgrad's ops in f64 against values from an independent implementation (PyTorch 1.13, float64,
// written once by tools/reference/gen_reference.py into tests/data/reference/): outputs, the
// gradients of sum(y * gy) for a stored cotangent gy, and batch_norm's running statistics.
// Every case stored in a file is run (its options are stored next to it), so a case added to the
// generator is tested without a code change. Tolerance: 1e-10 relative to each tensor's magnitude.
// Set MG_REFERENCE_REPORT=1 to print the measured max error of every compared tensor.
#include <catch2/catch.hpp>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "autograd/engine.h"
#include "ops/conv.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/ops.h"
#include "reference/reference_file.h"
#include "test_util.h"

using namespace mg;

namespace {

constexpr double kRtol = 1e-10;

// Compares and, with MG_REFERENCE_REPORT set, prints "<file> <tensor>: rel <e> (abs <e>)".
void check(const Tensor& got, const test::ReferenceFile& f, const std::string& name) {
  const test::ReferenceError e = test::check_reference(got, f, name, kRtol);
  if (std::getenv("MG_REFERENCE_REPORT"))
    std::printf("reference %-22s %-45s rel %.3g abs %.3g\n", f.path().substr(f.path().rfind('/') + 1).c_str(),
                name.c_str(), e.rel, e.max_abs);
}

// d sum(y * gy) / d inputs.
Tensors grads_of(const Tensor& y, const Tensor& gy, const Tensors& inputs) {
  return autograd::grad({sum(y * gy)}, inputs);
}

Tensor leaf(const test::ReferenceFile& f, const std::string& name) {
  Tensor t = f.tensor(name);
  t.requires_grad_();
  return t;
}

std::array<int64_t, 2> pair_of(const test::ReferenceFile& f, const std::string& name) {
  const std::vector<int64_t> v = f.ints(name);
  REQUIRE(v.size() == 2);
  return {v[0], v[1]};
}

}  // namespace

TEST_CASE("reference files: every data file parses and holds its cases", "[reference]") {
  const std::vector<std::pair<std::string, std::size_t>> files = {
      {"conv2d.txt", 7},        {"batch_norm.txt", 4}, {"layer_norm.txt", 2},
      {"softmax.txt", 4},       {"cross_entropy.txt", 16},
      {"transformer_encoder_layer.txt", 6}};
  for (const auto& [file, n_cases] : files) {
    INFO("file " << file);
    const test::ReferenceFile f = test::load_reference(file);
    CHECK(f.cases().size() == n_cases);
    for (const std::string& name : f.names()) {
      const Tensor t = f.tensor(name);
      CHECK(t.dtype() == (f.entry(name).dtype == DType::I64 ? DType::I64 : DType::F64));
    }
  }
  // Spot values, as printed in the files: options, a 0-d tensor, -inf in the causal mask.
  const test::ReferenceFile conv = test::load_reference("conv2d.txt");
  CHECK(conv.ints("basic.stride") == std::vector<int64_t>{1, 1});
  CHECK(conv.tensor("basic.groups").dim() == 0);
  CHECK(conv.tensor("basic.x").shape() == Shape{2, 2, 4, 4});
  const test::ReferenceFile tel = test::load_reference("transformer_encoder_layer.txt");
  const std::vector<double> mask = test::values(tel.tensor("pre_gelu_causal.src_mask"));
  CHECK(mask[0] == 0.0);
  CHECK(mask[1] == -INFINITY);
  CHECK(tel.tensor("post_relu.self_attn.in_proj_weight").shape() == Shape{24, 8});
}

TEST_CASE("conv2d output and gradients match PyTorch", "[reference][ops]") {
  const test::ReferenceFile f = test::load_reference("conv2d.txt");
  for (const std::string& c : f.cases()) {
    DYNAMIC_SECTION("case " << c) {
      const Conv2dOptions opt{.stride = pair_of(f, c + ".stride"),
                              .padding = pair_of(f, c + ".padding"),
                              .dilation = pair_of(f, c + ".dilation"),
                              .groups = f.int_value(c + ".groups")};
      const bool has_bias = f.has(c + ".b");
      const Tensor x = leaf(f, c + ".x");
      const Tensor w = leaf(f, c + ".w");
      const Tensor b = has_bias ? leaf(f, c + ".b") : Tensor();
      const Tensor y = conv2d(x, w, b, opt);
      check(y, f, c + ".y");
      Tensors inputs = {x, w};
      if (has_bias) inputs.push_back(b);
      const Tensors g = grads_of(y, f.tensor(c + ".gy"), inputs);
      check(g[0], f, c + ".dx");
      check(g[1], f, c + ".dw");
      if (has_bias) check(g[2], f, c + ".db");
    }
  }
}

TEST_CASE("batch_norm output, gradients and running statistics match PyTorch",
          "[reference][ops]") {
  const test::ReferenceFile f = test::load_reference("batch_norm.txt");
  for (const std::string& c : f.cases()) {
    DYNAMIC_SECTION("case " << c) {
      const bool training = f.int_value(c + ".training") != 0;
      const Tensor x = leaf(f, c + ".x");
      const Tensor weight = leaf(f, c + ".weight");
      const Tensor bias = leaf(f, c + ".bias");
      const Tensor running_mean = f.tensor(c + ".running_mean");  // updated in place when training
      const Tensor running_var = f.tensor(c + ".running_var");
      const Tensor y = batch_norm(x, weight, bias, running_mean, running_var, training,
                                  f.f64_value(c + ".momentum"), f.f64_value(c + ".eps"));
      check(y, f, c + ".y");
      check(running_mean, f, c + ".running_mean_after");
      check(running_var, f, c + ".running_var_after");
      const Tensors g = grads_of(y, f.tensor(c + ".gy"), {x, weight, bias});
      check(g[0], f, c + ".dx");
      check(g[1], f, c + ".dweight");
      check(g[2], f, c + ".dbias");
    }
  }
}

TEST_CASE("layer_norm output and gradients match PyTorch", "[reference][ops]") {
  const test::ReferenceFile f = test::load_reference("layer_norm.txt");
  for (const std::string& c : f.cases()) {
    DYNAMIC_SECTION("case " << c) {
      const Tensor x = leaf(f, c + ".x");
      const Tensor weight = leaf(f, c + ".weight");
      const Tensor bias = leaf(f, c + ".bias");
      const Tensor y = layer_norm(x, f.ints(c + ".normalized_shape"), weight, bias, f.f64_value(c + ".eps"));
      check(y, f, c + ".y");
      const Tensors g = grads_of(y, f.tensor(c + ".gy"), {x, weight, bias});
      check(g[0], f, c + ".dx");
      check(g[1], f, c + ".dweight");
      check(g[2], f, c + ".dbias");
    }
  }
}

TEST_CASE("softmax and log_softmax outputs and gradients match PyTorch", "[reference][ops]") {
  const test::ReferenceFile f = test::load_reference("softmax.txt");
  for (const std::string& c : f.cases()) {
    DYNAMIC_SECTION("case " << c) {
      const int64_t dim = f.int_value(c + ".dim");
      const Tensor x = leaf(f, c + ".x");
      const Tensor y = f.int_value(c + ".log") ? log_softmax(x, dim) : softmax(x, dim);
      check(y, f, c + ".y");
      check(grads_of(y, f.tensor(c + ".gy"), {x})[0], f, c + ".dx");
    }
  }
}

TEST_CASE("cross_entropy loss and logits gradient match PyTorch", "[reference][ops]") {
  const test::ReferenceFile f = test::load_reference("cross_entropy.txt");
  for (const std::string& c : f.cases()) {
    DYNAMIC_SECTION("case " << c) {
      const auto reduction = static_cast<Reduction>(f.int_value(c + ".reduction"));
      const Tensor logits = leaf(f, c + ".logits");
      const Tensor loss = cross_entropy(logits, f.tensor(c + ".target"), reduction,
                                        f.int_value(c + ".ignore_index"), f.f64_value(c + ".label_smoothing"));
      check(loss, f, c + ".loss");
      check(grads_of(loss, f.tensor(c + ".gy"), {logits})[0], f, c + ".dlogits");
    }
  }
}
