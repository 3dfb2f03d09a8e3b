// The two silent ways of clipping gradients the step will not use under fp32 master weights
// (optim/master_weights.h), refused by clip_grad_norm_ and clip_grad_value_:
//   - clipping the model's f16/bf16 parameters after their gradients went into the masters
//     (GradScaler::unscale_, amp::scale_loss, sync_master_grads): the step reads the masters, so
//     the clip changes nothing (Apex's and PyTorch's users hit this; neither says so);
//   - clipping the masters before they hold this step's gradients: step() copies the model
//     gradients over them, so the clip is lost.
// Optimizers with master weights register here (use_master_weights) and leave on destruction.
#pragma once
#include "mixgrad/core/tensor.h"

namespace mg::optim {

class Optimizer;

namespace detail {

void register_master_optimizer(const Optimizer* opt);
void unregister_master_optimizer(const Optimizer* opt);

// Throws an Error naming parameter k of `params` and the fix when it is one of the two cases
// above for any live optimizer with master weights. `op` names the caller in the message.
void check_clip_targets(const Tensors& params, const char* op);

}  // namespace detail
}  // namespace mg::optim
