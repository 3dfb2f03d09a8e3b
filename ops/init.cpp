// init(): the one place where rules and kernels are registered (explicitly, never by static
// initialisers) and where the autograd engine receives the tensor math it needs.
#include <mutex>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/autograd/node.h"
#include "mixgrad/core/parallel.h"
#include "mixgrad/ops/dispatcher.h"
#include "mixgrad/ops/inplace_view.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/register.h"

#if defined(MG_WITH_CUDA)
namespace mg::cuda {
void register_cuda_kernels();
}
#endif

namespace mg {
namespace {

Tensor grad_add(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor grad_dense_copy(const Tensor& a, const Tensor& like) {
  NoGradGuard no_grad;
  // A channels-last leaf (a channels_last model's weight) gets a channels-last .grad, so the
  // optimizer walks the parameter and its gradient in one memory order.
  const bool nhwc = like.dim() == 4 && !like.is_contiguous() && like.is_contiguous(MemoryFormat::ChannelsLast);
  return clone(a, nhwc ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous);
}
Tensor grad_copy(const Tensor& a) { return clone(a); }
void grad_add_inplace(const Tensor& dst, const Tensor& src) {
  NoGradGuard no_grad;
  dispatch_inplace(OpId::add, dst, {src});
}

}  // namespace

void register_cpu_kernels() {
  cpu::register_elementwise_kernels();
  cpu::register_reduce_kernels();
  cpu::register_linalg_kernels();
  cpu::register_copy_kernels();
  cpu::register_indexing_kernels();
  cpu::register_sort_kernels();
  cpu::register_nonzero_kernels();
  cpu::register_cumprod_kernels();
  cpu::register_loss_kernels();
  cpu::register_conv_kernels();
  cpu::register_norm_kernels();
  cpu::register_attention_kernels();
}

void init() {
  static std::once_flag once;
  std::call_once(once, [] {
    register_elementwise_rules();
    register_activation_rules();
    register_reduce_rules();
    register_linalg_rules();
    register_view_rules();
    register_copy_rules();
    register_indexing_rules();
    register_sort_rules();
    register_nonzero_rules();
    register_bitwise_rules();
    register_loss_rules();
    register_conv_rules();
    register_norm_rules();
    register_attention_rules();
    register_cpu_kernels();
#if defined(MG_WITH_CUDA)
    cuda::register_cuda_kernels();
#endif
    autograd::GradMath& math = autograd::grad_math();
    math.add = grad_add;
    math.dense_copy = grad_dense_copy;
    math.copy = grad_copy;
    math.add_inplace = grad_add_inplace;
    math.refresh_view = refresh_view_history;
  });
  apply_num_threads();  // every op: this thread's OpenMP setting follows set_num_threads
}

}  // namespace mg
