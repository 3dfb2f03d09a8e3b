// Helpers of the CUDA conv tests (test_cuda_conv.cpp, test_cuda_cudnn_conv.cpp): seeded inputs
// made on the CPU in the tested dtype (both devices see the same bits), the element-wise tolerance
// of a CUDA conv result against the CPU's, and a tensor's bytes for bit-for-bit checks.
//
// Tolerance, per element. Both devices accumulate each output's K products in f32 (f64 for f64)
// in different orders, each within K u S of the exact sum, where S = Σ|a||b| over the output's
// terms and u = 2^-24 (2^-53); so they differ by at most 2 K u S. f16/bf16 outputs are then
// rounded once from f32 values that close, and may land on neighbouring values: one ulp, at most
// 2^-10 (f16) or 2^-7 (bf16) of |want| (plus 2^-24 absolute for f16 subnormals). cuDNN's
// transform algorithms (Winograd, FFT) do not sum the products one by one: their error is bounded
// by the transforms' roundings, at most one input ulp of S per element for f16/bf16, and for f32 a
// term 16 u max(S) over the tensor (FFT errors spread over the whole plane). A wrong tap, group or
// stride still moves values by O(S) and fails. S comes from the same op on |inputs| in f64.
#pragma once
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "core/factory.h"
#include "core/generator.h"
#include "cuda_test_util.h"
#include "ops/ops.h"
#include "test_util.h"

namespace mg::test::conv {

inline Tensor randn_in(DType dt, const Shape& shape, uint64_t seed) {
  Generator gen(seed);
  return to(randn(shape, {.dtype = DType::F64}, &gen), dt);
}

inline double ulp_of(DType dt) { return dt == DType::F16 ? 0x1p-10 : dt == DType::BF16 ? 0x1p-7 : 0.0; }
inline double u_of(DType dt) { return dt == DType::F64 ? 0x1p-53 : 0x1p-24; }

// got (on the GPU) against want (CPU) within the bound above; `bound` = the op on |inputs| (f64).
inline void require_conv_close(const std::string& what, const Tensor& got, const Tensor& want, const Tensor& bound,
                               int64_t K) {
  INFO(what << " " << dtype_name(want.dtype()) << " " << shape_str(want.shape()));
  REQUIRE(got.device() == gpu());
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(got.shape() == want.shape());
  const DType dt = want.dtype();
  const std::vector<double> g = values(got.to(Device::cpu())), w = values(want), s = values(bound);
  const double s_max = s.empty() ? 0.0 : *std::max_element(s.begin(), s.end());
  const double transform = dt == DType::F32 ? 16 * u_of(dt) * s_max : 0.0;
  for (std::size_t i = 0; i < w.size(); ++i) {
    const double tol = 2.0 * double(K + 2) * u_of(dt) * s[i] * (1 + ulp_of(dt)) + ulp_of(dt) * std::abs(w[i]) +
                       ulp_of(dt) * s[i] + transform + (dt == DType::F16 ? 0x1p-24 : 0.0);
    if (!(std::abs(g[i] - w[i]) <= tol)) {
      FAIL(what << " element " << i << ": cuda " << g[i] << " cpu " << w[i] << " tolerance " << tol);
    }
  }
}

inline Tensor abs64(const Tensor& t) { return abs(to(t, DType::F64)); }

inline std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor c = contiguous(t.to(Device::cpu()));
  const auto* p = static_cast<const uint8_t*>(c.data_ptr());
  return std::vector<uint8_t>(p, p + c.numel() * int64_t(dtype_size(c.dtype())));
}

}  // namespace mg::test::conv
