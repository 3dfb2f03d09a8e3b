// CUDA kernels of the factories (zeros/ones/full/arange/linspace/eye/rand/randn/randint and the
// *_like forms): core/factory.cpp allocates the output on the device, advances the generator and
// hands the FillSpec to fill_cuda(), registered into core by register_factory_kernels().
// Decision: the kernel body is core/fill_values.h's fill_item(), the function the CPU loop runs,
// so every value (Philox words, the Box-Muller transform of core/box_muller.h, the randint range
// mapping, the arange/linspace formulas and their f16/bf16 rounding) equals the CPU's bit for bit
// by construction. One thread per item (an element, or one Philox block of 2-4 elements),
// grid-stride, on the device's current stream; nothing waits for the device.
// A random fill during a CUDA graph capture is refused here whatever its generator: its (seed,
// offset) would be frozen into the graph (core/factory.cpp refuses only a captured generator, so a
// generator outside the graph would otherwise repeat its values at every replay, silently).
#include <cuda_runtime.h>

#include "mixgrad/core/device_fill.h"
#include "mixgrad/core/half.h"
#include "mixgrad/core/visit_dtype.h"
#include "mixgrad/cuda/check.h"
#include "mixgrad/cuda/graph.h"
#include "mixgrad/cuda/kernels/launch.h"

namespace mg::cuda {
namespace {

// p: [n] dense; items = fill_item_count(K, dtype, n)
template <FillKind K, typename T>
__global__ void fill_forward_kernel(T* p, int64_t n, int64_t items, FillSpec spec) {
  for (int64_t it = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; it < items;
       it += int64_t(gridDim.x) * blockDim.x)
    fill_item<K>(p, n, spec, it);
}

template <FillKind K, typename T>
void fill_forward(T* p, int64_t n, const FillSpec& spec, const LaunchContext& ctx) {
  const int64_t items = fill_item_count(K, dtype_v<T>, n);
  fill_forward_kernel<K, T><<<ctx.blocks(items), kThreads, 0, ctx.stream>>>(p, n, items, spec);
  MG_CUDA_CHECK_LAUNCH("fill kernel");
}

// The factory of a random fill kind; nullptr for the deterministic kinds.
const char* random_fill_name(FillKind k) {
  switch (k) {
    case FillKind::Rand: return "rand";
    case FillKind::Randn: return "randn";
    case FillKind::Randint: return "randint";
    default: return nullptr;
  }
}

// The DeviceFillFn of CUDA (core/device_fill.h). out: dense, on a CUDA device, n >= 1.
void fill_cuda(Tensor& out, const FillSpec& spec) {
  if (const char* name = random_fill_name(spec.kind)) {
    MG_CHECK(!is_capturing(), Error, name, " on ", out.device().str(),
             " drew random numbers during a CUDA graph capture from a generator that is not part of the graph: "
             "its values would be frozen into the graph and repeat at every replay"
             "\n  hint: draw it outside the captured step (e.g. into a static input), or use dropout, which "
             "reads its stream position from device memory");
  }
  const LaunchContext ctx(out.device());
  const int64_t n = out.numel();
  visit_dtype(out.dtype(), [&]<typename T>() {
    T* p = static_cast<T*>(out.data_ptr());
    constexpr bool floating = std::is_floating_point_v<T> || std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>;
    switch (spec.kind) {
      case FillKind::Full: return fill_forward<FillKind::Full>(p, n, spec, ctx);
      case FillKind::Arange: return fill_forward<FillKind::Arange>(p, n, spec, ctx);
      case FillKind::Linspace: return fill_forward<FillKind::Linspace>(p, n, spec, ctx);
      case FillKind::Eye: return fill_forward<FillKind::Eye>(p, n, spec, ctx);
      case FillKind::Randint: return fill_forward<FillKind::Randint>(p, n, spec, ctx);
      case FillKind::Rand:
      case FillKind::Randn:
        // core/factory.cpp admits floating dtypes only (DTypeError before allocating).
        if constexpr (floating) {
          if (spec.kind == FillKind::Rand) return fill_forward<FillKind::Rand>(p, n, spec, ctx);
          return fill_forward<FillKind::Randn>(p, n, spec, ctx);
        }
        break;
    }
    MG_ASSERT(false, "fill_cuda: fill kind ", int(spec.kind), " has no kernel for ", dtype_name(out.dtype()));
  });
}

}  // namespace

void register_factory_kernels() { set_device_fill_fn(DeviceType::CUDA, &fill_cuda); }

}  // namespace mg::cuda
