// CPU kernel of cumprod (ops/ops.h): the last dim of a contiguous input, one line per task in
// parallel over the lines (fn::cumprod_line, shared with CUDA).
#include <algorithm>

#include "mixgrad/core/parallel.h"
#include "mixgrad/ops/cumprod_line.h"
#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/register.h"

namespace mg::cpu {
namespace {

template <typename T>
void cumprod_kernel(const Tensors& in, Tensors& out, const OpAttrs&) {
  const Tensor x = contiguous(in[0]);
  if (x.numel() == 0) return;
  const int64_t n = x.dim() == 0 ? 1 : x.size(-1), lines = x.numel() / n;
  const T* px = x.data<T>();
  auto* po = out[0].data<fn::cumprod_out_t<T>>();  // dense: the dispatcher allocates it
  parallel_for(0, lines, std::max<int64_t>(1, 16384 / n), [&](int64_t l0, int64_t l1) {
    for (int64_t l = l0; l < l1; ++l) fn::cumprod_line<T>(px + l * n, po + l * n, n);
  });
}

}  // namespace

void register_cumprod_kernels() {
#define MG_REG_CUMPROD(E, n, T) register_kernel(OpId::cumprod, DeviceType::CPU, DType::E, cumprod_kernel<T>);
  MG_FORALL_DTYPES(MG_REG_CUMPROD)
#undef MG_REG_CUMPROD
}

}  // namespace mg::cpu
