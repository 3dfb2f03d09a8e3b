// register_cuda_kernels(): the CUDA backend's one entry point, called once from mg::init()
// (ops/init.cpp). It installs the device allocator, the pinned host allocator, the byte-copy
// function and the factories' fill function into core and fills the kernel registry with the CUDA
// kernels of every op group. Nothing here needs a GPU: a CUDA build on a machine without one
// registers everything, and the first use of a CUDA device throws DeviceError with the reason.
#include "mixgrad/core/pinned_memory.h"
#include "mixgrad/core/storage.h"
#include "mixgrad/cuda/cuda.h"
#include "mixgrad/cuda/copy.h"
#include "mixgrad/cuda/device_allocator.h"
#include "mixgrad/cuda/pinned_allocator.h"

namespace mg::cuda {

void register_unary_kernels();
void register_binary_kernels();
void register_select_kernels();
void register_copy_kernels();
void register_linalg_kernels();  // cuda/linalg_kernels.cpp (cuBLASLt)
void register_reduce_kernels();
void register_indexing_kernels();  // cuda/kernels/indexing.cu
void register_sort_kernels();      // cuda/kernels/sort.cu
void register_nonzero_kernels();   // cuda/kernels/nonzero.cu
void register_cumprod_kernels();   // cuda/kernels/cumprod.cu
void register_softmax_kernels();   // cuda/kernels/softmax.cu
void register_dropout_kernels();   // cuda/kernels/dropout.cu
void register_dropout_backward_kernels();  // cuda/kernels/dropout_backward.cu
void register_pool_kernels();      // cuda/kernels/pool.cu
void register_loss_kernels();      // cuda/loss_kernels.cpp (the composite losses)
void register_norm_kernels();      // cuda/kernels/norm.cu
void register_conv_kernels();      // cuda/conv_kernels.cpp (im2col + cuBLASLt)
void register_factory_kernels();   // cuda/kernels/factory.cu (the device fill of core/factory.cpp)
void register_multi_tensor_kernels();  // cuda/kernels/multi_tensor.cu (core/multi_tensor_kernels.h)
void register_attention_kernels();     // cuda/kernels/attention.cu (fused attention)

void register_cuda_kernels() {
  set_allocator(DeviceType::CUDA, &device_allocator());
  set_copy_bytes_fn(DeviceType::CUDA, &copy_bytes_cuda);
  set_pinned_allocator(&pinned_allocator(), &unavailable_reason);
  register_unary_kernels();
  register_binary_kernels();
  register_select_kernels();
  register_copy_kernels();
  register_linalg_kernels();
  register_reduce_kernels();
  register_indexing_kernels();
  register_sort_kernels();
  register_nonzero_kernels();
  register_cumprod_kernels();
  register_softmax_kernels();
  register_dropout_kernels();
  register_dropout_backward_kernels();
  register_pool_kernels();
  register_loss_kernels();
  register_norm_kernels();
  register_conv_kernels();
  register_factory_kernels();
  register_multi_tensor_kernels();
  register_attention_kernels();
}

}  // namespace mg::cuda
