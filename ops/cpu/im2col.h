// Convolution geometry and the im2col / col2im lowering shared by the conv kernels.
// Decision: the column matrix is built in the compute type C (opmath: f32 for f16/bf16, f64 for
// f64), so the GEMM accumulates in C and the kernel rounds once on store.
#pragma once
#include <cstdint>
#include <vector>

#include "mixgrad/ops/op.h"

namespace mg::cpu {

// Shapes of one conv: x [N, C, H, W], w [O, C/groups, kH, kW], y [N, O, Ho, Wo].
struct ConvGeom {
  int64_t N, C, H, W, O, kH, kW, Ho, Wo;
  int64_t sh, sw, ph, pw, dh, dw, groups;
  int64_t cg() const { return C / groups; }
  int64_t og() const { return O / groups; }
  int64_t kk() const { return kH * kW; }
  int64_t hw_out() const { return Ho * Wo; }
};

// attrs.ints = {sh, sw, ph, pw, dh, dw, groups, ...}; the shapes complete the geometry.
inline ConvGeom conv_geom(const OpAttrs& a, int64_t N, int64_t C, int64_t H, int64_t W, int64_t O,
                          int64_t kH, int64_t kW) {
  const std::vector<int64_t>& i = a.ints;
  ConvGeom g{N, C, H, W, O, kH, kW, 0, 0, i[0], i[1], i[2], i[3], i[4], i[5], i[6]};
  g.Ho = (H + 2 * g.ph - g.dh * (kH - 1) - 1) / g.sh + 1;
  g.Wo = (W + 2 * g.pw - g.dw * (kW - 1) - 1) / g.sw + 1;
  return g;
}

// col [cg * kH * kW, Ho * Wo] (row stride ld) from x [cg, H, W] (dense, one sample and group);
// taps that fall in the padding are 0.
template <typename T, typename C>
void im2col(const T* x, C* col, int64_t ld, const ConvGeom& g) {
  for (int64_t c = 0; c < g.cg(); ++c) {
    for (int64_t ki = 0; ki < g.kH; ++ki) {
      for (int64_t kj = 0; kj < g.kW; ++kj) {
        C* row = col + ((c * g.kH + ki) * g.kW + kj) * ld;
        for (int64_t oh = 0; oh < g.Ho; ++oh) {
          const int64_t ih = oh * g.sh - g.ph + ki * g.dh;
          C* dst = row + oh * g.Wo;
          if (ih < 0 || ih >= g.H) {
            for (int64_t ow = 0; ow < g.Wo; ++ow) dst[ow] = C(0);
            continue;
          }
          const T* src = x + (c * g.H + ih) * g.W;
          for (int64_t ow = 0; ow < g.Wo; ++ow) {
            const int64_t iw = ow * g.sw - g.pw + kj * g.dw;
            dst[ow] = (iw >= 0 && iw < g.W) ? C(src[iw]) : C(0);
          }
        }
      }
    }
  }
}

// dx [cg, H, W] += the columns col [cg * kH * kW, Ho * Wo] scattered back (taps in the padding
// are dropped).
template <typename C>
void col2im(const C* col, C* dx, const ConvGeom& g) {
  const int64_t hw = g.hw_out();
  for (int64_t c = 0; c < g.cg(); ++c) {
    for (int64_t ki = 0; ki < g.kH; ++ki) {
      for (int64_t kj = 0; kj < g.kW; ++kj) {
        const C* row = col + ((c * g.kH + ki) * g.kW + kj) * hw;
        for (int64_t oh = 0; oh < g.Ho; ++oh) {
          const int64_t ih = oh * g.sh - g.ph + ki * g.dh;
          if (ih < 0 || ih >= g.H) continue;
          C* dst = dx + (c * g.H + ih) * g.W;
          const C* src = row + oh * g.Wo;
          for (int64_t ow = 0; ow < g.Wo; ++ow) {
            const int64_t iw = ow * g.sw - g.pw + kj * g.dw;
            if (iw >= 0 && iw < g.W) dst[iw] += src[ow];
          }
        }
      }
    }
  }
}

}  // namespace mg::cpu
