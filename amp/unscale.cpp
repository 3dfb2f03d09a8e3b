#include "mixgrad/amp/unscale.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <unordered_set>
#include <vector>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/half.h"
#include "mixgrad/core/macros.h"
#include "mixgrad/core/multi_tensor_kernels.h"
#include "mixgrad/core/parallel.h"
#include "mixgrad/core/visit_dtype.h"
#include "mixgrad/ops/layout.h"
#include "mixgrad/ops/ops.h"
#include "mixgrad/optim/generic_path.h"
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
  MG_CHECK(is_dense_layout(g), Error, "unscale: ", what, " ", i, " is neither contiguous nor channels-last: ",
           describe(g));
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

// ---- the generic path (optim/generic_path.h): the same math with public ops, any device ----

// The statistics of one gradient before unscaling, as Classify counts them, on its device:
// [3] i64 = {finite values, zeros, |v| < smallest normal (zeros included)}. x is the gradient
// in opmath (f32, f64 for f64).
Tensor classify_counts(const Tensor& x, double tiny, double max) {
  const Tensor a = abs(x);
  return stack({sum(a.le(max)), sum(a.eq(0.0)), sum(a.lt(tiny))});  // NaN compares false everywhere
}

// The statistics of a generic unscale while they are still on the device.
struct DeviceCounts {
  Tensors counts;  // one classify_counts() [3] i64 per gradient
  int64_t values = 0;
};

// Sums the per-gradient counts and reads them to the host: the one synchronisation of a generic
// unscale (DESIGN §6 wants the found-inf decision as a device value; that comes with the fused
// CUDA kernels).
UnscaleStats read_counts(const DeviceCounts& d) {
  UnscaleStats s;
  s.values = d.values;
  if (d.counts.empty()) return s;
  const int64_t values = d.values;
  const Tensor total = contiguous(to(sum(stack(d.counts), {0}), Device::cpu()));
  const int64_t* c = total.data<int64_t>();
  s.nonfinite = values - c[0];
  s.zeros = c[1];
  s.underflowed = c[2] - c[1];
  return s;
}

double smallest_normal_of(DType dt) {
  if (dt == DType::F64) return std::numeric_limits<double>::min();
  return dt == DType::F16 ? 6.103515625e-05 : double(std::numeric_limits<float>::min());
}
double largest_of(DType dt) {
  return dt == DType::F64 ? std::numeric_limits<double>::max() : double(std::numeric_limits<float>::max());
}

// In place: g *= inv_scale in opmath, rounded once (f32 multiplies by float(inv_scale), as the
// fused loop, so the result is bitwise the fused one; f64 by inv_scale itself).
void unscale_grads_generic(const Tensors& grads, double inv_scale, bool check_only, DeviceCounts& out) {
  NoGradGuard no_grad;
  optim::common_device(grads, "unscale", "gradient");
  Tensors& counts = out.counts;
  int64_t& values = out.values;
  for (const Tensor& g : grads) {
    if (!g.defined()) continue;
    const DType opmath = g.dtype() == DType::F64 ? DType::F64 : DType::F32;
    const Tensor x = to(g, opmath);
    counts.push_back(classify_counts(x, smallest_normal_of(g.dtype()), largest_of(g.dtype())));
    values += g.numel();
    if (check_only) continue;
    if (opmath == DType::F64) Tensor(g).mul_(inv_scale);
    else Tensor(g).copy_(x * double(float(inv_scale)));
  }
}

// dst = f32(src) * float(inv_scale) (+ dst): the add op computes dst + alpha * src as the fused
// loop's dst + v * inv32 (both may contract it into one FMA).
void unscale_grads_to_generic(const Tensors& src, const Tensors& dst, double inv_scale, bool accumulate,
                              DeviceCounts& out) {
  NoGradGuard no_grad;
  optim::common_device(src, "unscale", "gradient");
  const double inv32 = double(float(inv_scale));
  Tensors& counts = out.counts;
  int64_t& values = out.values;
  for (std::size_t i = 0; i < src.size(); ++i) {
    if (!src[i].defined()) continue;
    const Tensor x = to(src[i], DType::F32);
    counts.push_back(classify_counts(x, smallest_normal_of(src[i].dtype()), largest_of(src[i].dtype())));
    values += src[i].numel();
    Tensor d = dst[i];
    if (accumulate) d.add_(x, inv32);
    else d.copy_(x * inv32);
  }
}

void check_grads_arg(const Tensors& grads) {
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (grads[i].defined()) check_grad(grads[i], i, "gradient");
  }
}

void check_to_args(const Tensors& src, const Tensors& dst) {
  MG_CHECK(src.size() == dst.size(), Error, "unscale: ", src.size(), " source gradients but ", dst.size(),
           " destinations");
  for (std::size_t i = 0; i < src.size(); ++i) {
    if (!src[i].defined()) continue;
    check_grad(src[i], i, "gradient");
    MG_CHECK(src[i].dtype() != DType::F64, DTypeError, "unscale: gradient ", i, " is f64; f64 parameters keep no f32 master");
    MG_CHECK(dst[i].defined() && dst[i].dtype() == DType::F32 && dst[i].shape() == src[i].shape() &&
                 is_dense_layout(dst[i]) && same_memory_order(dst[i], src[i]) && dst[i].device() == src[i].device(),
             Error, "unscale: master gradient ", i, " must be an f32 tensor of shape ", shape_str(src[i].shape()),
             " laid out as the gradient ", describe(src[i]), ", got ", dst[i].defined() ? describe(dst[i]) : "undefined");
  }
}

}  // namespace

UnscaleStats unscale_grads(const Tensors& grads, double inv_scale, bool check_only) {
  check_grads_arg(grads);
  if (optim::use_generic_path(grads)) {
    DeviceCounts counts;
    unscale_grads_generic(grads, inv_scale, check_only, counts);
    return read_counts(counts);
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
        // Classify's counts, branch-free so that the loop vectorizes (counts of one chunk, at most
        // 2^16, fit an int). A scale of 1 stores nothing: v * 1 is v (O0 and O3's static scale).
        const float tiny = smallest_normal<T>(), big = std::numeric_limits<float>::max();
        int nonfinite = 0, zeros = 0, below = 0;
        for (int64_t k = b; k < e; ++k) {
          const float a = std::fabs(static_cast<float>(p[k]));
          nonfinite += !(a <= big);  // inf or NaN
          zeros += a == 0.0f;
          below += a < tiny;         // zeros included
        }
        s.nonfinite += nonfinite;
        s.zeros += zeros;
        s.underflowed += below - zeros;
        if (!check_only && inv32 != 1.0f) {
          for (int64_t k = b; k < e; ++k) p[k] = static_cast<T>(static_cast<float>(p[k]) * inv32);
        }
      }
    });
  });
}

UnscaleStats unscale_grads_to(const Tensors& src, const Tensors& dst, double inv_scale, bool accumulate) {
  check_to_args(src, dst);
  if (optim::use_generic_path(src)) {
    DeviceCounts counts;
    unscale_grads_to_generic(src, dst, inv_scale, accumulate, counts);
    return read_counts(counts);
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

namespace {
struct Reducers {
  NonfiniteReducer base;
  std::vector<std::pair<int64_t, NonfiniteReducer>> pushed;  // (handle, reducer), oldest first
  int64_t next_handle = 0;
};
Reducers& reducers() {
  static Reducers r;
  return r;
}
const NonfiniteReducer& installed_reducer() {
  const Reducers& r = reducers();
  return r.pushed.empty() ? r.base : r.pushed.back().second;
}
// The local count, or the count every process agreed on.
UnscaleStats agreed(UnscaleStats s) {
  if (const NonfiniteReducer& r = installed_reducer(); r.count) s.nonfinite = r.count(s.nonfinite);
  return s;
}
}  // namespace

NonfiniteReducer set_nonfinite_reducer(NonfiniteReducer reducer) {
  NonfiniteReducer previous = std::move(reducers().base);
  reducers().base = std::move(reducer);
  return previous;
}

int64_t push_nonfinite_reducer(NonfiniteReducer reducer) {
  Reducers& r = reducers();
  r.pushed.emplace_back(r.next_handle, std::move(reducer));
  return r.next_handle++;
}

void remove_nonfinite_reducer(int64_t handle) {
  auto& pushed = reducers().pushed;
  const auto it = std::find_if(pushed.begin(), pushed.end(), [&](const auto& p) { return p.first == handle; });
  MG_CHECK(it != pushed.end(), Error, "remove_nonfinite_reducer: no reducer has handle ", handle);
  pushed.erase(it);
}

const NonfiniteReducer& nonfinite_reducer() { return installed_reducer(); }

UnscaleStats& operator+=(UnscaleStats& a, const UnscaleStats& b) {
  a.values += b.values;
  a.zeros += b.zeros;
  a.underflowed += b.underflowed;
  a.nonfinite += b.nonfinite;
  return a;
}

namespace {
// The gradients of one unscale of `opt`: model -> master pairs (master gradients created as
// unscale_optimizer_grads needs them) and the gradients of parameters stepped directly.
struct OptimizerGrads {
  Tensors model_grads, master_grads, own_grads;
};
OptimizerGrads optimizer_grads(optim::Optimizer& opt, bool accumulate) {
  OptimizerGrads out;
  if (!opt.has_master_weights()) {
    out.own_grads = opt.grads();
    return out;
  }
  Tensors& model_grads = out.model_grads;
  Tensors& master_grads = out.master_grads;
  Tensors& own_grads = out.own_grads;
  optim::lay_masters_like_models(opt.master_pairs());  // a model moved to channels-last since
  std::unordered_set<const TensorImpl*> masters;
  for (const optim::MasterPair& m : opt.master_pairs()) {
    masters.insert(m.master.impl());
    const Tensor g = m.model.grad();
    if (!g.defined()) {
      // No gradient this iteration: none for the master either (a stale one would be stepped
      // again), unless earlier losses of this iteration accumulated into it.
      if (!accumulate) m.master.set_grad(Tensor());
      continue;
    }
    Tensor mg = m.master.grad();
    if (!mg.defined() || mg.grad_fn() || !same_memory_order(mg, m.master)) {
      // In the master's layout (a channels-last weight's master and gradients are channels-last).
      mg = empty(m.master.shape(),
                 {.dtype = DType::F32, .device = m.master.device(), .memory_format = layout_of(m.master)});
      if (accumulate) mg.zero_();
      m.master.set_grad(mg);
    }
    model_grads.push_back(in_layout_of(g, m.master));
    master_grads.push_back(mg);
  }
  // Parameters the optimizer steps directly (f32 batch norm at O2) are unscaled in place.
  for (const Tensor& p : opt.parameters()) {
    if (!masters.count(p.impl())) own_grads.push_back(p.grad());
  }
  return out;
}
}  // namespace

bool unscale_optimizer_grads_fused(optim::Optimizer& opt, const DeviceUnscaleRefs& refs, int64_t* values,
                                   bool accumulate) {
  Tensors all = opt.parameters();
  for (const optim::MasterPair& m : opt.master_pairs()) all.push_back(m.model);
  const Device dev = optim::common_device(all, "unscale", "parameter");
  const MultiTensorKernels* k = multi_tensor_kernels(dev.type);
  // A non-finite reducer (DistributedDataParallel's agreement across ranks) without a device path
  // needs the count on the host: the synchronising path runs it.
  const NonfiniteReducer& reducer = installed_reducer();
  if (dev.is_cpu() || !k || (reducer && !reducer.flag)) return false;
  MG_ASSERT(refs.found_inf.defined() && refs.found_inf.numel() == 1 && refs.found_inf.dtype() == DType::F32,
            "unscale_optimizer_grads_fused: found_inf must be a [1] f32 tensor");
  OptimizerGrads g = optimizer_grads(opt, accumulate);  // model gradients in their masters' layouts
  check_to_args(g.model_grads, g.master_grads);
  check_grads_arg(g.own_grads);
  int64_t n = 0;
  for (const Tensor& t : g.model_grads) n += t.defined() ? t.numel() : 0;
  for (const Tensor& t : g.own_grads) n += t.defined() ? t.numel() : 0;
  if (!g.model_grads.empty()) {
    k->unscale({.src = g.model_grads, .dst = g.master_grads, .accumulate = accumulate, .scale = refs.scale,
                .found_inf = refs.found_inf.data<float>(), .counts = refs.counts});
  }
  if (!g.own_grads.empty()) {
    k->unscale({.src = g.own_grads, .scale = refs.scale, .found_inf = refs.found_inf.data<float>(), .counts = refs.counts});
    for (const Tensor& t : g.own_grads) {
      if (t.defined()) t.bump_version();
    }
  }
  for (const Tensor& t : g.master_grads) t.bump_version();
  if (opt.has_master_weights()) opt.mark_master_grads_synced();
  // The skip decision agreed across processes: the flag's maximum, after the kernels on this stream.
  if (reducer.flag) reducer.flag(refs.found_inf);
  *values = n;
  return true;
}

UnscaleStats unscale_optimizer_grads(optim::Optimizer& opt, double inv_scale, bool accumulate) {
  if (!opt.has_master_weights()) return agreed(unscale_grads(opt.grads(), inv_scale));
  OptimizerGrads g = optimizer_grads(opt, accumulate);
  Tensors& model_grads = g.model_grads;
  Tensors& master_grads = g.master_grads;
  Tensors& own_grads = g.own_grads;
  UnscaleStats stats;
  if (optim::use_generic_path(model_grads) || optim::use_generic_path(own_grads)) {
    // Both passes' counts are read together: one synchronisation per unscale.
    check_to_args(model_grads, master_grads);
    check_grads_arg(own_grads);
    Tensors all = model_grads;
    all.insert(all.end(), own_grads.begin(), own_grads.end());
    optim::common_device(all, "unscale", "gradient");
    DeviceCounts counts;
    unscale_grads_to_generic(model_grads, master_grads, inv_scale, accumulate, counts);
    unscale_grads_generic(own_grads, inv_scale, /*check_only=*/false, counts);
    stats = read_counts(counts);
  } else {
    stats = unscale_grads_to(model_grads, master_grads, inv_scale, accumulate);
    stats += unscale_grads(own_grads, inv_scale);
  }
  opt.mark_master_grads_synced();
  return agreed(stats);
}

void check_no_f16_in_place(const optim::Optimizer& opt, const char* who) {
  // With master weights parameters() are the f32 masters plus the parameters stepped directly.
  const Tensors params = opt.parameters();
  for (std::size_t i = 0; i < params.size(); ++i) {
    const Tensor g = params[i].grad();
    if (!g.defined() || g.dtype() != DType::F16) continue;
    MG_THROW(Error, who, ": attempting to unscale f16 gradients in place: parameter ", i, " of this ", opt.name(),
             " optimizer is ", describe(params[i]), " without an f32 master weight; dividing its f16 gradient by the "
             "scale rounds the small values the scale had saved back to zero",
             "\n  hint: keep f32 master weights (amp opt_level O2, or optimizer.use_master_weights()), train in bf16, "
             "or use a static loss scale (amp loss_scale = 128) or none (GradScaler{.enabled = false})");
  }
}

}  // namespace mg::amp
