// CPU kernel of nonzero_from_prefix (ops/nonzero.h): one pass over the prefix count; where it
// steps, the position is unravelled over attrs.ints[1..] into row k = prefix - 1 of the output.
#include <vector>

#include "mixgrad/ops/kernel_registry.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/ops/register.h"

namespace mg::cpu {
namespace {

void nonzero_from_prefix_kernel(const Tensors& in, Tensors& out, const OpAttrs& a) {
  const Tensor p = contiguous(in[0]);
  const int64_t n = p.size(0), d = int64_t(a.ints.size()) - 1;
  const int64_t* pp = p.data<int64_t>();
  int64_t* po = out[0].data<int64_t>();  // dense [count, d]: the dispatcher allocates it
  std::vector<int64_t> coord(static_cast<std::size_t>(d), 0);  // row-major odometer of position i
  int64_t prev = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (pp[i] != prev) {
      int64_t* row = po + (pp[i] - 1) * d;
      for (int64_t j = 0; j < d; ++j) row[j] = coord[std::size_t(j)];
      prev = pp[i];
    }
    for (int64_t j = d - 1; j >= 0; --j) {
      if (++coord[std::size_t(j)] < a.ints[std::size_t(j) + 1]) break;
      coord[std::size_t(j)] = 0;
    }
  }
}

}  // namespace

void register_nonzero_kernels() {
  register_kernel(OpId::nonzero_from_prefix, DeviceType::CPU, DType::I64, nonzero_from_prefix_kernel);
}

}  // namespace mg::cpu
