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

class Softmax : public UnaryModule {
 public:
  using Options = DimOptions;
  explicit Softmax(Options options) : UnaryModule("Softmax"), options_(options) {}
  Tensor forward(const Tensor& x) override { return softmax(x, options_.dim); }

 protected:
  std::string extra_repr() const override { return str_cat("dim=", options_.dim); }

 private:
  Options options_;
};

class LogSoftmax : public UnaryModule {
 public:
  using Options = DimOptions;
  explicit LogSoftmax(Options options) : UnaryModule("LogSoftmax"), options_(options) {}
  Tensor forward(const Tensor& x) override { return log_softmax(x, options_.dim); }

 protected:
  std::string extra_repr() const override { return str_cat("dim=", options_.dim); }

 private:
  Options options_;
};

class Softmin : public UnaryModule {
 public:
  using Options = DimOptions;
  explicit Softmin(Options options) : UnaryModule("Softmin"), options_(options) {}
  Tensor forward(const Tensor& x) override { return softmin(x, options_.dim); }

 protected:
  std::string extra_repr() const override { return str_cat("dim=", options_.dim); }

 private:
  Options options_;
};

class GLU : public UnaryModule {
 public:
  using Options = DimOptions;
  explicit GLU(Options options = {}) : UnaryModule("GLU"), options_(options) {}
  Tensor forward(const Tensor& x) override { return glu(x, options_.dim); }

 protected:
  std::string extra_repr() const override { return str_cat("dim=", options_.dim); }

 private:
  Options options_;
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
  double lambd = 0.5;  // >= 0
};

class Hardshrink : public UnaryModule {
 public:
  using Options = ShrinkOptions;
  explicit Hardshrink(Options options = {}) : UnaryModule("Hardshrink"), options_(options) {
    MG_CHECK(options_.lambd >= 0.0, Error, "Hardshrink: lambd must be >= 0, got ", options_.lambd);
  }
  Tensor forward(const Tensor& x) override { return hardshrink(x, options_.lambd); }

 protected:
  std::string extra_repr() const override { return str_cat(options_.lambd); }

 private:
  Options options_;
};

class Softshrink : public UnaryModule {
 public:
  using Options = ShrinkOptions;
  explicit Softshrink(Options options = {}) : UnaryModule("Softshrink"), options_(options) {
    MG_CHECK(options_.lambd >= 0.0, Error, "Softshrink: lambd must be >= 0, got ", options_.lambd);
  }
  Tensor forward(const Tensor& x) override { return softshrink(x, options_.lambd); }

 protected:
  std::string extra_repr() const override { return str_cat(options_.lambd); }

 private:
  Options options_;
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

}  // namespace mg::nn
