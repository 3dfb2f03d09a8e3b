// Power-average pooling, PyTorch's F.lp_pool1d / lp_pool2d / lp_pool3d: each window's (sum of x^p)^(1/p),
// computed as PyTorch does, from avg_pool of x^p times the kernel size, so the results agree also
// where PyTorch's form is odd: a window that ceil_mode lets hang over the end is scaled by the
// whole kernel's size (its mean over the real elements times kH kW), and a window whose sum of
// x^p is negative (odd p, negative x) gives -(|sum|)^(1/p) for p = 1 and NaN otherwise. p = inf is
// max pooling in PyTorch's docs but NaN in its code; here it is refused. No padding (PyTorch has
// none). Public ops: every device and dtype, differentiable (0 gradient where a window's sum is 0).
//
//   mg::Tensor y = mg::lp_pool2d(x, 2.0, {3, 3}, {2, 2});   // [N, C, H, W] -> [N, C, Ho, Wo]
#pragma once
#include <array>
#include <cstdint>

#include "mixgrad/core/tensor.h"

namespace mg {

// x [N, C, L] or [C, L]; stride 0 means the kernel.
Tensor lp_pool1d(const Tensor& x, double norm_type, int64_t kernel, int64_t stride = 0, bool ceil_mode = false);
// x [N, C, H, W] or [C, H, W]; stride {0, 0} means the kernel.
Tensor lp_pool2d(const Tensor& x, double norm_type, std::array<int64_t, 2> kernel, std::array<int64_t, 2> stride = {0, 0},
                 bool ceil_mode = false);
// x [N, C, D, H, W] or [C, D, H, W]; stride {0, 0, 0} means the kernel (avg_pool3d underneath).
Tensor lp_pool3d(const Tensor& x, double norm_type, std::array<int64_t, 3> kernel,
                 std::array<int64_t, 3> stride = {0, 0, 0}, bool ceil_mode = false);

}  // namespace mg
