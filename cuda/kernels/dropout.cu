// CUDA kernel of dropout (f64/f32/f16/bf16), mirroring ops/cpu/norm_kernels.cpp: x -> (y, bool
// keep mask). The keep decision is cuda/host/dropout_mask.h, the CPU's Philox rule element by
// element, so the mask equals the CPU's bit for bit for the same attrs.ints = {seed, offset}.
// One thread per Philox block (4 consecutive elements), grid-stride. Kept values are
// x * (1 / (1 - p)) in opmath (acc_t: f32 for f16/bf16/f32, f64 for f64) rounded once; dropped
// values are x * 0, as the CPU's and PyTorch's: a dropped NaN or inf stays NaN (GradScaler sees
// it) and a dropped negative is -0. Under a CUDA graph capture ints[2] is the
// address of the device {seed, base offset} of each replay (core/graph_rng.h) and ints[1] the
// offset within the graph.
#include <cuda_runtime.h>

#include <cstdint>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/half.h"
#include "mixgrad/cuda/check.h"
#include "mixgrad/cuda/graph.h"
#include "mixgrad/cuda/host/dropout_mask.h"
#include "mixgrad/cuda/kernels/launch.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/ops.h"

namespace mg::cuda {
namespace {

// x, y, keep: [n] dense
template <typename T>
__global__ void dropout_forward_kernel(int64_t n, const T* __restrict__ x, T* __restrict__ y,
                                       bool* __restrict__ keep, uint64_t seed, uint64_t offset,
                                       const int64_t* __restrict__ base, float p, acc_t<T> scale) {
  using A = acc_t<T>;
  if (base != nullptr) {  // captured in a CUDA graph: the stream position of this replay
    seed = uint64_t(base[0]);
    offset += uint64_t(base[1]);
  }
  const int64_t blocks = (n + 3) / 4;
  for (int64_t b = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; b < blocks; b += int64_t(gridDim.x) * blockDim.x) {
    const unsigned bits = dropout_keep4(seed, offset, uint64_t(b), p);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const int64_t i = 4 * b + j;
      if (i >= n) break;
      const bool k = (bits >> j) & 1u;
      keep[i] = k;
      // x * (keep ? scale : 0), PyTorch's x * noise: a dropped NaN or inf stays NaN (the CPU's rule).
      y[i] = static_cast<T>(static_cast<A>(x[i]) * (k ? scale : A(0)));
    }
  }
}

// in = (x); out = (y [x's shape], keep [x's shape] bool); attrs.alpha = p, attrs.ints = {seed, offset}
template <typename T>
void dropout_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  using A = acc_t<T>;
  // Captured without a device stream position: the generator was not added to the graph, so this
  // capture's (seed, offset) would be frozen into it and every replay would drop the same elements.
  MG_CHECK(a.ints.size() > 2 || !is_capturing(), Error,
           "dropout: drew from a generator that is not part of the CUDA graph being captured: its mask "
           "would repeat at every replay\n  hint: add the generator to the graph before the capture "
           "(cuda::Graph::add_generator; the default generator is part of every graph)");
  NoGradGuard no_grad;  // the dense copy is not part of the graph
  const Tensor x = contiguous(in[0]);
  const int64_t n = x.numel();
  if (n == 0) return;
  const LaunchContext ctx(x.device());
  const A scale = A(1.0 / (1.0 - a.alpha));  // as the CPU: the divide in double, then rounded to A
  dropout_forward_kernel<T><<<ctx.blocks((n + 3) / 4), kThreads, 0, ctx.stream>>>(
      n, static_cast<const T*>(x.data_ptr()), static_cast<T*>(out[0].data_ptr()), static_cast<bool*>(out[1].data_ptr()),
      uint64_t(a.ints.at(0)), uint64_t(a.ints.at(1)),
      a.ints.size() > 2 ? reinterpret_cast<const int64_t*>(std::intptr_t(a.ints[2])) : nullptr, float(a.alpha), scale);
  MG_CUDA_CHECK_LAUNCH("dropout kernel");
}

}  // namespace

void register_dropout_kernels() {
  constexpr DeviceType cuda = DeviceType::CUDA;
  register_kernel(OpId::dropout, cuda, DType::F64, dropout_kernel<double>);
  register_kernel(OpId::dropout, cuda, DType::F32, dropout_kernel<float>);
  register_kernel(OpId::dropout, cuda, DType::F16, dropout_kernel<Half>);
  register_kernel(OpId::dropout, cuda, DType::BF16, dropout_kernel<BFloat16>);
}

}  // namespace mg::cuda
