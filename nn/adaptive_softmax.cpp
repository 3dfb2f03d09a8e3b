#include "mixgrad/nn/adaptive_softmax.h"

#include <cmath>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/error.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/ops/arg_checks.h"
#include "mixgrad/ops/logical.h"
#include "mixgrad/ops/loss.h"
#include "mixgrad/ops/nonzero.h"
#include "mixgrad/ops/ops.h"

namespace mg::nn {

AdaptiveLogSoftmaxWithLoss::AdaptiveLogSoftmaxWithLoss(Options o) : Module("AdaptiveLogSoftmaxWithLoss"), options_(o) {
  MG_CHECK(o.in > 0, Error, "AdaptiveLogSoftmaxWithLoss: in must be positive, got ", o.in);
  bool sorted = !o.cutoffs.empty();
  for (size_t i = 0; i < o.cutoffs.size(); ++i) {
    sorted = sorted && o.cutoffs[i] >= 1 && o.cutoffs[i] <= o.n_classes - 1 && (i == 0 || o.cutoffs[i] > o.cutoffs[i - 1]);
  }
  MG_CHECK(sorted, Error, "AdaptiveLogSoftmaxWithLoss: cutoffs must be unique, increasing and each in [1, n_classes - 1] = [1, ",
           o.n_classes - 1, "], got ", Shape(o.cutoffs), "\n  hint: e.g. .cutoffs = {2000, 10000} for n_classes = 50000");
  MG_CHECK(std::isfinite(o.div_value) && o.div_value > 0, Error,
           "AdaptiveLogSoftmaxWithLoss: div_value must be finite and > 0, got ", o.div_value);
  shortlist_ = o.cutoffs[0];
  const int64_t clusters = int64_t(o.cutoffs.size());
  head = register_module<Linear>("head", {.in = o.in, .out = shortlist_ + clusters, .bias = o.head_bias});
  tail = register_module("tail", std::make_shared<ModuleList>());
  for (int64_t i = 0; i < clusters; ++i) {
    // PyTorch's int(in // div_value ** (i + 1)).
    const int64_t hidden = int64_t(std::floor(double(o.in) / std::pow(o.div_value, double(i + 1))));
    MG_CHECK(hidden >= 1, Error, "AdaptiveLogSoftmaxWithLoss: cluster ", i, " would project ", o.in, " features to ",
             hidden, " (in / div_value^", i + 1, ")\n  hint: lower div_value or use fewer cutoffs");
    const int64_t end = i + 1 < clusters ? o.cutoffs[i + 1] : o.n_classes;
    tail->push_back(std::make_shared<Sequential>(std::vector<std::shared_ptr<UnaryModule>>{
        std::make_shared<Linear>(LinearOptions{.in = o.in, .out = hidden, .bias = false}),
        std::make_shared<Linear>(LinearOptions{.in = hidden, .out = end - o.cutoffs[i], .bias = false})}));
  }
}

void AdaptiveLogSoftmaxWithLoss::reset_parameters() {
  head->reset_parameters();
  for (size_t i = 0; i < tail->size(); ++i) {
    for (const auto& layer : (*tail)[int64_t(i)]->children()) std::dynamic_pointer_cast<Linear>(layer)->reset_parameters();
  }
}

Tensor AdaptiveLogSoftmaxWithLoss::batched(const Tensor& input, bool& unbatched, const char* method) const {
  MG_CHECK(input.defined() && (input.dim() == 1 || input.dim() == 2) && input.size(-1) == options_.in, ShapeError,
           layer_name(), ".", method, ": expected input [N, ", options_.in, "] or [", options_.in, "], got ",
           input.defined() ? describe(input) : "undefined");
  unbatched = input.dim() == 1;
  return unbatched ? input.unsqueeze(0) : input;
}

AdaptiveLogSoftmaxOutput AdaptiveLogSoftmaxWithLoss::forward(const Tensor& input, const Tensor& target) {
  auto scope = module_scope(*this);
  bool unbatched = false;
  const Tensor x = batched(input, unbatched, "forward");
  MG_CHECK(target.defined() && (target.dtype() == DType::I64 || target.dtype() == DType::I32), DTypeError,
           layer_name(), ": expected an i64 or i32 target, got ", target.defined() ? describe(target) : "undefined");
  MG_CHECK(target.dim() == input.dim() - 1 && (unbatched || target.size(0) == input.size(0)), ShapeError,
           layer_name(), ": expected a target [", unbatched ? "" : std::to_string(input.size(0)), "] for input ",
           describe(input), ", got ", describe(target));
  MG_CHECK(target.device() == input.device(), DeviceError, layer_name(), ": input ", describe(input), " and target ",
           describe(target), " are on different devices");
  const Tensor t = target.reshape({-1}).to(DType::I64);  // [N]
  const int64_t n = t.size(0), classes = options_.n_classes;
  if (n > 0) {
    const auto [lo, hi] = index_bounds(t);  // one device read
    MG_CHECK(lo >= 0 && hi < classes, IndexError, layer_name(), ": target values must be in [0, ", classes - 1,
             "], found values in [", lo, ", ", hi, "]");
  }
  // The head's column for each row: its class in the shortlist, else its cluster's logit.
  Tensor head_column = t;
  Tensor output = zeros({n}, {.dtype = x.dtype(), .device = x.device()});
  const int64_t clusters = int64_t(tail->size());
  for (int64_t i = 0; i < clusters; ++i) {
    const int64_t low = options_.cutoffs[size_t(i)];
    const int64_t high = i + 1 < clusters ? options_.cutoffs[size_t(i + 1)] : classes;
    const Tensor in_cluster = logical_and(ge(t, scalar_like(double(low), t)), lt(t, scalar_like(double(high), t)));
    head_column = where(in_cluster, scalar_like(double(shortlist_ + i), t), head_column);
    const Tensor rows = nonzero(in_cluster).reshape({-1});  // a host read of the count, as PyTorch's
    if (rows.numel() == 0) continue;
    // Only the rows of this cluster run its projection.
    const Tensor logits = (*(*tail).at<Sequential>(i))(index_select(x, 0, rows));
    const Tensor local = (index_select(t, 0, rows) - scalar_like(double(low), t)).unsqueeze(1);
    const Tensor logprob = gather(log_softmax(logits, 1), 1, local).squeeze(1);
    output = scatter_add(output, 0, rows, logprob.to(output.dtype()));  // each row in one cluster: a write
  }
  const Tensor head_logprob = log_softmax((*head)(x), 1);
  output = gather(head_logprob, 1, head_column.unsqueeze(1)).squeeze(1) + output.to(head_logprob.dtype());
  const Tensor loss = mean(neg(output));
  return {unbatched ? output.squeeze(0) : output, loss};
}

Tensor AdaptiveLogSoftmaxWithLoss::log_prob(const Tensor& input) {
  auto scope = module_scope(*this);
  bool unbatched = false;
  const Tensor x = batched(input, unbatched, "log_prob");
  const Tensor head_logprob = log_softmax((*head)(x), 1);
  Tensors parts{head_logprob.slice(1, 0, shortlist_)};
  for (int64_t i = 0; i < int64_t(tail->size()); ++i) {
    const Tensor cluster = log_softmax((*(*tail).at<Sequential>(i))(x), 1);
    parts.push_back(cluster.to(head_logprob.dtype()) + head_logprob.slice(1, shortlist_ + i, shortlist_ + i + 1));
  }
  const Tensor out = cat(parts, 1);
  return unbatched ? out.squeeze(0) : out;
}

Tensor AdaptiveLogSoftmaxWithLoss::predict(const Tensor& input) {
  NoGradGuard no_grad;
  const Tensor lp = log_prob(input);
  return argmax(lp, lp.dim() - 1);
}

std::string AdaptiveLogSoftmaxWithLoss::extra_repr() const {
  const Options& o = options_;
  return str_cat("in_features=", o.in, ", n_classes=", o.n_classes, ", cutoffs=", Shape(o.cutoffs),
                 ", div_value=", o.div_value, o.head_bias ? ", head_bias=true" : "");
}

}  // namespace mg::nn
