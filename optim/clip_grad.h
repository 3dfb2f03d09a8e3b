// Gradient clipping, as torch.nn.utils.clip_grad_norm_ / clip_grad_value_: in place on the .grad
// of the given parameters (parameters without a gradient are skipped), all gradients in one
// multi-tensor pass.
//
// The one decision a reader must know: a non-finite total norm (inf or NaN) is reported, not
// hidden. clip_grad_norm_ returns it, throws when error_if_nonfinite is set, and leaves the
// gradients unchanged (PyTorch would scale them by NaN or by 0), so a GradScaler or the caller can
// see the overflow and skip the step.
//
// Under fp32 master weights (O2) both refuse gradients the step would not use: the model's after
// they went into the masters, the masters' before they did (optim/master_grad_check.h).
//
//   mg::Tensor norm = mg::optim::clip_grad_norm_(net.parameters(), 1.0);   // 0-d, f32
//   if (!std::isfinite(norm.item<double>())) { /* skip this step */ }
#pragma once
#include <cmath>

#include "mixgrad/core/tensor.h"

namespace mg::optim {

// Scales all gradients by min(1, max_norm / (total + 1e-6)), where total is the norm_type-norm of
// all gradients together (norm_type > 0, or INFINITY for the largest |g|). The sum is
// accumulated in f32 (f64 when a gradient is f64). Returns the total norm before clipping as a
// 0-d tensor on the gradients' device (no host read on CUDA unless error_if_nonfinite), f32 (f64
// when a gradient is f64); 0 when no parameter has a gradient. The gradients must share a device
// (else a DeviceError).
Tensor clip_grad_norm_(const Tensors& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// Clamps every gradient element to [-clip_value, clip_value] (NaN stays NaN); clip_value >= 0.
void clip_grad_value_(const Tensors& params, double clip_value);

}  // namespace mg::optim
