#include "mixgrad/optim/reduce_lr_on_plateau.h"

#include <algorithm>
#include <limits>
#include <string>

namespace mg::optim {

ReduceLROnPlateau::ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options)
    : optimizer_(optimizer), options_(std::move(options)) {
  const char* who = "ReduceLROnPlateau";
  MG_CHECK(options_.factor >= 0.0 && options_.factor < 1.0, Error, who, ": factor must be in [0, 1), got ", options_.factor);
  MG_CHECK(options_.patience >= 0, Error, who, ": patience must be >= 0, got ", options_.patience);
  MG_CHECK(options_.threshold >= 0.0, Error, who, ": threshold must be >= 0, got ", options_.threshold);
  MG_CHECK(options_.cooldown >= 0, Error, who, ": cooldown must be >= 0, got ", options_.cooldown);
  MG_CHECK(options_.eps >= 0.0, Error, who, ": eps must be >= 0, got ", options_.eps);
  const std::size_t groups = optimizer_.param_groups().size();
  MG_CHECK(options_.min_lr.size() <= 1 || options_.min_lr.size() == groups, Error, who,
           ": min_lr needs one value or one per param group (", groups, "), got ", options_.min_lr.size());
  for (std::size_t g = 0; g < groups; ++g) {
    const double m = options_.min_lr.empty() ? 0.0 : options_.min_lr.size() == 1 ? options_.min_lr[0] : options_.min_lr[g];
    MG_CHECK(m >= 0.0, Error, who, ": min_lr must be >= 0, got ", m);
    min_lrs_.push_back(m);
  }
  best_ = options_.mode == PlateauMode::Min ? std::numeric_limits<double>::infinity()
                                            : -std::numeric_limits<double>::infinity();
  for (const ParamGroup& g : optimizer_.param_groups()) last_lr_.push_back(g.lr());
}

bool ReduceLROnPlateau::is_better(double a) const {
  const double t = options_.threshold;
  const bool rel = options_.threshold_mode == ThresholdMode::Relative;
  if (options_.mode == PlateauMode::Min) return rel ? a < best_ * (1.0 - t) : a < best_ - t;
  return rel ? a > best_ * (t + 1.0) : a > best_ + t;
}

void ReduceLROnPlateau::step(double metric) {
  std::vector<ParamGroup>& groups = optimizer_.param_groups();
  // Groups added since (add_param_group) take the single min_lr, as PyTorch extends it; a per-group
  // list cannot say what a new group's floor is.
  if (groups.size() > min_lrs_.size() && options_.min_lr.size() <= 1) {
    min_lrs_.resize(groups.size(), options_.min_lr.empty() ? 0.0 : options_.min_lr[0]);
  }
  MG_CHECK(groups.size() == min_lrs_.size(), Error, "ReduceLROnPlateau: the optimizer has ", groups.size(),
           " param groups but the scheduler was created for ", min_lrs_.size(),
           " with one min_lr per group\n  hint: give min_lr one value, or make the scheduler after add_param_group");
  ++last_epoch_;
  if (is_better(metric)) {
    best_ = metric;
    num_bad_epochs_ = 0;
  } else {
    ++num_bad_epochs_;
  }
  if (cooldown_counter_ > 0) {  // in cooldown: bad steps do not count
    --cooldown_counter_;
    num_bad_epochs_ = 0;
  }
  if (num_bad_epochs_ > options_.patience) {
    for (std::size_t g = 0; g < groups.size(); ++g) {
      const double old_lr = groups[g].lr();
      const double new_lr = std::max(old_lr * options_.factor, min_lrs_[g]);
      if (old_lr - new_lr > options_.eps) groups[g].set_lr(new_lr);
    }
    cooldown_counter_ = options_.cooldown;
    num_bad_epochs_ = 0;
  }
  last_lr_.clear();
  for (const ParamGroup& g : groups) last_lr_.push_back(g.lr());
}

StateDict ReduceLROnPlateau::state_dict() const {
  StateDict s;
  s.strings["scheduler"] = "ReduceLROnPlateau";
  s.floats["best"] = best_;
  s.ints["last_epoch"] = last_epoch_;
  s.ints["num_bad_epochs"] = num_bad_epochs_;
  s.ints["cooldown_counter"] = cooldown_counter_;
  s.ints["num_groups"] = int64_t(min_lrs_.size());
  for (std::size_t g = 0; g < last_lr_.size(); ++g) s.floats["last_lr." + std::to_string(g)] = last_lr_[g];
  return s;
}

void ReduceLROnPlateau::load_state_dict(const StateDict& s) {
  const char* owner = "ReduceLROnPlateau: load_state_dict";
  const std::string& name = s.string_at(owner, "scheduler");
  MG_CHECK(name == "ReduceLROnPlateau", Error, owner, ": the state belongs to a ", name, " scheduler");
  MG_CHECK(s.int_at(owner, "num_groups") == int64_t(min_lrs_.size()), Error, owner, ": the state has ",
           s.int_at(owner, "num_groups"), " param groups but the scheduler has ", min_lrs_.size());
  const int64_t bad = s.int_at(owner, "num_bad_epochs"), cool = s.int_at(owner, "cooldown_counter"),
                epoch = s.int_at(owner, "last_epoch");
  MG_CHECK(bad >= 0 && cool >= 0 && epoch >= 0, Error, owner, ": the counters must be >= 0, got num_bad_epochs ", bad,
           ", cooldown_counter ", cool, ", last_epoch ", epoch);
  // The last lrs as saved (PyTorch's _last_lr), so get_last_lr() is right whether the optimizer's
  // state is loaded before or after; a state from before they were saved takes the optimizer's.
  std::vector<double> last;
  const auto& groups = optimizer_.param_groups();
  for (std::size_t g = 0; g < groups.size(); ++g) {
    const std::string key = "last_lr." + std::to_string(g);
    last.push_back(s.floats.count(key) ? s.float_at(owner, key) : groups[g].lr());
  }
  best_ = s.float_at(owner, "best");
  num_bad_epochs_ = bad;
  cooldown_counter_ = cool;
  last_epoch_ = epoch;
  last_lr_ = std::move(last);
}

}  // namespace mg::optim
