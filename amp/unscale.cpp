#include "mixgrad/amp/unscale.h"

#include <cmath>
#include <limits>
#include <unordered_set>
#include <vector>

#include "mixgrad/core/half.h"
#include "mixgrad/core/macros.h"
#include "mixgrad/core/parallel.h"
#include "mixgrad/core/visit_dtype.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/optim/optimizer.h"

namespace mg::amp {
namespace {

// Classifies one gradient value (before unscaling); `tiny` is the smallest normal of its dtype.
struct Classify {
  template <typename F>
  MG_HOST_DEVICE void operator()(F v, F tiny, UnscaleStats& s) const {
    const F a = std::fabs(v);
    if (!(a <= std::numeric_limits<F>::max())) ++s.nonfinite;  // inf or NaN
    else if (a == F(0)) ++s.zeros;
    else if (a < tiny) ++s.underflowed;
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

void check_grad(const Tensor& g, std::size_t i, const char* what) {
  MG_CHECK(is_floating(g.dtype()), DTypeError, "unscale: ", what, " ", i, " is not floating: ", describe(g));
  MG_CHECK(g.device().is_cpu(), NotImplementedError, "unscale: ", what, " ", i, " is on ", g.device().str(),
           "; the CUDA multi-tensor unscale comes with the CUDA backend");
  MG_CHECK(g.is_contiguous(), Error, "unscale: ", what, " ", i, " is not contiguous: ", describe(g));
}

// Runs body(tensor, begin, end, stats) over 64K-element chunks of the defined tensors in one
// parallel pass and sums the per-chunk statistics in chunk order.
template <typename Body>
UnscaleStats for_each_chunk(const Tensors& grads, const Body& body) {
  constexpr int64_t kChunk = 1 << 16;
  std::vector<Chunk> chunks;
  for (std::size_t i = 0; i < grads.size(); ++i) {
    const Tensor& g = grads[i];
    if (!g.defined()) continue;
    for (int64_t b = 0; b < g.numel(); b += kChunk) chunks.push_back({int(i), b, std::min(g.numel(), b + kChunk)});
  }
  std::vector<UnscaleStats> partial(chunks.size());
  parallel_for(0, int64_t(chunks.size()), 1, [&](int64_t cb, int64_t ce) {
    for (int64_t c = cb; c < ce; ++c) {
      const Chunk& ch = chunks[std::size_t(c)];
      body(std::size_t(ch.tensor), ch.begin, ch.end, partial[std::size_t(c)]);
      partial[std::size_t(c)].values += ch.end - ch.begin;
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

}  // namespace

UnscaleStats unscale_grads(const Tensors& grads, double inv_scale, bool check_only) {
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].defined()) check_grad(grads[i], i, "gradient");
  }
  // The reciprocal is applied in f32 as the kernels do (PyTorch: scale.double().reciprocal().float());
  // f64 gradients use it in f64.
  const float inv32 = float(inv_scale);
  return for_each_chunk(grads, [&](std::size_t t, int64_t b, int64_t e, UnscaleStats& s) {
    const Tensor& g = grads[t];
    visit_floating(g.dtype(), "unscale", [&]<typename T>() {
      T* p = g.data<T>();
      if constexpr (std::is_same_v<T, double>) {
        for (int64_t k = b; k < e; ++k) {
          Classify{}(p[k], std::numeric_limits<double>::min(), s);
          if (!check_only) p[k] *= inv_scale;
        }
      } else {
        const float tiny = smallest_normal<T>();
        for (int64_t k = b; k < e; ++k) {
          const float v = static_cast<float>(p[k]);
          Classify{}(v, tiny, s);
          if (!check_only) p[k] = static_cast<T>(v * inv32);
        }
      }
    });
  });
}

UnscaleStats unscale_grads_to(const Tensors& src, const Tensors& dst, double inv_scale, bool accumulate) {
  MG_CHECK(src.size() == dst.size(), Error, "unscale: ", src.size(), " source gradients but ", dst.size(),
           " destinations");
  for (std::size_t i = 0; i < src.size(); ++i) {
    if (!src[i].defined()) continue;
    check_grad(src[i], i, "gradient");
    MG_CHECK(src[i].dtype() != DType::F64, DTypeError, "unscale: gradient ", i, " is f64; f64 parameters keep no f32 master");
    MG_CHECK(dst[i].defined() && dst[i].dtype() == DType::F32 && dst[i].numel() == src[i].numel() &&
                 dst[i].is_contiguous() && dst[i].device() == src[i].device(),
             Error, "unscale: master gradient ", i, " must be a contiguous f32 tensor of ", src[i].numel(),
             " values, got ", dst[i].defined() ? describe(dst[i]) : "undefined");
  }
  const float inv32 = float(inv_scale);
  return for_each_chunk(src, [&](std::size_t t, int64_t b, int64_t e, UnscaleStats& s) {
    float* out = dst[t].data<float>();
    visit_floating(src[t].dtype(), "unscale", [&]<typename T>() {
      if constexpr (!std::is_same_v<T, double>) {
        const T* p = src[t].data<T>();
        const float tiny = smallest_normal<T>();
        for (int64_t k = b; k < e; ++k) {
          const float v = static_cast<float>(p[k]);
          Classify{}(v, tiny, s);
          out[k] = accumulate ? out[k] + v * inv32 : v * inv32;
        }
      }
    });
  });
}

UnscaleStats& operator+=(UnscaleStats& a, const UnscaleStats& b) {
  a.values += b.values;
  a.zeros += b.zeros;
  a.underflowed += b.underflowed;
  a.nonfinite += b.nonfinite;
  return a;
}

UnscaleStats unscale_optimizer_grads(optim::Optimizer& opt, double inv_scale, bool accumulate) {
  if (!opt.has_master_weights()) return unscale_grads(opt.grads(), inv_scale);
  Tensors model_grads, master_grads, own_grads;
  std::unordered_set<const TensorImpl*> masters;
  for (const optim::MasterPair& m : opt.master_pairs()) {
    masters.insert(m.master.impl());
    const Tensor g = m.model.grad();
    if (!g.defined()) continue;
    Tensor mg = m.master.grad();
    if (!mg.defined() || mg.grad_fn()) {
      mg = accumulate ? zeros(m.master.shape(), {.dtype = DType::F32, .device = m.master.device()})
                      : empty(m.master.shape(), {.dtype = DType::F32, .device = m.master.device()});
      m.master.set_grad(mg);
    }
    model_grads.push_back(contiguous(g));
    master_grads.push_back(mg);
  }
  // Parameters the optimizer steps directly (f32 batch norm at O2) are unscaled in place.
  for (const Tensor& p : opt.parameters()) {
    if (!masters.count(p.impl())) own_grads.push_back(p.grad());
  }
  UnscaleStats stats = unscale_grads_to(model_grads, master_grads, inv_scale, accumulate);
  stats += unscale_grads(own_grads, inv_scale);
  opt.mark_master_grads_synced();
  return stats;
}

}  // namespace mg::amp
