// What a training step ran, seen through the op observer (core/op_observer.h): per op name and
// direction, how many calls, how many produced the low-precision dtype, their GEMM/conv flops,
// and (when timed) the wall time attributed to each. bench_amp's "level did nothing" detector
// reads the counts (level_check.h); --profile reads the times.
//
// Decision: the time of an op is the wall time from the previous op event on the recording
// thread (or the step's start) to its own event. Events arrive as ops finish and are never
// nested (an op's inner ops report first, the op itself only its remainder), so the times of
// one step add up to the step exactly; what follows the last op (the optimizer's own loop code)
// is "(between ops)", unless the caller names the non-op phases of the step (phase()). The observer costs a clock read per op, so profiled steps are never the
// timed ones.
//
//   mg::bench::OpRecorder rec({.timed = true});
//   rec.begin_step();  ... one training step ...  rec.end_step();
//   for (const auto& [key, s] : rec.stats()) ... s.calls, s.seconds, s.low_outputs ...
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <thread>

#include "core/dtype.h"
#include "core/op_observer.h"

namespace mg::bench {

// One op type in one direction: "linear" (forward) or "linear_backward" (a backward node).
struct OpKey {
  std::string op;
  bool backward = false;
  bool operator<(const OpKey& o) const { return backward != o.backward ? backward < o.backward : op < o.op; }
};

struct OpStats {
  int64_t calls = 0;
  int64_t low_outputs = 0;    // calls whose first floating output is f16 or bf16
  int64_t f32_outputs = 0;    // calls whose first floating output is f32 (or f64)
  DType low_dtype = DType::F32;  // the low dtype seen (F32: none); f16 and bf16 both: the last
  int64_t mixed_low = 0;      // calls with a low output of the other low dtype than low_dtype
  int64_t channels_last_outputs = 0;  // calls whose first floating output is 4-D and suggests NHWC
  double flops = 0;           // 2 * multiply-adds of matmul/mm/bmm/addmm/baddbmm/linear/conv2d/attention
  double backward_flops = 0;  // what the backward of those calls will run (gemm_conv_backward_flops)
  double seconds = 0;         // timed recorders only
};

struct OpRecorderOptions {
  bool timed = false;  // attribute wall time to ops (for --profile)
};

// Installs itself as the process's op observer for its lifetime (one recorder at a time; a
// second is an mg::Error). Records events from the constructing thread only.
class OpRecorder {
 public:
  explicit OpRecorder(OpRecorderOptions options = {});
  ~OpRecorder();
  OpRecorder(const OpRecorder&) = delete;
  OpRecorder& operator=(const OpRecorder&) = delete;

  // Marks a step's start (the first op's time is measured from here) and end (the time after
  // the last op goes to "(between ops)").
  void begin_step();
  void end_step();

  // Ends a phase of the step that is not an op (zero_grad, the unscale, the optimizer step): the
  // time since the previous event, less the ops that ran inside it, goes to `name` (one call).
  // Names are parenthesised, like kBetweenOps, so they cannot collide with an op's.
  void phase(const std::string& name);

  const std::map<OpKey, OpStats>& stats() const { return stats_; }
  int64_t steps() const { return steps_; }
  double step_seconds() const { return step_seconds_; }  // sum over the recorded steps
  void clear();

  // The observer's work for one event (public so tests can feed events).
  void record(const OpEvent& event);

 private:
  static void observe(const OpEvent& event);
  OpRecorderOptions options_;
  std::thread::id thread_;
  std::map<OpKey, OpStats> stats_;
  double last_ = 0, step_start_ = 0, step_seconds_ = 0;
  int64_t steps_ = 0;
  bool in_step_ = false;
  OpObserver previous_ = nullptr;
};

// The flops of one matmul-family, conv2d or fused attention call from its inputs and outputs (0 for
// other ops): 2 * (output elements) * (the reduced dimension) per product (attention: q kᵀ and P v).
double gemm_conv_flops(const OpEvent& event);

// The flops the backward of such a forward call runs when it is reached: one product as costly as
// the forward per operand that requires a gradient (a network's first layer computes no input
// gradient), attention's four products as they are needed; 0 when the output requires no
// gradient (no_grad) and for other ops and backward events.
double gemm_conv_backward_flops(const OpEvent& event);

// The name under which time outside any op is reported.
inline constexpr const char* kBetweenOps = "(between ops)";

// Whether a profile entry is a phase or the time between ops rather than an op: "(...)".
inline bool is_phase_name(const std::string& name) { return !name.empty() && name.front() == '('; }

}  // namespace mg::bench
