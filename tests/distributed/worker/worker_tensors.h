// Comparisons of parameters shared by mg_dist_worker's scenario files: bitwise and relative
// equality of tensor lists, equality across ranks (an all-gather), and gathering one number.
#pragma once
#include <algorithm>
#include <cstring>
#include <vector>

#include "core/factory.h"
#include "core/tensor.h"
#include "distributed/process_group.h"
#include "ops/ops.h"

namespace mg::worker_check {

// Same dtypes, shapes and bytes, tensor by tensor.
inline bool bitwise_equal(const Tensors& a, const Tensors& b) {
  if (a.size() != b.size()) return false;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const Tensor x = a[i].contiguous(), y = b[i].contiguous();
    if (x.dtype() != y.dtype() || x.shape() != y.shape() ||
        std::memcmp(x.data_ptr(), y.data_ptr(), std::size_t(x.numel()) * x.element_size()))
      return false;
  }
  return true;
}

// max |a - b| / max |b| over all tensors (f64).
inline double rel_diff(const Tensors& a, const Tensors& b) {
  double diff = 0, scale = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    const Tensor x = a[i].to(DType::F64), y = b[i].to(DType::F64);
    diff = std::max(diff, (x - y).abs().max().item<double>());
    scale = std::max(scale, y.abs().max().item<double>());
  }
  return diff / scale;
}

// Every rank's tensors bitwise equal (an all-gather of each).
inline bool replicas_equal(distributed::ProcessGroup& pg, const Tensors& tensors) {
  for (const Tensor& p : tensors) {
    const Tensor all = pg.all_gather(p.contiguous());  // [W, *p.shape]
    const std::size_t bytes = std::size_t(p.numel()) * p.element_size();
    const char* d = static_cast<const char*>(all.data_ptr());
    for (int r = 1; r < pg.world_size(); ++r) {
      if (std::memcmp(d, d + std::size_t(r) * bytes, bytes)) return false;
    }
  }
  return true;
}

// Every rank's value of v, in rank order.
inline std::vector<double> gather(distributed::ProcessGroup& pg, double v) {
  const Tensor all = pg.all_gather(from_vector<double>({v}, {1}));
  return {all.data<double>(), all.data<double>() + all.numel()};
}

}  // namespace mg::worker_check
