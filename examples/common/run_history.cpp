#include "examples/common/run_history.h"

#include "core/error.h"
#include "core/factory.h"
#include "ops/ops.h"

namespace mg::example {
namespace {

Tensor to_tensor(const std::vector<double>& v) {
  Tensor t = empty({int64_t(v.size())}, {.dtype = DType::F64});
  std::copy(v.begin(), v.end(), t.data<double>());
  return t;
}

std::vector<double> from_tensor(const StateDict& s, const std::string& name) {
  for (const auto& [key, t] : s.tensors) {
    if (key != name) continue;
    MG_CHECK(t.dim() == 1 && t.dtype() == DType::F64, Error, "run history: '", name, "' must be an f64 vector, got ",
             describe(t));
    const Tensor c = contiguous(t);
    return std::vector<double>(c.data<double>(), c.data<double>() + c.numel());
  }
  MG_THROW(Error, "run history: the checkpoint has no '", name, "' curve");
}

}  // namespace

void RunHistory::add_step(int64_t at, double step_loss, double loss_scale, bool was_skipped) {
  step.push_back(double(at));
  loss.push_back(step_loss);
  scale.push_back(loss_scale);
  if (was_skipped) skipped.push_back(double(at));
}

void RunHistory::add_eval(int64_t at, double metric) {
  eval_step.push_back(double(at));
  eval_metric.push_back(metric);
}

Figure RunHistory::figure(const std::string& title, const std::string& eval_name) const {
  Figure fig{.title = title};
  const Markers skips{.name = "skipped step", .x = skipped};
  fig.panels.push_back({.title = "training loss", .series = {{.name = "loss", .x = step, .y = loss}}, .markers = {skips}});
  fig.panels.push_back({.title = eval_name, .series = {{.name = eval_name, .x = eval_step, .y = eval_metric, .points = true}}});
  fig.panels.push_back({.title = "loss scale",
                        .y_scale = AxisScale::Log2,
                        .series = {{.name = "loss scale", .x = step, .y = scale}},
                        .markers = {skips}});
  return fig;
}

StateDict RunHistory::state() const {
  StateDict s;
  s.tensors = {{"step", to_tensor(step)},       {"loss", to_tensor(loss)},          {"scale", to_tensor(scale)},
               {"skipped", to_tensor(skipped)}, {"eval_step", to_tensor(eval_step)}, {"eval_metric", to_tensor(eval_metric)}};
  return s;
}

void RunHistory::load(const StateDict& s) {
  RunHistory h;
  h.step = from_tensor(s, "step");
  h.loss = from_tensor(s, "loss");
  h.scale = from_tensor(s, "scale");
  h.skipped = from_tensor(s, "skipped");
  h.eval_step = from_tensor(s, "eval_step");
  h.eval_metric = from_tensor(s, "eval_metric");
  MG_CHECK(h.loss.size() == h.step.size() && h.scale.size() == h.step.size() && h.eval_metric.size() == h.eval_step.size(),
           Error, "run history: curves of different lengths in the checkpoint");
  *this = std::move(h);
}

}  // namespace mg::example
