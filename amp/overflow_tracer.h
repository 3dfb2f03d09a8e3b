// amp::OverflowTracer: finds the op that first produced inf/NaN — forward op or backward node,
// with its module path ("layer3.1.conv2"), the dtype, shape and range of every input and output
// — and ranks the ops whose f16/bf16 outputs came closest to the dtype's largest value. It is an
// op observer (core/op_observer.h): while a tracer lives, every op's outputs are scanned once;
// when none lives, the hook points cost one predictable branch each.
//
// The one decision: an op is blamed only when its floating inputs were all finite, so the ops
// after it that merely propagate inf/NaN are not; when inf/NaN entered from outside the observed
// ops (the input data, a parameter, .grad accumulation), the first op that saw it is reported
// with `inputs_finite = false`.
//
//   mg::amp::OverflowTracer tracer;                 // {.stop_at_first = true} throws at the op
//   mg::Tensor loss = criterion(model(x), y);
//   scaler.scale(loss).backward();
//   if (tracer.found()) std::cerr << tracer.report();  // op, direction, path, ranges + summary
//   tracer.reset();                                    // next step
//
// Module paths come from nn's call entry: call children as (*child)(x) (docs/amp_diagnostics.md).
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "mixgrad/core/dtype.h"
#include "mixgrad/core/shape.h"

namespace mg::amp {

struct OverflowTracerOptions {
  bool stop_at_first = false;         // throw an mg::Error carrying the report at the first op
                                      // whose outputs hold inf/NaN
  int top_k = 5;                      // entries in the near-limit summary
  bool check_inputs_of_first = true;  // blame the first op whose inputs were all finite; false:
                                      // simply the first op whose outputs hold inf/NaN
};

// Dtype, shape and range of one input or output of the reported op.
struct TensorRange {
  bool defined = false;  // undefined: an optional operand or a missing gradient
  DType dtype = DType::F32;
  Shape shape;
  int64_t numel = 0;
  int64_t num_inf = 0;   // floating dtypes only
  int64_t num_nan = 0;
  double min = 0.0;      // smallest and largest finite value (floating dtypes with a finite value)
  double max = 0.0;
  int64_t num_finite() const { return numel - num_inf - num_nan; }
  // "[2, 8] f16 min -3.5 max 10000" / "[2, 2] f16 no finite values, 4 inf" / "[32] i64".
  std::string str() const;
};

struct OverflowReport {
  std::string op;               // "linear", "linear_backward", "grad_sum" (two gradient
                                // contributions to one tensor summed by the engine)
  bool backward = false;
  bool inplace = false;         // add_/copy_/...: outputs[0] is the tensor written
  std::string module_path;      // "" when the op ran outside any module
  int64_t op_index = 0;         // position among the ops observed since construction/reset()
  bool inputs_finite = true;    // false: every observed op's inputs already held inf/NaN
  std::vector<TensorRange> inputs;   // forward: operands; backward: incoming gradients
  std::vector<TensorRange> outputs;  // forward: results; backward: gradients produced
  // Multi-line: "linear (forward) in module 2, op #5", then inputs and outputs.
  std::string str() const;
};

// One op (name, direction, module path, dtype) in the near-limit summary: the largest |x| over
// its f16/bf16 outputs during the step, relative to the dtype's largest finite value.
struct NearLimit {
  std::string op;
  bool backward = false;
  std::string module_path;
  DType dtype = DType::F16;
  double max_abs = 0.0;   // inf when an output overflowed
  double fraction = 0.0;  // max_abs / 65504 (f16) or / 3.39e38 (bf16)
  int64_t count = 0;      // times the op ran under this path since reset()
};

class OverflowTracer {
 public:
  // Installs the op observer. Only one tracer may live at a time (and no other op observer):
  // a second one is an mg::Error.
  explicit OverflowTracer(OverflowTracerOptions options = {});
  // Uninstalls it: the hook points are free again and results are bit-identical to a run that
  // never had a tracer.
  ~OverflowTracer();
  OverflowTracer(const OverflowTracer&) = delete;
  OverflowTracer& operator=(const OverflowTracer&) = delete;

  // True when an observed op's outputs held inf/NaN since construction/reset().
  bool found() const;
  // The op that produced the first inf/NaN (see the file comment), if any.
  std::optional<OverflowReport> first() const;
  // The top_k ops closest to their low-precision dtype's limit, closest first.
  std::vector<NearLimit> near_limits() const;
  // Ops observed (forward ops, backward nodes, gradient sums; view ops are not counted) and those
  // whose outputs held inf/NaN, since construction/reset().
  int64_t ops_observed() const;
  int64_t nonfinite_ops() const;
  // Human-readable, multi-line: the counts, first() with its ranges, the near-limit summary.
  std::string report() const;
  // Starts a new step: forgets everything recorded.
  void reset();

 private:
  OverflowTracerOptions options_;
};

}  // namespace mg::amp
