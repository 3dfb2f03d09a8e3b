// Activation layers: ReLU, GELU, SiLU, Tanh, Sigmoid, LeakyReLU, ELU, SELU, CELU, Hardswish,
// Hardsigmoid, Mish, Hardtanh, ReLU6, Softplus — each the op of the same name (ops/ops.h) with
// PyTorch's defaults. All but Softplus keep the input's dtype under autocast (Softplus: f32).
//
//   auto act = nn::make<nn::GELU>({.approximate = mg::GeluApprox::Tanh});
//   auto leaky = nn::make<nn::LeakyReLU>({.negative_slope = 0.2});
#pragma once
#include <cmath>

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

struct LeakyReLUOptions {
  double negative_slope = 0.01;
};
class LeakyReLU : public UnaryModule {
 public:
  using Options = LeakyReLUOptions;
  explicit LeakyReLU(Options options = {}) : UnaryModule("LeakyReLU"), options_(options) {
    MG_CHECK(std::isfinite(options_.negative_slope), Error, "LeakyReLU: negative_slope must be finite, got ",
             options_.negative_slope);
  }
  Tensor forward(const Tensor& x) override { return leaky_relu(x, options_.negative_slope); }

 protected:
  std::string extra_repr() const override { return str_cat("negative_slope=", options_.negative_slope); }

 private:
  Options options_;
};

struct ELUOptions {
  double alpha = 1.0;
};
class ELU : public UnaryModule {
 public:
  using Options = ELUOptions;
  explicit ELU(Options options = {}) : UnaryModule("ELU"), options_(options) {
    MG_CHECK(std::isfinite(options_.alpha), Error, "ELU: alpha must be finite, got ", options_.alpha);
  }
  Tensor forward(const Tensor& x) override { return elu(x, options_.alpha); }

 protected:
  std::string extra_repr() const override { return str_cat("alpha=", options_.alpha); }

 private:
  Options options_;
};

class SELU : public UnaryModule {
 public:
  SELU() : UnaryModule("SELU") {}
  Tensor forward(const Tensor& x) override { return selu(x); }
};

struct CELUOptions {
  double alpha = 1.0;
};
class CELU : public UnaryModule {
 public:
  using Options = CELUOptions;
  explicit CELU(Options options = {}) : UnaryModule("CELU"), options_(options) {
    MG_CHECK(std::isfinite(options_.alpha) && options_.alpha != 0.0, Error, "CELU: alpha must be finite and not 0, got ",
             options_.alpha);
  }
  Tensor forward(const Tensor& x) override { return celu(x, options_.alpha); }

 protected:
  std::string extra_repr() const override { return str_cat("alpha=", options_.alpha); }

 private:
  Options options_;
};

class Hardswish : public UnaryModule {
 public:
  Hardswish() : UnaryModule("Hardswish") {}
  Tensor forward(const Tensor& x) override { return hardswish(x); }
};

class Hardsigmoid : public UnaryModule {
 public:
  Hardsigmoid() : UnaryModule("Hardsigmoid") {}
  Tensor forward(const Tensor& x) override { return hardsigmoid(x); }
};

class Mish : public UnaryModule {
 public:
  Mish() : UnaryModule("Mish") {}
  Tensor forward(const Tensor& x) override { return mish(x); }
};

struct HardtanhOptions {
  double min_val = -1.0;
  double max_val = 1.0;
};
class Hardtanh : public UnaryModule {
 public:
  using Options = HardtanhOptions;
  explicit Hardtanh(Options options = {}) : UnaryModule("Hardtanh"), options_(options) {
    MG_CHECK(options_.max_val > options_.min_val, Error, "Hardtanh: max_val (", options_.max_val,
             ") must be greater than min_val (", options_.min_val, "), as PyTorch's");
  }
  Tensor forward(const Tensor& x) override { return hardtanh(x, options_.min_val, options_.max_val); }

 protected:
  std::string extra_repr() const override { return str_cat("min_val=", options_.min_val, ", max_val=", options_.max_val); }

 private:
  Options options_;
};

class ReLU6 : public UnaryModule {
 public:
  ReLU6() : UnaryModule("ReLU6") {}
  Tensor forward(const Tensor& x) override { return relu6(x); }
};

struct SoftplusOptions {
  double beta = 1.0;
  double threshold = 20.0;
};
class Softplus : public UnaryModule {
 public:
  using Options = SoftplusOptions;
  explicit Softplus(Options options = {}) : UnaryModule("Softplus"), options_(options) {
    MG_CHECK(std::isfinite(options_.beta) && options_.beta != 0.0, Error, "Softplus: beta must be finite and not 0, got ",
             options_.beta);
  }
  Tensor forward(const Tensor& x) override { return softplus(x, options_.beta, options_.threshold); }

 protected:
  std::string extra_repr() const override { return str_cat("beta=", options_.beta, ", threshold=", options_.threshold); }

 private:
  Options options_;
};

}  // namespace mg::nn
