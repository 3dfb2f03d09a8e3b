// Functions built from public ops that carry an autocast policy of their own, as user-defined
// functions do (ops/custom_function.h): the losses of ops/margin_losses.h and ops/distance.h.
// Autograd differentiates them through their ops (double backward included), and they run on
// every device.
//
// The decisions a reader must know: each is declared with its policy in ops/composite_list.def
// (listed in docs/ops.md). The inputs go through apply_autocast — the dispatcher's one autocast
// function — with that policy (fp32: PyTorch's autocast lists most of them, and runs the rest
// from ops it lists as fp32 or computes in their input dtype), and are
// then widened to opmath (f32; f64 stays f64) by differentiable casts, so every intermediate is
// f32 and the result is rounded once to the result dtype: the numerics contract of the table
// losses (DESIGN §3), which compute in opmath inside their kernels. Not in the op list, so
// set_policy cannot override their policy, and the op observer sees their constituent ops.
//
//   const detail::CompositeInputs c = detail::composite_inputs("soft_margin_loss", {input, target});
//   return detail::round_result(detail::reduce_composite(softplus(-(c.math[1] * c.math[0])), reduction), c);
#pragma once
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "mixgrad/core/autocast_state.h"
#include "mixgrad/core/tensor.h"
#include "mixgrad/ops/loss.h"
#include "mixgrad/ops/op.h"

namespace mg::detail {

struct CompositeInputs {
  Tensors math;   // the floating inputs after autocast, in opmath (undefined stay undefined)
  DType result;   // the dtype the function returns: the promoted floating dtype after autocast
  // Autocast is off while this lives: the policy was applied once, above, and the body's ops run
  // in opmath (a lower op inside, such as bilinear's matmul, would otherwise round its operands
  // to f16/bf16 again: every intermediate stays f32).
  std::unique_ptr<AutocastOffGuard> autocast_off;
};
// Checks the inputs are defined and one at least floating, applies autocast with the policy
// ops/composite_list.def gives `name`, and widens the floating ones to opmath. Integer and bool
// inputs, and the floating ones listed in `labels` (positions of label-like inputs, such as a +-1
// target, whose dtype PyTorch's result does not follow), are converted to opmath too but take no
// part in the result dtype.
CompositeInputs composite_inputs(const char* name, Tensors inputs, std::initializer_list<std::size_t> labels = {});

struct CompositeDesc {
  const char* name;
  CastPolicy policy;
};
// Every entry of ops/composite_list.def, in order.
const std::vector<CompositeDesc>& composite_functions();
// `x` rounded once to c.result (a differentiable cast; no-op when already there).
Tensor round_result(const Tensor& x, const CompositeInputs& c);
// A constant a composite builds on the host (index or weight tables), on `device`: built by
// make() (a CPU tensor) and, off the CPU, copied once and kept per (key, device), so that later
// calls copy nothing — a CUDA graph capture refuses host-to-device copies, and a captured step
// then finds the tables its eager run made. The cache holds at most 256 tables (cleared when full).
Tensor host_constant(const std::string& key, Device device, const std::function<Tensor()>& make);
// Mean / Sum over every element, or x itself (None). BatchMean is refused by the callers.
Tensor reduce_composite(const Tensor& x, Reduction reduction);
// Throws naming `name` unless reduction is None, Mean or Sum.
void check_plain_reduction(const char* name, Reduction reduction);

}  // namespace mg::detail
