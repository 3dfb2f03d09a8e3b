#include "mixgrad/nn/averaged_model.h"

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/error.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/nn/normalization.h"
#include "mixgrad/ops/ops.h"

namespace mg::nn {

namespace {

const char* averaging_name(Averaging a) { return a == Averaging::Equal ? "equal" : "exponential"; }

// ATen's lerp, a + w (m - a), in opmath (f64 if either side is f64, else f32): the two-sided form
// keeps w = 1 exact (m - (m - a) (1 - w) for w >= 1/2). The weight is rounded to the opmath type
// first, as ATen's scalar weight is.
Tensor lerp_opmath(const Tensor& a, const Tensor& m, double w) {
  const DType op = a.dtype() == DType::F64 || m.dtype() == DType::F64 ? DType::F64 : DType::F32;
  const Tensor a_op = to(a, op), m_op = to(m, op);
  const Tensor d = m_op - a_op;
  if (op == DType::F32) w = double(float(w));
  if (w < 0.5) return add(a_op, d, w);
  const double rest = op == DType::F32 ? double(1.0f - float(w)) : 1.0 - w;
  return m_op - d * rest;
}

// The same average for an integer buffer (batch norm's num_batches_tracked), in f64, truncated
// towards zero on the way back as PyTorch's integer path does.
Tensor average_integral(const Tensor& a, const Tensor& m, double w) {
  const Tensor a64 = to(a, DType::F64), m64 = to(m, DType::F64);
  return to(a64 + (m64 - a64) * w, a.dtype());
}

// The (name, tensor) pairs of the averaged copy and the model, in the same order.
struct Pairs {
  NamedTensors averaged, model;
};

std::string shape_text(const Tensor& t) { return t.defined() ? str_cat(t.shape()) : "undefined"; }

}  // namespace

AveragedModelBase::AveragedModelBase(std::shared_ptr<Module> averaged, const Module& model,
                                     AveragedModelOptions options)
    : Module("AveragedModel"), averaged_(std::move(averaged)), options_(std::move(options)) {
  MG_CHECK(averaged_ != nullptr, Error, "AveragedModel: the averaged module is null");
  MG_CHECK(averaged_.get() != &model, Error,
           "AveragedModel: the averaged module is the model itself; pass a separate instance of its architecture");
  MG_CHECK(options_.averaging != Averaging::Exponential || (options_.decay >= 0.0 && options_.decay <= 1.0), Error,
           "AveragedModel: decay must be in [0, 1], got ", options_.decay);
  check_same_structure(model);
  n_averaged_ = register_buffer("n_averaged", scalar_tensor(0, {.dtype = DType::I64}));
  n_version_ = n_averaged_.version();
  register_module("module", averaged_);
  // Start as a copy of the model, as PyTorch's deepcopy does.
  NoGradGuard no_grad;
  const auto copy_all = [](const NamedTensors& to_list, const NamedTensors& from_list) {
    for (std::size_t i = 0; i < to_list.size(); ++i) Tensor(to_list[i].second).copy_(from_list[i].second);
  };
  copy_all(averaged_->named_parameters(), model.named_parameters());
  copy_all(averaged_->named_buffers(), model.named_buffers());
}

void AveragedModelBase::check_same_structure(const Module& model) const {
  MG_CHECK(&model != averaged_.get(), Error, "AveragedModel: update_parameters was given the averaged copy itself");
  const auto check = [&](const NamedTensors& mine, const NamedTensors& theirs, const char* what) {
    for (std::size_t i = 0; i < std::min(mine.size(), theirs.size()); ++i) {
      const auto& [name, a] = mine[i];
      const auto& [model_name, m] = theirs[i];
      MG_CHECK(name == model_name, Error, "AveragedModel: ", what, " ", i, " of the averaged copy is '", name,
               "' but the model's is '", model_name, "' (the two must have the same architecture)");
      MG_CHECK(a.defined() == m.defined() && (!a.defined() || a.shape() == m.shape()), ShapeError, "AveragedModel: ",
               what, " '", name, "' is ", shape_text(a), " in the averaged copy but ", shape_text(m), " in the model");
    }
    MG_CHECK(mine.size() == theirs.size(), Error, "AveragedModel: the averaged copy has ", mine.size(), " ", what,
             "s but the model has ", theirs.size(), " (the two must have the same architecture)");
  };
  check(averaged_->named_parameters(), model.named_parameters(), "parameter");
  check(averaged_->named_buffers(), model.named_buffers(), "buffer");
}

int64_t AveragedModelBase::n_averaged() const {
  if (n_averaged_.version() != n_version_) {
    n_host_ = n_averaged_.item<int64_t>();
    n_version_ = n_averaged_.version();
  }
  return n_host_;
}

void AveragedModelBase::update_parameters(const Module& model) { update_parameters(model, nullptr); }

void AveragedModelBase::update_parameters(const Module& model, const std::function<Tensor(const Tensor&)>& source) {
  check_same_structure(model);
  NamedTensors model_params = model.named_parameters();
  if (source) {
    // Every replacement is checked before anything is averaged: a wrong one changes nothing.
    for (auto& [name, p] : model_params) {
      if (!p.defined()) continue;
      Tensor s = source(p);
      if (!s.defined()) continue;
      MG_CHECK(s.shape() == p.shape() && is_floating(s.dtype()), ShapeError, "AveragedModel: the source of '", name,
               "' is ", describe(s), " but the parameter is ", describe(p));
      p = std::move(s);
    }
  }
  const int64_t n = n_averaged();
  NoGradGuard no_grad;
  const NamedTensors params = averaged_->named_parameters();
  const NamedTensors buffers = averaged_->named_buffers(), model_buffers = model.named_buffers();
  Pairs averaged_pairs{params, model_params};
  if (options_.use_buffers) {
    averaged_pairs.averaged.insert(averaged_pairs.averaged.end(), buffers.begin(), buffers.end());
    averaged_pairs.model.insert(averaged_pairs.model.end(), model_buffers.begin(), model_buffers.end());
  }
  // The weight of the model's value: 1 / (n + 1) for the mean of n + 1 values, 1 - decay for EMA.
  const double w = options_.averaging == Averaging::Equal ? 1.0 / double(n + 1) : 1.0 - options_.decay;
  const auto model_tensor = [&](std::size_t i, const Tensor& a) {
    const Tensor& m = averaged_pairs.model[i].second;
    return m.device() == a.device() ? m : mg::to(m, a.device());
  };
  if (options_.average && n > 0) {
    // The user's function may throw or return a wrong shape part-way: every result is made and
    // checked before any is written, so a failed update changes nothing.
    std::vector<Tensor> results(averaged_pairs.averaged.size());
    for (std::size_t i = 0; i < averaged_pairs.averaged.size(); ++i) {
      const auto& [name, a] = averaged_pairs.averaged[i];
      if (!a.defined() || a.dtype() == DType::Bool) continue;
      results[i] = options_.average(a, model_tensor(i, a), n);
      MG_CHECK(results[i].defined() && results[i].shape() == a.shape(), ShapeError,
               "AveragedModel: the average function returned ", shape_text(results[i]), " for '", name, "' of shape ",
               a.shape());
    }
    for (std::size_t i = 0; i < averaged_pairs.averaged.size(); ++i) {
      Tensor a = averaged_pairs.averaged[i].second;
      if (!a.defined()) continue;
      if (results[i].defined()) a.copy_(results[i]);
      else a.copy_(model_tensor(i, a));  // a bool buffer: copied
    }
  } else {
    for (std::size_t i = 0; i < averaged_pairs.averaged.size(); ++i) {
      Tensor a = averaged_pairs.averaged[i].second;
      if (!a.defined()) continue;
      const Tensor m = model_tensor(i, a);
      if (n == 0 || a.dtype() == DType::Bool) {
        a.copy_(m);
      } else if (is_floating(a.dtype())) {
        a.copy_(lerp_opmath(a, m, w));
      } else {
        a.copy_(average_integral(a, m, w));
      }
    }
  }
  if (!options_.use_buffers) {
    for (std::size_t i = 0; i < buffers.size(); ++i) {
      if (buffers[i].second.defined()) Tensor(buffers[i].second).copy_(model_buffers[i].second);
    }
  }
  n_averaged_.fill_(double(n + 1));
  n_host_ = n + 1;
  n_version_ = n_averaged_.version();
}

std::string AveragedModelBase::extra_repr() const {
  if (options_.average) return "average=custom";
  return str_cat("averaging=", averaging_name(options_.averaging),
                 options_.averaging == Averaging::Exponential ? str_cat(", decay=", options_.decay) : "",
                 ", use_buffers=", options_.use_buffers ? "true" : "false");
}

namespace {

// Every module under `m` (m first, parents before children), once each.
void collect_modules(Module& m, std::vector<Module*>& out) {
  for (Module* seen : out) {
    if (seen == &m) return;
  }
  out.push_back(&m);
  for (const std::shared_ptr<Module>& child : m.children()) collect_modules(*child, out);
}

// Puts back every module's training mode and every batch norm's momentum, on scope exit.
class BatchNormStatsScope {
 public:
  explicit BatchNormStatsScope(Module& model) {
    collect_modules(model, modules_);
    for (Module* m : modules_) {
      training_.push_back(m->is_training());
      if (auto* bn = dynamic_cast<BatchNorm*>(m)) batch_norms_.emplace_back(bn, bn->options().momentum);
    }
  }
  ~BatchNormStatsScope() {
    // Parents first: Module::train sets the children too, and each child's own mode then follows.
    for (std::size_t i = 0; i < modules_.size(); ++i) modules_[i]->train(training_[i]);
    for (auto& [bn, momentum] : batch_norms_) bn->set_momentum(momentum);
  }
  BatchNormStatsScope(const BatchNormStatsScope&) = delete;
  BatchNormStatsScope& operator=(const BatchNormStatsScope&) = delete;

  const std::vector<std::pair<BatchNorm*, std::optional<double>>>& batch_norms() const { return batch_norms_; }

 private:
  std::vector<Module*> modules_;
  std::vector<bool> training_;
  std::vector<std::pair<BatchNorm*, std::optional<double>>> batch_norms_;
};

}  // namespace

void update_bn(Module& model, const std::function<void()>& run_batches) {
  MG_CHECK(static_cast<bool>(run_batches), Error, "update_bn: run_batches is empty");
  BatchNormStatsScope scope(model);
  if (scope.batch_norms().empty()) return;
  for (const auto& [bn, momentum] : scope.batch_norms()) {
    bn->reset_running_stats();
    bn->set_momentum(std::nullopt);
  }
  model.train(true);
  NoGradGuard no_grad;
  run_batches();
}

}  // namespace mg::nn
