// The remaining activation layers of torch.nn, each the function of the same name (ops/loss.h's
// softmax/log_softmax, ops/activation_composites.h for the rest) with PyTorch's defaults:
// Softmax, LogSoftmax, Softmin (dim -1 unless given: PyTorch's implicit dim is deprecated), GLU,
// LogSigmoid, Softsign, Tanhshrink, Hardshrink, Softshrink, Threshold, and PReLU with its learned
// slope (one, or one per channel).
//
//   auto act = nn::make<nn::PReLU>({.num_parameters = 64});        // a slope per channel, 0.25
//   auto probs = nn::make<nn::Softmax>(nn::DimOptions{.dim = -1});
#pragma once
#include <cmath>

#include "mixgrad/nn/module.h"
#include "mixgrad/ops/activation_composites.h"
#include "mixgrad/ops/loss.h"

namespace mg::nn {

struct DimOptions {
  int64_t dim = -1;
};

// A layer applying fn(x, dim): the base of Softmax, LogSoftmax, Softmin and GLU.
class DimActivation : public UnaryModule {
 public:
  using Options = DimOptions;
  Tensor forward(const Tensor& x) override { return fn_(x, options_.dim); }

 protected:
  using Fn = Tensor (*)(const Tensor&, int64_t);
  DimActivation(std::string type, Fn fn, Options options) : UnaryModule(std::move(type)), fn_(fn), options_(options) {}
  std::string extra_repr() const override { return str_cat("dim=", options_.dim); }

 private:
  Fn fn_;
  Options options_;
};

class Softmax : public DimActivation {
 public:
  explicit Softmax(Options options) : DimActivation("Softmax", softmax, options) {}
};

class LogSoftmax : public DimActivation {
 public:
  explicit LogSoftmax(Options options) : DimActivation("LogSoftmax", log_softmax, options) {}
};

class Softmin : public DimActivation {
 public:
  explicit Softmin(Options options) : DimActivation("Softmin", softmin, options) {}
};

// Softmax over the channels of x [N, C, H, W] or [C, H, W] (dim -3), as PyTorch's Softmax2d.
class Softmax2d : public UnaryModule {
 public:
  Softmax2d() : UnaryModule("Softmax2d") {}
  Tensor forward(const Tensor& x) override;
};

class GLU : public DimActivation {
 public:
  explicit GLU(Options options = {}) : DimActivation("GLU", glu, options) {}
};

class LogSigmoid : public UnaryModule {
 public:
  LogSigmoid() : UnaryModule("LogSigmoid") {}
  Tensor forward(const Tensor& x) override { return logsigmoid(x); }
};

class Softsign : public UnaryModule {
 public:
  Softsign() : UnaryModule("Softsign") {}
  Tensor forward(const Tensor& x) override { return softsign(x); }
};

class Tanhshrink : public UnaryModule {
 public:
  Tanhshrink() : UnaryModule("Tanhshrink") {}
  Tensor forward(const Tensor& x) override { return tanhshrink(x); }
};

struct ShrinkOptions {
  double lambd = 0.5;  // Softshrink: >= 0; Hardshrink: any number (negative keeps every x, as PyTorch)
};

// A layer applying fn(x, lambd): the base of Hardshrink and Softshrink.
class ShrinkActivation : public UnaryModule {
 public:
  using Options = ShrinkOptions;
  Tensor forward(const Tensor& x) override { return fn_(x, options_.lambd); }

 protected:
  using Fn = Tensor (*)(const Tensor&, double);
  ShrinkActivation(std::string type, Fn fn, Options options, bool negative_ok)
      : UnaryModule(std::move(type)), fn_(fn), options_(options) {
    MG_CHECK(options_.lambd >= 0.0 || (negative_ok && options_.lambd < 0.0), Error, type_name(), ": lambd must be ",
             negative_ok ? "a number" : ">= 0", ", got ", options_.lambd);
  }
  std::string extra_repr() const override { return str_cat(options_.lambd); }

 private:
  Fn fn_;
  Options options_;
};

class Hardshrink : public ShrinkActivation {
 public:
  explicit Hardshrink(Options options = {}) : ShrinkActivation("Hardshrink", hardshrink, options, true) {}
};

class Softshrink : public ShrinkActivation {
 public:
  explicit Softshrink(Options options = {}) : ShrinkActivation("Softshrink", softshrink, options, false) {}
};

struct ThresholdOptions {
  double threshold = 0.0;
  double value = 0.0;
};

class Threshold : public UnaryModule {
 public:
  using Options = ThresholdOptions;
  explicit Threshold(Options options) : UnaryModule("Threshold"), options_(options) {}
  Tensor forward(const Tensor& x) override { return mg::threshold(x, options_.threshold, options_.value); }

 protected:
  std::string extra_repr() const override { return str_cat("threshold=", options_.threshold, ", value=", options_.value); }

 private:
  Options options_;
};

struct PReLUOptions {
  int64_t num_parameters = 1;  // 1 (one slope) or the channels (dim 1 of the input)
  double init = 0.25;
};

class PReLU : public UnaryModule {
 public:
  using Options = PReLUOptions;
  explicit PReLU(Options options = {});
  Tensor forward(const Tensor& x) override { return prelu(x, weight); }
  void reset_parameters();

  Tensor weight;  // [num_parameters], filled with init

 protected:
  std::string extra_repr() const override { return str_cat("num_parameters=", options_.num_parameters); }

 private:
  Options options_;
};

struct RReLUOptions {
  double lower = 1.0 / 8.0;
  double upper = 1.0 / 3.0;
  Generator* generator = nullptr;  // the slopes' Philox stream; the default generator when null
};

// mg::rrelu with training = is_training(): random slopes in training, their mean in eval.
class RReLU : public UnaryModule {
 public:
  using Options = RReLUOptions;
  explicit RReLU(Options options = {});
  Tensor forward(const Tensor& x) override {
    return rrelu(x, options_.lower, options_.upper, is_training(), options_.generator);
  }

 protected:
  std::string extra_repr() const override { return str_cat("lower=", options_.lower, ", upper=", options_.upper); }

 private:
  Options options_;
};

}  // namespace mg::nn
