// CUDA kernels of the elementwise losses (mse_loss, l1_loss, smooth_l1_loss,
// binary_cross_entropy_with_logits with pos_weight, kl_div, binary_cross_entropy; every reduction):
// the CPU's composite kernels (ops/cpu/composite_losses.h), registered for CUDA. Decision: one body
// for both devices — the loss is the same public ops (widen to f32/f64, elementwise functors,
// mean/sum), which run as the CUDA elementwise kernels and the CUDA reductions (the tree of
// cuda/host/reducers.h), so no loss math is written twice. The cost is one kernel and one
// temporary per public op (a fused kernel would read the inputs once); the backward rules
// (ops/loss.cpp) are public ops too, so they need nothing more.
#include "mixgrad/ops/cpu/composite_losses.h"

namespace mg::cuda {

void register_loss_kernels() { register_composite_loss_kernels(DeviceType::CUDA); }

}  // namespace mg::cuda
