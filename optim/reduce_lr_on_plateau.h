// ReduceLROnPlateau (PyTorch's): divides the lr when a watched metric (a validation loss, say) has
// stopped improving. Not an LRScheduler: it steps on a metric, not on a count, once per evaluation.
//
//   optim::ReduceLROnPlateau plateau(opt, {.factor = 0.5, .patience = 2});
//   for (epoch ...) { train(); plateau.step(validation_loss); }
//
// Per step: the metric is better than the best so far when it beats it by more than the threshold
// (rel: best * (1 -/+ threshold); abs: best -/+ threshold); otherwise the step is bad. After more
// than `patience` bad steps in a row, every group's lr becomes max(lr * factor, min_lr) (a change
// of at most eps is not made), and the next `cooldown` steps count as good. The same rules as
// PyTorch's, so the same lr sequence for the same metrics (tests/optim/test_lr_scheduler.cpp).
#pragma once
#include <cstdint>
#include <vector>

#include "mixgrad/core/state_dict.h"
#include "mixgrad/optim/optimizer.h"

namespace mg::optim {

enum class PlateauMode { Min, Max };          // the metric should go down (a loss) or up (an accuracy)
enum class ThresholdMode { Relative, Absolute };

struct ReduceLROnPlateauOptions {
  PlateauMode mode = PlateauMode::Min;
  double factor = 0.1;     // in [0, 1)
  int64_t patience = 10;   // >= 0
  double threshold = 1e-4; // >= 0
  ThresholdMode threshold_mode = ThresholdMode::Relative;
  int64_t cooldown = 0;        // >= 0
  std::vector<double> min_lr;  // empty: 0; one value for all groups, or one per group (>= 0)
  double eps = 1e-8;           // >= 0
};

class ReduceLROnPlateau {
 public:
  ReduceLROnPlateau(Optimizer& optimizer, ReduceLROnPlateauOptions options = {});
  // Reports this evaluation's metric (finite or not: NaN is never better) and reduces the lrs when
  // it is time.
  void step(double metric);
  // The lr of every group after the last step (or at construction).
  const std::vector<double>& get_last_lr() const { return last_lr_; }
  double best() const { return best_; }
  int64_t num_bad_epochs() const { return num_bad_epochs_; }
  int64_t last_epoch() const { return last_epoch_; }

  // strings "scheduler"; floats "best"; ints "last_epoch", "num_bad_epochs", "cooldown_counter",
  // "num_groups". The options are not stored: construct with the same ones, then load.
  StateDict state_dict() const;
  void load_state_dict(const StateDict& state);

 private:
  bool is_better(double metric) const;

  Optimizer& optimizer_;
  ReduceLROnPlateauOptions options_;
  std::vector<double> min_lrs_;
  double best_;
  int64_t num_bad_epochs_ = 0;
  int64_t cooldown_counter_ = 0;
  int64_t last_epoch_ = 0;
  std::vector<double> last_lr_;
};

}  // namespace mg::optim
