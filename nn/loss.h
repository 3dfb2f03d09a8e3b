// Loss modules: the loss ops with their options held by a module (fp32 autocast policy).
//
//   nn::CrossEntropyLoss criterion({.label_smoothing = 0.1});
//   mg::Tensor loss = criterion(logits, target);       // logits [N, C], target i64 [N]
//   nn::CrossEntropyLoss weighted({.weight = mg::from_vector<float>({1.0f, 4.0f})});  // class weights
//
// A weight given in the options (class weights, BCE's element weights, pos_weight) is a buffer of
// the module, as PyTorch's: in the state dict, moved and cast with it; one that requires grad is
// refused (a buffer has no gradient; pass it to the op instead).
#pragma once
#include "mixgrad/nn/module.h"
#include "mixgrad/ops/loss.h"

namespace mg::nn {

// Shared shape of the loss modules: forward(input, target) and operator(), the call entry that
// opens the module's path scope (as UnaryModule::operator()).
class Loss : public Module {
 public:
  using Module::Module;
  virtual Tensor forward(const Tensor& input, const Tensor& target) = 0;
  Tensor operator()(const Tensor& input, const Tensor& target) {
    auto scope = module_scope(*this);
    return forward(input, target);
  }

 protected:
  // Registers a defined weight option as the buffer `name` (refusing one that requires grad) and
  // returns the registered handle; an undefined one stays undefined.
  Tensor weight_buffer(const char* name, const Tensor& w);
};

struct CrossEntropyLossOptions {
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;  // targets equal to it contribute nothing
  double label_smoothing = 0.0;
  Tensor weight;                // [C] class weights (the buffer "weight"), or undefined
};
// logits [N, C] (or [N, C, d...]), target i64 class indices [N] (or [N, d...]).
class CrossEntropyLoss : public Loss {
 public:
  using Options = CrossEntropyLossOptions;
  explicit CrossEntropyLoss(Options options = {});
  Tensor forward(const Tensor& input, const Tensor& target) override;

 protected:
  std::string extra_repr() const override;

 private:
  Options options_;
};

struct NLLLossOptions {
  Reduction reduction = Reduction::Mean;
  int64_t ignore_index = -100;
  Tensor weight;  // [C] class weights (the buffer "weight"), or undefined
};
// log-probabilities [N, C], target i64 [N].
class NLLLoss : public Loss {
 public:
  using Options = NLLLossOptions;
  explicit NLLLoss(Options options = {});
  Tensor forward(const Tensor& input, const Tensor& target) override;

 private:
  Options options_;
};

struct RegressionLossOptions {
  Reduction reduction = Reduction::Mean;
};
// (x - y)^2
class MSELoss : public Loss {
 public:
  using Options = RegressionLossOptions;
  explicit MSELoss(Options options = {}) : Loss("MSELoss"), options_(options) {}
  Tensor forward(const Tensor& input, const Tensor& target) override;

 private:
  Options options_;
};
// |x - y|
class L1Loss : public Loss {
 public:
  using Options = RegressionLossOptions;
  explicit L1Loss(Options options = {}) : Loss("L1Loss"), options_(options) {}
  Tensor forward(const Tensor& input, const Tensor& target) override;

 private:
  Options options_;
};

struct SmoothL1LossOptions {
  Reduction reduction = Reduction::Mean;
  double beta = 1.0;  // quadratic below beta, linear above
};
class SmoothL1Loss : public Loss {
 public:
  using Options = SmoothL1LossOptions;
  explicit SmoothL1Loss(Options options = {});
  Tensor forward(const Tensor& input, const Tensor& target) override;

 private:
  Options options_;
};

struct HuberLossOptions {
  Reduction reduction = Reduction::Mean;
  double delta = 1.0;  // quadratic below delta, linear (slope delta) above; > 0
};
class HuberLoss : public Loss {
 public:
  using Options = HuberLossOptions;
  explicit HuberLoss(Options options = {});
  Tensor forward(const Tensor& input, const Tensor& target) override;

 private:
  Options options_;
};

struct BCEWithLogitsLossOptions {
  Reduction reduction = Reduction::Mean;
  Tensor pos_weight;  // [C] weight of positive examples per class, or undefined
  Tensor weight;      // a weight per element (broadcast to the input; the buffer "weight"), or undefined
};
// Sigmoid + binary cross entropy in one stable op; input logits and targets in [0, 1], same shape.
class BCEWithLogitsLoss : public Loss {
 public:
  using Options = BCEWithLogitsLossOptions;
  // A defined pos_weight is the buffer "pos_weight" (as PyTorch's): in the state dict, moved and
  // cast with the module.
  explicit BCEWithLogitsLoss(Options options = {});
  Tensor forward(const Tensor& input, const Tensor& target) override;

 private:
  Options options_;
};

struct BCELossOptions {
  Reduction reduction = Reduction::Mean;
  Tensor weight;  // a weight per element (broadcast to the input; the buffer "weight"), or undefined
};
// Binary cross entropy on probabilities. Banned under f16 autocast (use BCEWithLogitsLoss).
class BCELoss : public Loss {
 public:
  using Options = BCELossOptions;
  explicit BCELoss(Options options = {});
  Tensor forward(const Tensor& input, const Tensor& target) override;

 private:
  Options options_;
};

struct KLDivLossOptions {
  Reduction reduction = Reduction::Mean;  // BatchMean gives the mathematically correct KL
  bool log_target = false;
};
// input: log-probabilities; target: probabilities (or log-probabilities with log_target).
class KLDivLoss : public Loss {
 public:
  using Options = KLDivLossOptions;
  explicit KLDivLoss(Options options = {}) : Loss("KLDivLoss"), options_(options) {}
  Tensor forward(const Tensor& input, const Tensor& target) override;

 private:
  Options options_;
};

}  // namespace mg::nn
