#include "amp/unscale.h"

#include <cmath>
#include <limits>
#include <vector>

#include "core/half.h"
#include "core/macros.h"
#include "core/parallel.h"
#include "core/visit_dtype.h"

namespace mg::amp {
namespace {

// Per-element unscale and classification; `tiny` is the smallest normal of the storage dtype.
struct UnscaleOne {
  template <typename T>
  MG_HOST_DEVICE void operator()(T& g, float inv_scale, float tiny, bool write, UnscaleStats& s) const {
    const float v = static_cast<float>(g);
    const float a = std::fabs(v);
    if (!(a <= std::numeric_limits<float>::max())) ++s.nonfinite;  // inf or NaN
    else if (a == 0.0f) ++s.zeros;
    else if (a < tiny) ++s.underflowed;
    if (write) g = static_cast<T>(v * inv_scale);
  }
  MG_HOST_DEVICE void operator()(double& g, float, float, bool write, UnscaleStats& s, double inv_scale) const {
    const double a = std::fabs(g);
    if (!(a <= std::numeric_limits<double>::max())) ++s.nonfinite;
    else if (a == 0.0) ++s.zeros;
    else if (a < std::numeric_limits<double>::min()) ++s.underflowed;
    if (write) g *= inv_scale;
  }
};

template <typename T>
float smallest_normal() {
  if constexpr (std::is_same_v<T, Half>) return 6.103515625e-05f;  // 2^-14
  else return std::numeric_limits<float>::min();                    // f32 and bf16: 2^-126
}

// One chunk of one tensor: the unit of work of the multi-tensor pass.
struct Chunk {
  int tensor;
  int64_t begin, end;
};

}  // namespace

UnscaleStats unscale_grads(const Tensors& grads, double inv_scale, bool check_only) {
  constexpr int64_t kChunk = 1 << 16;
  std::vector<Chunk> chunks;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    if (!g.defined()) continue;
    MG_CHECK(is_floating(g.dtype()), DTypeError, "unscale: gradient ", i, " is not floating: ", describe(g));
    MG_CHECK(g.device().is_cpu(), NotImplementedError, "unscale: gradient ", i, " is on ", g.device().str(),
             "; the CUDA multi-tensor unscale comes with the CUDA backend");
    MG_CHECK(g.is_contiguous(), Error, "unscale: gradient ", i, " is not contiguous: ", describe(g));
    for (int64_t b = 0; b < g.numel(); b += kChunk) chunks.push_back({int(i), b, std::min(g.numel(), b + kChunk)});
  }
  std::vector<UnscaleStats> partial(chunks.size());
  parallel_for(0, int64_t(chunks.size()), 1, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) {
      const Chunk& ch = chunks[std::size_t(c)];
      const Tensor& g = grads[std::size_t(ch.tensor)];
      UnscaleStats& s = partial[std::size_t(c)];
      visit_floating(g.dtype(), "unscale", [&]<typename T>() {
        T* p = g.data<T>();
        for (int64_t k = ch.begin; k < ch.end; ++k) {
          if constexpr (std::is_same_v<T, double>) UnscaleOne{}(p[k], 0.0f, 0.0f, !check_only, s, inv_scale);
          else UnscaleOne{}(p[k], float(inv_scale), smallest_normal<T>(), !check_only, s);
        }
        s.values += ch.end - ch.begin;
      });
    }
  });
  UnscaleStats total;
  for (const UnscaleStats& s : partial) {
    total.values += s.values;
    total.zeros += s.zeros;
    total.underflowed += s.underflowed;
    total.nonfinite += s.nonfinite;
  }
  return total;
}

}  // namespace mg::amp
