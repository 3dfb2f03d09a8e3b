// CUDA kernels of the copies and casts: clone, to(dtype) and copy_ convert between any two dtypes
// on the device (as the CPU: to the destination's opmath first, then to its storage type; bool is
// x != 0); to(device) moves bytes between the host and a device or two devices.
#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/visit_dtype.h"
#include "mixgrad/cuda/kernels/elementwise.cuh"
#include "mixgrad/cuda/kernels/register_helpers.h"
#include "mixgrad/ops/functors.h"
#include "mixgrad/ops/ops.h"

namespace mg::cuda {
namespace {

template <typename D>
struct CastTo {
  template <typename C>
  __device__ opmath_t<D> operator()(C x) const {
    if constexpr (std::is_same_v<D, bool>) {
      return x != C(0);
    } else {
      return fn::cast_value<opmath_t<D>>(x);  // NaN and out-of-range floats as on the CPU
    }
  }
};

// dst (the output's shape, any layout) <- src broadcast and converted. The same dtype, both
// dense in one layout: the bytes are copied on the stream (as on the CPU: a conversion through
// f32 would quiet an f16/bf16 signalling NaN).
template <typename S>
void convert_into(const Tensor& src, const Tensor& dst) {
  const bool flat = src.shape() == dst.shape() &&
                    ((src.is_contiguous() && dst.is_contiguous()) ||
                     (src.is_contiguous(MemoryFormat::ChannelsLast) && dst.is_contiguous(MemoryFormat::ChannelsLast)));
  if (src.dtype() == dst.dtype() && flat && src.device() == dst.device()) {
    copy_bytes(dst.data_ptr(), dst.device(), src.data_ptr(), src.device(), std::size_t(src.numel()) * src.element_size(),
               /*non_blocking=*/true);
    return;
  }
  visit_dtype(dst.dtype(), [&]<typename D>() { launch_unary<D, S>(src, dst, CastTo<D>{}); });
}

template <typename S>
void clone_kernel(const Tensors& in, Tensors& out, const OpAttrs&) {
  convert_into<S>(in[0], out[0]);
}

// copy(dst, src) -> out: out may be dst itself (copy_).
template <typename S>
void copy_kernel(const Tensors& in, Tensors& out, const OpAttrs&) {
  convert_into<S>(in[1], out[0]);
}

// The dtype stays; the source is made dense on its own device in the output's layout first
// (contiguous or channels-last: ops/copy.cpp keeps the layout), then its bytes move
// (asynchronously for to(device, non_blocking = true) where the host side is pinned: cuda/copy.cpp).
void to_device_kernel(const Tensors& in, Tensors& out, const OpAttrs& attrs) {
  const MemoryFormat format = out[0].suggest_memory_format();
  Tensor src = in[0];
  if (!src.is_contiguous(format)) {
    NoGradGuard no_grad;
    src = contiguous(src, format);
  }
  copy_bytes(out[0].data_ptr(), out[0].device(), src.data_ptr(), src.device(),
             std::size_t(src.numel()) * src.element_size(), /*non_blocking=*/attrs.mode == 1);
}

struct CloneK {
  template <typename T>
  static constexpr KernelFn fn = clone_kernel<T>;
};
struct CopyK {
  template <typename T>
  static constexpr KernelFn fn = copy_kernel<T>;
};

}  // namespace

void register_copy_kernels() {
  register_cuda_All<CloneK>(OpId::clone);
  register_cuda_All<CloneK>(OpId::to_dtype);
  register_cuda_All<CopyK>(OpId::copy);
#define MG_REG_TO_DEVICE(E, n, T) register_kernel(OpId::to_device, DeviceType::CUDA, DType::E, to_device_kernel);
  MG_FORALL_DTYPES(MG_REG_TO_DEVICE)
#undef MG_REG_TO_DEVICE
}

}  // namespace mg::cuda
