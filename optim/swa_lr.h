// SWALR: the learning-rate schedule of stochastic weight averaging (Izmailov et al. 2018), as
// torch.optim.swa_utils.SWALR: over anneal_epochs steps each group's lr moves from where it is to
// its swa_lr (a cosine or linear ramp), then stays there. Written in PyTorch's chainable form, so
// it takes over from another scheduler's lr mid-training (also at its milestone inside a
// SequentialLR, as PyTorch's). Build it when SWA starts: its constructor's step 0 already moves the
// lr when anneal_epochs is 0. It records "swa_lr" in every group's
// options (saved with the optimizer's state dict); the rest of its state is the base's.
//
//   optim::SWALR swa_sched(opt, {.swa_lr = {0.05}, .anneal_epochs = 5});
//   nn::AveragedModel<Net> swa(std::make_shared<Net>(), *net);        // nn/averaged_model.h
//   for (int epoch = 0; epoch < epochs; ++epoch) {
//     train_one_epoch();
//     if (epoch >= swa_start) { swa.update_parameters(*net); swa_sched.step(); } else { sched.step(); }
//   }
//   nn::update_bn(*swa.module(), [&] { ... feed the training batches ... });
#pragma once
#include <vector>

#include "mixgrad/optim/lr_scheduler.h"

namespace mg::optim {

struct SWALROptions {
  std::vector<double> swa_lr;  // one value for all groups, or one per group; each >= 0
  int64_t anneal_epochs = 10;  // >= 0 (0: swa_lr at once, from the constructor's step 0 on, as PyTorch's)
  AnnealStrategy anneal_strategy = AnnealStrategy::Cos;
};

class SWALR final : public LRScheduler {
 public:
  SWALR(Optimizer& optimizer, SWALROptions options);

 protected:
  std::vector<double> compute_lrs() override;
  bool restarts_from_initial_lr() const override { return false; }

 private:
  // The fraction of the ramp done at t in [0, 1]: t (linear) or (1 - cos(pi t)) / 2.
  double anneal(double t) const;
  // Checks the options (a named error) and writes each group's "swa_lr", before the base
  // constructor records initial_lr: a refusal leaves the optimizer as it was.
  static Optimizer& prepared(Optimizer& optimizer, const SWALROptions& options);

  SWALROptions options_;
};

}  // namespace mg::optim
