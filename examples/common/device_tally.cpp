#include "examples/common/device_tally.h"

#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "ops/ops.h"

namespace mg::example {

DeviceTally::DeviceTally(Device device)
    : loss_sum_(zeros({}, {.dtype = DType::F64, .device = device})),
      correct_(zeros({}, {.dtype = DType::I64, .device = device})),
      last_(zeros({}, {.dtype = DType::F64, .device = device})) {}

void DeviceTally::reset(double loss_sum, int64_t correct) {
  NoGradGuard no_grad;
  loss_sum_.fill_(loss_sum);
  correct_.fill_(double(correct));  // exact: counts stay far below 2^53
  steps_ = 0;
  predictions_ = 0;
}

void DeviceTally::add(const Tensor& loss, const Tensor& correct, int64_t examples, int64_t predictions) {
  NoGradGuard no_grad;
  loss_sum_.add_(reshape(loss, {}).to(DType::F64), double(examples));  // loss_sum += examples * loss, in f64
  correct_.add_(reshape(correct, {}).to(DType::I64));
  last_.copy_(reshape(loss, {}));  // widened exactly
  ++steps_;
  predictions_ += predictions < 0 ? examples : predictions;
}

DeviceTally::Totals DeviceTally::read() {
  NoGradGuard no_grad;
  Totals t;
  t.loss_sum = loss_sum_.item<double>();  // the lazy read: one synchronisation
  t.correct = correct_.item<int64_t>();
  t.last_loss = last_.item<double>();
  t.steps = steps_;
  t.predictions = predictions_;
  steps_ = 0;
  predictions_ = 0;
  return t;
}

}  // namespace mg::example
