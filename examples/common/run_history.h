// The curves of a training run — training loss and loss scale at every logged step, steps whose
// update was skipped (gradient overflow), evaluation accuracy — kept for the SVG plot and stored
// in checkpoints, so a resumed run's plot shows the whole run.
//
//   RunHistory h;
//   h.add_step(step, loss, scale, skipped);
//   h.add_eval(step, accuracy);
//   write_svg("run.svg", h.figure("train_resnet O1 bf16", "test accuracy"));
//   states.push_back({"history", h.state()});   // and h.load(ck.state("history")) on resume
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "core/state_dict.h"
#include "examples/common/svg_plot.h"

namespace mg::example {

struct RunHistory {
  std::vector<double> step, loss, scale;   // one entry per logged training step
  std::vector<double> skipped;             // steps whose update was skipped (inf/NaN gradients)
  std::vector<double> eval_step, eval_metric;

  void add_step(int64_t at, double step_loss, double loss_scale, bool was_skipped);
  void add_eval(int64_t at, double metric);

  // Three panels: training loss (skipped steps marked), the evaluation metric, the loss scale on
  // a log2 axis (skipped steps marked).
  Figure figure(const std::string& title, const std::string& eval_name) const;

  // As f64 tensors "step", "loss", "scale", "skipped", "eval_step", "eval_metric".
  StateDict state() const;
  // Replaces the curves; an mg::Error when a tensor is missing or the lengths disagree.
  void load(const StateDict& state);
};

}  // namespace mg::example
