// DeviceTally: a training loop's per-step results (loss, right predictions) summed on the device
// and read by the host only at logging points, so a GPU step never waits for the host between
// them (--read-metrics log, and every --cuda-graph run: a captured step must not read anything
// back). On the CPU the same sums cost a few tiny ops.
//
//   DeviceTally tally(device);
//   tally.reset(0, 0);                                   // at the epoch's start
//   tally.add(loss, correct, batch_size);                // after each step: asynchronous
//   if (log_now) { const DeviceTally::Totals t = tally.read(); ... }   // one synchronisation
#pragma once
#include <cstdint>

#include "core/device.h"
#include "core/tensor.h"

namespace mg::example {

// Running sums of per-step results on the device, read at logging points only. The sums run over
// the epoch from reset(), in step order whatever the logging points, so a run stopped and resumed
// (reset with the saved sums) adds exactly as a straight one.
class DeviceTally {
 public:
  explicit DeviceTally(Device device);
  // Sets the running sums: 0 at an epoch's start, the saved ones when a run resumes mid-epoch.
  void reset(double loss_sum, int64_t correct);
  // loss: one-element floating (the step's mean loss); correct: one-element integer count.
  // Adds loss * examples (in f64) and correct on the device (asynchronous), counts the
  // `predictions` correct is over (on the host; the examples when not given) and keeps `loss` as the
  // last one.
  void add(const Tensor& loss, const Tensor& correct, int64_t examples, int64_t predictions = -1);
  struct Totals {
    double loss_sum = 0;   // sum of loss * examples since reset()
    int64_t correct = 0;   // sum of correct since reset()
    double last_loss = 0;  // the last step's loss
    int64_t steps = 0;     // add() calls since the previous read()
    int64_t predictions = 0;  // the predictions those calls counted
  };
  // Reads the sums (one synchronisation).
  Totals read();

 private:
  Tensor loss_sum_;  // [] f64
  Tensor correct_;   // [] i64
  Tensor last_;      // [] f64
  int64_t steps_ = 0;
  int64_t predictions_ = 0;
};

}  // namespace mg::example
