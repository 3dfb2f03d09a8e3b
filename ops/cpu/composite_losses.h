// The elementwise losses (mse_loss, l1_loss, smooth_l1_loss, binary_cross_entropy_with_logits,
// kl_div, binary_cross_entropy) as composite kernels of public ops (ops/cpu/loss_kernels.cpp):
// inputs widened to f32 (f64 stays f64), the loss computed and reduced there with public ops,
// rounded once on store. Nothing in them is CPU-specific, so every backend registers the same
// bodies (the CPU in ops/cpu/loss_kernels.cpp, CUDA in cuda/loss_kernels.cpp) and gets the same
// result structure, each op running on the tensors' device.
//
//   register_composite_loss_kernels(DeviceType::CUDA);
#pragma once
#include "mixgrad/core/device.h"

namespace mg {

// Registers the six losses for f64, f32, f16 and bf16 on `device`.
void register_composite_loss_kernels(DeviceType device);

}  // namespace mg
