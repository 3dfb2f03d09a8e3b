// Adafactor's fused CUDA step (cuda/kernels/adafactor.cu), the entry of the multi-tensor kernel
// table (core/multi_tensor_kernels.h) that cuda/kernels/multi_tensor.cu registers. Internal to cuda/.
#pragma once
#include "mixgrad/core/multi_tensor_kernels.h"

namespace mg::cuda {

void adafactor_cuda(const MultiTensorStepArgs& args, const AdafactorHyper& h);

}  // namespace mg::cuda
