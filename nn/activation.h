// Activation layers: ReLU, GELU, SiLU, Tanh, Sigmoid (keep policy: they run in the input's dtype).
//
//   auto act = nn::make<nn::GELU>({.approximate = mg::GeluApprox::Tanh});
#pragma once
#include "mixgrad/nn/module.h"
#include "mixgrad/ops/ops.h"

namespace mg::nn {

class ReLU : public UnaryModule {
 public:
  ReLU() : UnaryModule("ReLU") {}
  Tensor forward(const Tensor& x) override { return relu(x); }
};

struct GELUOptions {
  GeluApprox approximate = GeluApprox::None;  // exact erf form, or the tanh approximation
};

class GELU : public UnaryModule {
 public:
  using Options = GELUOptions;
  explicit GELU(Options options = {}) : UnaryModule("GELU"), options_(options) {}
  Tensor forward(const Tensor& x) override { return gelu(x, options_.approximate); }

 protected:
  std::string extra_repr() const override {
    return options_.approximate == GeluApprox::Tanh ? "approximate=tanh" : "";
  }

 private:
  Options options_;
};

// x * sigmoid(x)
class SiLU : public UnaryModule {
 public:
  SiLU() : UnaryModule("SiLU") {}
  Tensor forward(const Tensor& x) override { return silu(x); }
};

class Tanh : public UnaryModule {
 public:
  Tanh() : UnaryModule("Tanh") {}
  Tensor forward(const Tensor& x) override { return tanh(x); }
};

class Sigmoid : public UnaryModule {
 public:
  Sigmoid() : UnaryModule("Sigmoid") {}
  Tensor forward(const Tensor& x) override { return sigmoid(x); }
};

}  // namespace mg::nn
