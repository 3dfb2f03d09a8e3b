#include "mixgrad/optim/swa_lr.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "mixgrad/core/error.h"

namespace mg::optim {

Optimizer& SWALR::prepared(Optimizer& optimizer, const SWALROptions& o) {
  auto& groups = optimizer.param_groups();
  MG_CHECK(o.swa_lr.size() == 1 || o.swa_lr.size() == groups.size(), Error,
           "SWALR: expected one swa_lr or one per param group (", groups.size(), "), got ", o.swa_lr.size());
  for (double lr : o.swa_lr) MG_CHECK(lr >= 0.0, Error, "SWALR: swa_lr must be >= 0, got ", lr);
  MG_CHECK(o.anneal_epochs >= 0, Error, "SWALR: anneal_epochs must be >= 0, got ", o.anneal_epochs);
  for (std::size_t g = 0; g < groups.size(); ++g) groups[g].set_option("swa_lr", o.swa_lr[o.swa_lr.size() == 1 ? 0 : g]);
  return optimizer;
}

SWALR::SWALR(Optimizer& optimizer, SWALROptions options)
    : LRScheduler(prepared(optimizer, options), "SWALR"), options_(std::move(options)) {
  initial_step();
}

double SWALR::anneal(double t) const {
  return options_.anneal_strategy == AnnealStrategy::Linear ? t : (1.0 - std::cos(std::numbers::pi * t)) / 2.0;
}

std::vector<double> SWALR::compute_lrs() {
  // PyTorch's recursion, term for term: recover the lr the ramp started from out of the current
  // one and the previous step's mixing fraction, then mix it with swa_lr at this step's fraction.
  int64_t step = last_epoch();
  if (options_.anneal_epochs == 0) step = std::max<int64_t>(1, step);
  const double span = double(std::max<int64_t>(1, options_.anneal_epochs));
  const double prev_alpha = anneal(std::clamp(double(step - 1) / span, 0.0, 1.0));
  const double alpha = anneal(std::clamp(double(step) / span, 0.0, 1.0));
  std::vector<double> lrs;
  for (const ParamGroup& g : optimizer_.param_groups()) {
    const double swa_lr = g.option("swa_lr");
    const double start = prev_alpha == 1.0 ? swa_lr : (g.lr() - prev_alpha * swa_lr) / (1.0 - prev_alpha);
    lrs.push_back(swa_lr * alpha + start * (1.0 - alpha));
  }
  return lrs;
}

}  // namespace mg::optim
