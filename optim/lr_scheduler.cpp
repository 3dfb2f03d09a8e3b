#include "mixgrad/optim/lr_scheduler.h"

#include <algorithm>
#include <limits>
#include <cmath>
#include <tuple>
#include <numbers>
#include <utility>

namespace mg::optim {

// ---- helpers of several schedulers ----

namespace {

// One value for every group, or one per group (named `what` in the error).
std::vector<double> per_group(const std::vector<double>& v, std::size_t groups, const char* owner, const char* what) {
  MG_CHECK(v.size() == 1 || v.size() == groups, Error, owner, ": ", what, " has ", v.size(),
           " values; expected 1 or one per param group (", groups, ")");
  for (double x : v) MG_CHECK(x >= 0.0, Error, owner, ": ", what, " must be >= 0, got ", x);
  return v.size() == 1 ? std::vector<double>(groups, v[0]) : v;
}

// base_momentum and max_momentum per group, each pair checked to lie in [0, 1).
std::pair<std::vector<double>, std::vector<double>> momenta_per_group(const std::vector<double>& base,
                                                                      const std::vector<double>& max,
                                                                      std::size_t groups, const char* owner) {
  std::pair<std::vector<double>, std::vector<double>> m{per_group(base, groups, owner, "base_momentum"),
                                                        per_group(max, groups, owner, "max_momentum")};
  for (std::size_t g = 0; g < groups; ++g) {
    MG_CHECK(m.first[g] < 1.0 && m.second[g] < 1.0, Error, owner, ": base_momentum and max_momentum must be in [0, 1), got ",
             m.first[g], " and ", m.second[g], groups > 1 ? str_cat(" (param group ", g, ")") : std::string());
  }
  return m;
}

// The group option a scheduler cycles as momentum: "momentum" (SGD, RMSprop) or "beta1" (Adam,
// AdamW, LAMB); an error naming `owner` when the optimizer has neither.
std::string momentum_option(const Optimizer& optimizer, const char* owner) {
  const OptionMap& d = optimizer.defaults();
  const std::string key = d.count("momentum") ? "momentum" : (d.count("beta1") ? "beta1" : "");
  MG_CHECK(!key.empty(), Error, owner, ": cycle_momentum needs an optimizer with a 'momentum' or 'beta1' option; ",
           optimizer.name(), " has neither\n  hint: set .cycle_momentum = false");
  return key;
}

}  // namespace

// ---- base ----

LRScheduler::LRScheduler(Optimizer& optimizer, std::string name) : optimizer_(optimizer), name_(std::move(name)) {
  for (ParamGroup& g : optimizer_.param_groups()) {
    if (!g.has_option("initial_lr")) g.set_option("initial_lr", g.lr());
    base_lrs_.push_back(g.option("initial_lr"));
  }
}

void LRScheduler::step() {
  std::vector<ParamGroup>& groups = optimizer_.param_groups();
  MG_CHECK(groups.size() == base_lrs_.size(), Error, name_, ": the optimizer has ", groups.size(),
           " param groups but the scheduler was created for ", base_lrs_.size(),
           "\n  hint: create the scheduler after the last add_param_group");
  ++last_epoch_;
  std::vector<double> lrs;
  try {
    lrs = compute_lrs();
  } catch (...) {
    --last_epoch_;
    throw;
  }
  MG_ASSERT(lrs.size() == groups.size(), name_, ": compute_lrs returned ", lrs.size(), " values");
  mark_ = optimizer_.step_mark();  // no host read (a device copy of the skip counter on CUDA)
  last_lr_.clear();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    groups[g].set_lr(lrs[g]);
    last_lr_.push_back(lrs[g]);
  }
}

StateDict LRScheduler::state_dict() const {
  StateDict s;
  s.strings["scheduler"] = name_;
  s.ints["last_epoch"] = last_epoch_;
  s.ints["num_groups"] = int64_t(base_lrs_.size());
  for (std::size_t g = 0; g < base_lrs_.size(); ++g) s.floats["base_lr." + std::to_string(g)] = base_lrs_[g];
  for (std::size_t g = 0; g < last_lr_.size(); ++g) s.floats["last_lr." + std::to_string(g)] = last_lr_[g];
  s.ints["optimizer_steps"] = optimizer_.step_count_at(mark_);  // for optimizer_stepped() after a resume
  save_children(s);
  return s;
}

void LRScheduler::initial_step() {
  initial_step_running_ = true;
  try {
    step();
  } catch (...) {
    initial_step_running_ = false;
    throw;
  }
  initial_step_running_ = false;
}

void LRScheduler::restart() {
  std::vector<ParamGroup>& groups = optimizer_.param_groups();
  for (std::size_t g = 0; g < groups.size() && g < base_lrs_.size(); ++g) groups[g].set_lr(base_lrs_[g]);
  restart_parts();
  last_epoch_ = -1;
  initial_step();
}

void LRScheduler::check_state_dict(const StateDict& s) const {
  const std::string owner = name_ + ": load_state_dict";
  const std::string& saved = s.string_at(owner, "scheduler");
  MG_CHECK(saved == name_, Error, owner, ": the state belongs to a ", saved, " scheduler, not ", name_);
  const int64_t n = s.int_at(owner, "num_groups");
  MG_CHECK(n == int64_t(base_lrs_.size()), Error, owner, ": the state has ", n,
           " param groups but the scheduler has ", base_lrs_.size());
  MG_CHECK(s.int_at(owner, "last_epoch") >= -1, Error, owner, ": last_epoch must be >= -1, got ",
           s.int_at(owner, "last_epoch"));
  for (int64_t g = 0; g < n; ++g) {
    s.float_at(owner, "base_lr." + std::to_string(g));
    s.float_at(owner, "last_lr." + std::to_string(g));
  }
  check_children(s);
}

void LRScheduler::load_state_dict(const StateDict& s) {
  check_state_dict(s);  // every part of a composite's too: a refusal changes nothing
  const std::string owner = name_ + ": load_state_dict";
  const int64_t n = s.int_at(owner, "num_groups");
  const int64_t last_epoch = s.int_at(owner, "last_epoch");
  std::vector<double> base(static_cast<std::size_t>(n)), last(static_cast<std::size_t>(n));
  for (int64_t g = 0; g < n; ++g) {
    base[g] = s.float_at(owner, "base_lr." + std::to_string(g));
    last[g] = s.float_at(owner, "last_lr." + std::to_string(g));
  }
  load_children(s);
  base_lrs_ = std::move(base);
  last_lr_ = std::move(last);
  last_epoch_ = last_epoch;
  // optimizer_stepped() compares with the optimizer's update count at the saved step (a state
  // written before it was stored: the count now, so nothing counts as stepped yet).
  mark_ = Optimizer::StepMark{.issued = s.ints.count("optimizer_steps") ? s.ints.at("optimizer_steps")
                                                                         : optimizer_.step_count()};
}

// ---- StepLR / MultiStepLR (chainable: they scale the group's current lr, as PyTorch) ----

StepLR::StepLR(Optimizer& optimizer, StepLROptions options) : LRScheduler(optimizer, "StepLR"), options_(options) {
  MG_CHECK(options_.step_size > 0, Error, "StepLR: step_size must be > 0, got ", options_.step_size);
  MG_CHECK(options_.gamma >= 0.0, Error, "StepLR: gamma must be >= 0, got ", options_.gamma);
  initial_step();
}

std::vector<double> StepLR::compute_lrs() {
  const bool decay = last_epoch() != 0 && last_epoch() % options_.step_size == 0;
  std::vector<double> lrs;
  for (const ParamGroup& g : optimizer_.param_groups()) lrs.push_back(decay ? g.lr() * options_.gamma : g.lr());
  return lrs;
}

MultiStepLR::MultiStepLR(Optimizer& optimizer, MultiStepLROptions options)
    : LRScheduler(optimizer, "MultiStepLR"), options_(std::move(options)) {
  MG_CHECK(std::is_sorted(options_.milestones.begin(), options_.milestones.end()), Error,
           "MultiStepLR: milestones must be non-decreasing, got ", options_.milestones);
  MG_CHECK(options_.milestones.empty() || options_.milestones.front() >= 0, Error,
           "MultiStepLR: milestones must be >= 0, got ", options_.milestones);
  MG_CHECK(options_.gamma >= 0.0, Error, "MultiStepLR: gamma must be >= 0, got ", options_.gamma);
  initial_step();
}

std::vector<double> MultiStepLR::compute_lrs() {
  const auto hits = std::count(options_.milestones.begin(), options_.milestones.end(), last_epoch());
  std::vector<double> lrs;
  for (const ParamGroup& g : optimizer_.param_groups()) {
    lrs.push_back(hits == 0 ? g.lr() : g.lr() * std::pow(options_.gamma, double(hits)));
  }
  return lrs;
}

ExponentialLR::ExponentialLR(Optimizer& optimizer, ExponentialLROptions options)
    : LRScheduler(optimizer, "ExponentialLR"), options_(options) {
  MG_CHECK(options_.gamma >= 0.0, Error, "ExponentialLR: gamma must be >= 0, got ", options_.gamma);
  initial_step();
}

std::vector<double> ExponentialLR::compute_lrs() {
  std::vector<double> lrs;
  for (const ParamGroup& g : optimizer_.param_groups()) lrs.push_back(last_epoch() == 0 ? g.lr() : g.lr() * options_.gamma);
  return lrs;
}

LinearLR::LinearLR(Optimizer& optimizer, LinearLROptions options)
    : LRScheduler(optimizer, "LinearLR"), options_(options) {
  MG_CHECK(options_.start_factor > 0.0 && options_.start_factor <= 1.0, Error,
           "LinearLR: start_factor must be in (0, 1], got ", options_.start_factor);
  MG_CHECK(options_.end_factor >= 0.0 && options_.end_factor <= 1.0, Error,
           "LinearLR: end_factor must be in [0, 1], got ", options_.end_factor);
  MG_CHECK(options_.total_iters >= 0, Error, "LinearLR: total_iters must be >= 0, got ", options_.total_iters);
  initial_step();
}

std::vector<double> LinearLR::compute_lrs() {
  // PyTorch's recursion, term for term: each step multiplies by the ratio of consecutive factors.
  const int64_t t = last_epoch(), n = options_.total_iters;
  const double a = options_.start_factor, b = options_.end_factor;
  std::vector<double> lrs;
  for (const ParamGroup& g : optimizer_.param_groups()) {
    if (t == 0) {
      lrs.push_back(g.lr() * a);
    } else if (t > n) {
      lrs.push_back(g.lr());
    } else {
      lrs.push_back(g.lr() * (1.0 + (b - a) / (double(n) * a + double(t - 1) * (b - a))));
    }
  }
  return lrs;
}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, CosineAnnealingLROptions options)
    : LRScheduler(optimizer, "CosineAnnealingLR"), options_(options) {
  MG_CHECK(options_.t_max > 0, Error, "CosineAnnealingLR: t_max must be > 0, got ", options_.t_max);
  MG_CHECK(options_.eta_min >= 0.0, Error, "CosineAnnealingLR: eta_min must be >= 0, got ", options_.eta_min);
  initial_step();
}

std::vector<double> CosineAnnealingLR::compute_lrs() {
  // PyTorch's recursion, term for term (the same doubles): each step scales the distance to
  // eta_min by the ratio of consecutive cosine factors; at the bottom of a period, where that
  // ratio is 0/0, it steps up by the first increment instead.
  const int64_t t = last_epoch(), period = options_.t_max;
  const double pi = std::numbers::pi, eta = options_.eta_min;
  std::vector<double> lrs;
  const auto& groups = optimizer_.param_groups();
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const double lr = groups[i].lr();
    if (t == 0) {
      lrs.push_back(lr);
    } else if ((t - 1 - period) % (2 * period) == 0) {
      lrs.push_back(lr + (base_lrs_[i] - eta) * (1 - std::cos(pi / double(period))) / 2);
    } else {
      lrs.push_back((1 + std::cos(pi * double(t) / double(period))) / (1 + std::cos(pi * double(t - 1) / double(period))) *
                        (lr - eta) +
                    eta);
    }
  }
  return lrs;
}

namespace {
// One function for every group or one per group, none empty (LambdaLR's and MultiplicativeLR's rule).
void check_factor_functions(const char* name, const std::vector<std::function<double(int64_t)>>& factors,
                            std::size_t groups) {
  MG_CHECK(factors.size() == 1 || factors.size() == groups, Error, name,
           ": expected one factor function or one per param group (", groups, "), got ", factors.size());
  for (const auto& f : factors) MG_CHECK(bool(f), Error, name, ": a factor function is empty");
}
}  // namespace

LambdaLR::LambdaLR(Optimizer& optimizer, LambdaLROptions options)
    : LRScheduler(optimizer, "LambdaLR"), options_(std::move(options)) {
  check_factor_functions("LambdaLR", options_.factors, optimizer.param_groups().size());
  initial_step();
}

std::vector<double> LambdaLR::compute_lrs() {
  std::vector<double> lrs;
  for (std::size_t i = 0; i < base_lrs_.size(); ++i) {
    const auto& f = options_.factors.size() == 1 ? options_.factors[0] : options_.factors[i];
    lrs.push_back(base_lrs_[i] * f(last_epoch()));
  }
  return lrs;
}

MultiplicativeLR::MultiplicativeLR(Optimizer& optimizer, MultiplicativeLROptions options)
    : LRScheduler(optimizer, "MultiplicativeLR"), options_(std::move(options)) {
  check_factor_functions("MultiplicativeLR", options_.factors, optimizer.param_groups().size());
  initial_step();
}

std::vector<double> MultiplicativeLR::compute_lrs() {
  std::vector<double> lrs;
  const auto& groups = optimizer_.param_groups();
  for (std::size_t i = 0; i < groups.size(); ++i) {
    const auto& f = options_.factors.size() == 1 ? options_.factors[0] : options_.factors[i];
    lrs.push_back(in_initial_step() ? groups[i].lr() : groups[i].lr() * f(last_epoch()));
  }
  return lrs;
}

// ---- warmup schedules (closed form on the base lrs) ----

namespace {
void check_warmup(const char* name, int64_t warmup, int64_t total) {
  MG_CHECK(warmup >= 0, Error, name, ": warmup_steps must be >= 0, got ", warmup);
  MG_CHECK(total > 0 && total >= warmup, Error, name, ": total_steps must be > 0 and >= warmup_steps (",
           warmup, "), got ", total);
}
}  // namespace

WarmupCosineLR::WarmupCosineLR(Optimizer& optimizer, WarmupCosineLROptions options)
    : LRScheduler(optimizer, "WarmupCosineLR"), options_(options) {
  check_warmup("WarmupCosineLR", options_.warmup_steps, options_.total_steps);
  MG_CHECK(options_.min_lr >= 0.0, Error, "WarmupCosineLR: min_lr must be >= 0, got ", options_.min_lr);
  initial_step();
}

std::vector<double> WarmupCosineLR::compute_lrs() {
  const int64_t t = last_epoch(), w = options_.warmup_steps, total = options_.total_steps;
  std::vector<double> lrs;
  for (double base : base_lrs_) {
    if (t < w) {
      lrs.push_back(base * double(t) / double(w));
    } else if (t >= total) {
      lrs.push_back(options_.min_lr);
    } else {
      const double progress = double(t - w) / double(total - w);
      lrs.push_back(options_.min_lr + (base - options_.min_lr) * (1.0 + std::cos(std::numbers::pi * progress)) / 2.0);
    }
  }
  return lrs;
}

WarmupLinearLR::WarmupLinearLR(Optimizer& optimizer, WarmupLinearLROptions options)
    : LRScheduler(optimizer, "WarmupLinearLR"), options_(options) {
  check_warmup("WarmupLinearLR", options_.warmup_steps, options_.total_steps);
  initial_step();
}

std::vector<double> WarmupLinearLR::compute_lrs() {
  const int64_t t = last_epoch(), w = options_.warmup_steps, total = options_.total_steps;
  std::vector<double> lrs;
  for (double base : base_lrs_) {
    if (t < w) {
      lrs.push_back(base * double(t) / double(w));
    } else {
      lrs.push_back(base * std::max(0.0, double(total - t) / double(total - w)));
    }
  }
  return lrs;
}

// ---- OneCycleLR ----

Optimizer& OneCycleLR::checked(Optimizer& optimizer, const OneCycleLROptions& o) {
  // Every check before the base constructor records initial_lr: a refusal leaves the optimizer as it was.
  const std::size_t groups = optimizer.param_groups().size();
  MG_CHECK(o.total_steps > 0, Error, "OneCycleLR: total_steps must be > 0, got ", o.total_steps);
  MG_CHECK(o.pct_start >= 0.0 && o.pct_start <= 1.0, Error, "OneCycleLR: pct_start must be in [0, 1], got ",
           o.pct_start);
  MG_CHECK(o.max_lr.size() == 1 || o.max_lr.size() == groups, Error, "OneCycleLR: max_lr has ",
           o.max_lr.size(), " values; expected 1 or one per param group (", groups, ")");
  for (double v : o.max_lr) MG_CHECK(v >= 0.0, Error, "OneCycleLR: max_lr must be >= 0, got ", v);
  MG_CHECK(o.div_factor > 0.0, Error, "OneCycleLR: div_factor must be > 0, got ", o.div_factor);
  MG_CHECK(o.final_div_factor > 0.0, Error, "OneCycleLR: final_div_factor must be > 0, got ", o.final_div_factor);
  if (o.cycle_momentum) {
    momentum_option(optimizer, "OneCycleLR");
    momenta_per_group(o.base_momentum, o.max_momentum, groups, "OneCycleLR");
  }
  return optimizer;
}

OneCycleLR::OneCycleLR(Optimizer& optimizer, OneCycleLROptions options)
    : LRScheduler(checked(optimizer, options), "OneCycleLR"), options_(std::move(options)) {
  const OneCycleLROptions& o = options_;
  std::vector<ParamGroup>& groups = optimizer_.param_groups();
  std::pair<std::vector<double>, std::vector<double>> momenta;
  if (o.cycle_momentum) {
    momentum_key_ = momentum_option(optimizer_, "OneCycleLR");
    momenta = momenta_per_group(o.base_momentum, o.max_momentum, groups.size(), "OneCycleLR");
  }
  const double total = double(o.total_steps);
  if (o.three_phase) {
    phases_ = {{o.pct_start * total - 1.0, "initial_lr", "max_lr", "max_momentum", "base_momentum"},
               {2.0 * o.pct_start * total - 2.0, "max_lr", "initial_lr", "base_momentum", "max_momentum"},
               {total - 1.0, "initial_lr", "min_lr", "max_momentum", "max_momentum"}};
  } else {
    phases_ = {{o.pct_start * total - 1.0, "initial_lr", "max_lr", "max_momentum", "base_momentum"},
               {total - 1.0, "max_lr", "min_lr", "base_momentum", "max_momentum"}};
  }
  // The schedule lives in the group options (restored with the optimizer's state dict).
  base_lrs_.clear();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const double max_lr = o.max_lr.size() == 1 ? o.max_lr[0] : o.max_lr[g];
    const double initial = max_lr / o.div_factor;
    groups[g].set_option("initial_lr", initial);
    groups[g].set_option("max_lr", max_lr);
    groups[g].set_option("min_lr", initial / o.final_div_factor);
    if (o.cycle_momentum) {
      groups[g].set_option(momentum_key_, momenta.second[g]);
      groups[g].set_option("max_momentum", momenta.second[g]);
      groups[g].set_option("base_momentum", momenta.first[g]);
    }
    base_lrs_.push_back(initial);
  }
  initial_step();
}

double OneCycleLR::anneal(double start, double end, double pct) const {
  if (options_.anneal_strategy == AnnealStrategy::Linear) return (end - start) * pct + start;
  const double cos_out = std::cos(std::numbers::pi * pct) + 1.0;
  return end + (start - end) / 2.0 * cos_out;
}

std::vector<double> OneCycleLR::compute_lrs() {
  const int64_t step_num = last_epoch();
  MG_CHECK(step_num <= options_.total_steps, Error, "OneCycleLR: tried to step ", step_num,
           " times; total_steps is ", options_.total_steps);
  std::vector<double> lrs;
  for (ParamGroup& g : optimizer_.param_groups()) {
    double start_step = 0.0, lr = 0.0, momentum = 0.0;
    for (std::size_t i = 0; i < phases_.size(); ++i) {
      const Phase& ph = phases_[i];
      if (double(step_num) <= ph.end_step || i + 1 == phases_.size()) {
        // A phase of length 0 (pct_start * total_steps = 1) is complete at once.
        const double len = ph.end_step - start_step;
        const double pct = len == 0.0 ? 1.0 : (double(step_num) - start_step) / len;
        lr = anneal(g.option(ph.start_lr), g.option(ph.end_lr), pct);
        if (!momentum_key_.empty()) momentum = anneal(g.option(ph.start_momentum), g.option(ph.end_momentum), pct);
        break;
      }
      start_step = ph.end_step;
    }
    lrs.push_back(lr);
    if (!momentum_key_.empty()) g.set_option(momentum_key_, momentum);
  }
  return lrs;
}

// ---- ConstantLR (chainable, as PyTorch) ----

ConstantLR::ConstantLR(Optimizer& optimizer, ConstantLROptions options)
    : LRScheduler(optimizer, "ConstantLR"), options_(options) {
  // PyTorch accepts factor 0 and then divides by it at total_iters.
  MG_CHECK(options_.factor > 0.0 && options_.factor <= 1.0, Error, "ConstantLR: factor must be in (0, 1], got ",
           options_.factor);
  MG_CHECK(options_.total_iters >= 0, Error, "ConstantLR: total_iters must be >= 0, got ", options_.total_iters);
  initial_step();
}

std::vector<double> ConstantLR::compute_lrs() {
  const int64_t t = last_epoch();
  std::vector<double> lrs;
  for (const ParamGroup& g : optimizer_.param_groups()) {
    if (t == 0) {
      lrs.push_back(g.lr() * options_.factor);
    } else if (t != options_.total_iters) {
      lrs.push_back(g.lr());
    } else {
      lrs.push_back(g.lr() * (1.0 / options_.factor));
    }
  }
  return lrs;
}

// ---- CosineAnnealingWarmRestarts (closed form in T_cur / T_i, as PyTorch) ----

CosineAnnealingWarmRestarts::CosineAnnealingWarmRestarts(Optimizer& optimizer,
                                                         CosineAnnealingWarmRestartsOptions options)
    : LRScheduler(optimizer, "CosineAnnealingWarmRestarts"), options_(options) {
  MG_CHECK(options_.t_0 > 0, Error, "CosineAnnealingWarmRestarts: t_0 must be > 0, got ", options_.t_0);
  MG_CHECK(options_.t_mult >= 1, Error, "CosineAnnealingWarmRestarts: t_mult must be >= 1, got ", options_.t_mult);
  MG_CHECK(options_.eta_min >= 0.0, Error, "CosineAnnealingWarmRestarts: eta_min must be >= 0, got ",
           options_.eta_min);
  initial_step();
}

std::vector<double> CosineAnnealingWarmRestarts::compute_lrs() {
  // PyTorch's recursion (T_cur + 1, wrapped at T_i, T_i *= t_mult) as a function of the step.
  int64_t t_cur = last_epoch(), t_i = options_.t_0;
  if (options_.t_mult == 1) {
    t_cur %= t_i;
  } else {
    while (t_cur >= t_i) {
      t_cur -= t_i;
      // Saturated: a period past 2^63 steps is longer than any run (PyTorch's ints do not overflow).
      t_i = t_i > std::numeric_limits<int64_t>::max() / options_.t_mult ? std::numeric_limits<int64_t>::max()
                                                                         : t_i * options_.t_mult;
    }
  }
  std::vector<double> lrs;
  for (double base : base_lrs_) {
    lrs.push_back(options_.eta_min +
                  (base - options_.eta_min) * (1.0 + std::cos(std::numbers::pi * double(t_cur) / double(t_i))) / 2.0);
  }
  return lrs;
}

// ---- PolynomialLR (chainable, as PyTorch) ----

PolynomialLR::PolynomialLR(Optimizer& optimizer, PolynomialLROptions options)
    : LRScheduler(optimizer, "PolynomialLR"), options_(options) {
  MG_CHECK(options_.total_iters > 0, Error, "PolynomialLR: total_iters must be > 0, got ", options_.total_iters);
  MG_CHECK(options_.power >= 0.0 && std::isfinite(options_.power), Error, "PolynomialLR: power must be finite and >= 0, got ",
           options_.power);
  initial_step();
}

std::vector<double> PolynomialLR::compute_lrs() {
  const int64_t t = last_epoch(), n = options_.total_iters;
  std::vector<double> lrs;
  for (const ParamGroup& g : optimizer_.param_groups()) {
    if (t == 0 || t > n) {
      lrs.push_back(g.lr());
    } else {
      const double f = (1.0 - double(t) / double(n)) / (1.0 - double(t - 1) / double(n));
      lrs.push_back(g.lr() * std::pow(f, options_.power));
    }
  }
  return lrs;
}

// ---- CyclicLR ----

Optimizer& CyclicLR::start_at_base_lrs(Optimizer& optimizer, const CyclicLROptions& o) {
  // Every check first: a refused schedule leaves the optimizer as it was.
  std::vector<ParamGroup>& groups = optimizer.param_groups();
  const std::vector<double> base = per_group(o.base_lr, groups.size(), "CyclicLR", "base_lr");
  per_group(o.max_lr, groups.size(), "CyclicLR", "max_lr");
  MG_CHECK(o.step_size_up > 0, Error, "CyclicLR: step_size_up must be > 0, got ", o.step_size_up);
  MG_CHECK(o.step_size_down >= 0 || o.step_size_down == -1, Error,
           "CyclicLR: step_size_down must be >= 0 (or -1: as step_size_up), got ", o.step_size_down);
  MG_CHECK(o.gamma > 0.0, Error, "CyclicLR: gamma must be > 0, got ", o.gamma);
  if (o.cycle_momentum) {
    momentum_option(optimizer, "CyclicLR");
    momenta_per_group(o.base_momentum, o.max_momentum, groups.size(), "CyclicLR");
  }
  for (std::size_t g = 0; g < groups.size(); ++g) groups[g].set_lr(base[g]);
  return optimizer;
}

CyclicLR::CyclicLR(Optimizer& optimizer, CyclicLROptions options)
    : LRScheduler(start_at_base_lrs(optimizer, options), "CyclicLR"), options_(std::move(options)) {
  CyclicLROptions& o = options_;
  std::vector<ParamGroup>& groups = optimizer_.param_groups();
  max_lrs_ = per_group(o.max_lr, groups.size(), "CyclicLR", "max_lr");
  if (o.step_size_down == -1) o.step_size_down = o.step_size_up;
  if (!o.scale_fn) o.scale_mode = o.mode == CyclicMode::ExpRange ? ScaleMode::Iterations : ScaleMode::Cycle;
  if (o.cycle_momentum) {
    momentum_key_ = momentum_option(optimizer_, "CyclicLR");
    std::tie(base_momenta_, max_momenta_) = momenta_per_group(o.base_momentum, o.max_momentum, groups.size(), "CyclicLR");
  }
  // As PyTorch: every group started at its base lr before the base constructor recorded it as
  // "initial_lr" (a group that had one keeps it), and starts at the top momentum.
  for (std::size_t g = 0; g < groups.size(); ++g) {
    if (o.cycle_momentum) {
      groups[g].set_option(momentum_key_, max_momenta_[g]);
      groups[g].set_option("max_momentum", max_momenta_[g]);
      groups[g].set_option("base_momentum", base_momenta_[g]);
    }
  }
  base_lrs_ = per_group(o.base_lr, groups.size(), "CyclicLR", "base_lr");
  initial_step();
}

double CyclicLR::scale(double cycle, double t) const {
  const double x = options_.scale_mode == ScaleMode::Cycle ? cycle : t;
  if (options_.scale_fn) return options_.scale_fn(x);
  switch (options_.mode) {
    case CyclicMode::Triangular: return 1.0;
    case CyclicMode::Triangular2: return 1.0 / std::pow(2.0, x - 1.0);
    case CyclicMode::ExpRange: return std::pow(options_.gamma, x);
  }
  return 1.0;
}

std::vector<double> CyclicLR::compute_lrs() {
  const double t = double(last_epoch());
  const double total = double(options_.step_size_up + options_.step_size_down);
  const double ratio = double(options_.step_size_up) / total;
  const double cycle = std::floor(1.0 + t / total);
  const double x = 1.0 + t / total - cycle;
  const double f = x <= ratio ? x / ratio : (x - 1.0) / (ratio - 1.0);
  const double s = scale(cycle, t);
  std::vector<double> lrs;
  std::vector<ParamGroup>& groups = optimizer_.param_groups();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    lrs.push_back(base_lrs_[g] + (max_lrs_[g] - base_lrs_[g]) * f * s);
    if (!momentum_key_.empty()) {
      const double height = (max_momenta_[g] - base_momenta_[g]) * f;
      groups[g].set_option(momentum_key_, max_momenta_[g] - height * s);
    }
  }
  return lrs;
}

// ---- ChainedScheduler ----

// ---- CompositeScheduler ----

CompositeScheduler::CompositeScheduler(Optimizer& optimizer, std::string name,
                                       std::vector<std::unique_ptr<LRScheduler>> schedulers)
    : LRScheduler(optimizer, std::move(name)), schedulers_(std::move(schedulers)) {
  MG_CHECK(!schedulers_.empty(), Error, this->name(), ": expected at least one scheduler, got none");
  for (std::size_t i = 0; i < schedulers_.size(); ++i) {
    MG_CHECK(schedulers_[i] != nullptr, Error, this->name(), ": scheduler ", i, " is null");
    MG_CHECK(&schedulers_[i]->optimizer() == &optimizer, Error, this->name(), ": scheduler ", i, " (",
             schedulers_[i]->name(), ") belongs to another optimizer");
  }
}

void CompositeScheduler::save_children(StateDict& s) const {
  for (std::size_t i = 0; i < schedulers_.size(); ++i) {
    const StateDict part = schedulers_[i]->state_dict();
    const std::string prefix = "schedulers." + std::to_string(i) + ".";
    add_prefixed(s, prefix, part);
    for (const auto& [k, v] : part.strings) s.strings[prefix + k] = v;
  }
}

std::vector<StateDict> CompositeScheduler::child_parts(const StateDict& s) const {
  std::vector<StateDict> parts;
  for (std::size_t i = 0; i < schedulers_.size(); ++i) {
    const std::string prefix = "schedulers." + std::to_string(i) + ".";
    StateDict part = prefixed_part(s, prefix);
    for (const auto& [k, v] : s.strings) {
      if (k.rfind(prefix, 0) == 0) part.strings[k.substr(prefix.size())] = v;
    }
    const auto kind = part.strings.find("scheduler");
    MG_CHECK(kind != part.strings.end(), Error, name(), ": load_state_dict: the state has no scheduler ", i, " (\"",
             prefix, "scheduler\")");
    MG_CHECK(kind->second == schedulers_[i]->name(), Error, name(), ": load_state_dict: scheduler ", i,
             " of the state is a ", kind->second, ", not ", schedulers_[i]->name());
    parts.push_back(std::move(part));
  }
  return parts;
}

void CompositeScheduler::check_children(const StateDict& s) const {
  const std::vector<StateDict> parts = child_parts(s);
  for (std::size_t i = 0; i < schedulers_.size(); ++i) schedulers_[i]->check_state_dict(parts[i]);
}

// Called by load_state_dict after check_children accepted every part.
void CompositeScheduler::load_children(const StateDict& s) {
  const std::vector<StateDict> parts = child_parts(s);
  for (std::size_t i = 0; i < schedulers_.size(); ++i) schedulers_[i]->load_state_dict(parts[i]);
}

// ---- ChainedScheduler ----

ChainedScheduler::ChainedScheduler(Optimizer& optimizer, std::vector<std::unique_ptr<LRScheduler>> schedulers)
    : CompositeScheduler(optimizer, "ChainedScheduler", std::move(schedulers)) {
  initial_step();
}

void ChainedScheduler::restart_parts() {
  for (const auto& s : schedulers_) s->rewind();
}

std::vector<double> ChainedScheduler::compute_lrs() {
  // Step 0 is each child's own construction, already done.
  if (last_epoch() > 0) {
    for (const auto& s : schedulers_) s->step();
  }
  std::vector<double> lrs;
  for (const ParamGroup& g : optimizer_.param_groups()) lrs.push_back(g.lr());
  return lrs;
}


// ---- SequentialLR ----

SequentialLR::SequentialLR(Optimizer& optimizer, std::vector<std::unique_ptr<LRScheduler>> schedulers,
                           std::vector<int64_t> milestones)
    : CompositeScheduler(optimizer, "SequentialLR", std::move(schedulers)), milestones_(std::move(milestones)) {
  MG_CHECK(milestones_.size() + 1 == schedulers_.size(), Error, "SequentialLR: expected one milestone fewer than the ",
           schedulers_.size(), " schedulers, got ", milestones_.size());
  for (std::size_t i = 0; i < milestones_.size(); ++i) {
    MG_CHECK(milestones_[i] > 0 && (i == 0 || milestones_[i] > milestones_[i - 1]), Error,
             "SequentialLR: milestones must be positive and strictly increasing, got ", milestones_[i], " at ", i);
  }
  // PyTorch's SequentialLR starts from the groups' initial_lr as it is now: a later part such as
  // OneCycleLR rewrote it when it was built (max_lr / div_factor), so the first part restarts from
  // that value, not from the lr it saw at its own construction.
  LRScheduler& first = *schedulers_.front();
  const std::vector<ParamGroup>& groups = optimizer.param_groups();
  for (std::size_t g = 0; g < groups.size() && g < first.base_lrs_.size(); ++g)
    first.base_lrs_[g] = groups[g].option("initial_lr");
  initial_step();  // restarts the first scheduler: the lrs its own construction changed are reset
}

std::vector<double> SequentialLR::compute_lrs() {
  const int64_t t = last_epoch();
  const std::size_t idx = std::size_t(std::upper_bound(milestones_.begin(), milestones_.end(), t) - milestones_.begin());
  LRScheduler& s = *schedulers_[idx];
  if (t == 0 || (idx > 0 && milestones_[idx - 1] == t && s.restarts_from_initial_lr())) {
    s.restart();
  } else if (idx > 0 && milestones_[idx - 1] == t) {
    s.rewind();  // PyTorch's get_lr at epoch 0 on the current lrs
  } else {
    s.step();
  }
  return s.get_last_lr();
}


}  // namespace mg::optim
