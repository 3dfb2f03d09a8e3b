// The oneDNN convolution path (see ops/cpu/conv_onednn.h): primitives for conv2d forward (+ bias),
// backward-data and backward-weights on f32 and bf16, cached per shape, dtype and thread count in
// a small LRU, run on our NCHW tensors through cached reorders and per-thread scratch buffers.
//
// Decision: oneDNN runs every direction of f32 and bf16 on the layouts it prefers (format_tag::any:
// nChw16c for f32, AMX-friendly blocks for bf16), with reorders from and to NCHW around it; only
// dense first layers stay on im2col (forward below 3 input channels, backward-data below 8). bf16
// reads bf16 and accumulates in f32; forward and backward-data round on store (oneDNN, to nearest
// even), conv_transpose2d's bias is added to an f32 result that we round once, and the weight
// gradient is written in f32 and rounded once by us. The weight gradient runs one single-threaded
// primitive per slice of weight_grad_slice(N) images (in parallel over slices) and combines the f32
// partials by the summation rule's pairwise tree, so it does not depend on the thread count
// (oneDNN's sum within a slice is its own). oneDNN's own threading of that kernel joins its
// threads with spin barriers, many per call, and on this shared 2-core
// host a call then took 3-2700 ms instead of 2-10 ms (with 1 thread: 68-77 vs 3 GFLOP/s at
// 16->32 s2, batch 16). f16 stays on im2col (oneDNN 2.6 has no f16 convolution on this CPU: the
// primitive descriptor is unimplemented), f64 too.
//
// Measured on 2 threads, batch 128, the ResNet-20 shapes (Cin>Cout HxW stride), alternating the
// paths call by call in one process on the busy host (load 8-10; the FMA peak read 85-90 of ~320
// GFLOP/s); median GFLOP/s of 7 calls, two runs: im2col -> chosen path (oneDNN on nchw/oihw
// without reorders, "plain", for reference: its gemm-based kernels lose to the reorders):
//                      f32                                bf16
//   16>16 28^2 fwd     23 -> 47-50 (plain 16-17)         10-17 -> 56-107 (plain 9-16)
//              bwd_d   18-19 -> 46-48 (11)               11-20 -> 60-99 (6-12)
//              bwd_w   4 -> 33-37 (11)                   3 -> 61-75 (7)
//   16>32 28^2 s2 fwd  10 -> 27-28 (10)                  12-14 -> 46-63 (12-26)
//              bwd_d   10 -> 27 (10)                     11-18 -> 31-49 (10-19)
//              bwd_w   6 -> 21-26 (10)                   8-11 -> 30-48 (13-19)
//   32>32 14^2 fwd     15-20 -> 47-48 (20-21)            15 -> 118-120 (27-28)
//              bwd_d   13-22 -> 36-54 (12-16)            20 -> 171-309 (19-20)
//              bwd_w   11 -> 52-57 (22-23)               7-9 -> 74-116 (15-26)
//   32>64 14^2 s2 fwd  16-17 -> 29-45 (15-25)            22-25 -> 160-186 (33-42)
//              bwd_d   16-23 -> 39-42 (19-22)            24-26 -> 57-141 (23-29)
//              bwd_w   13-14 -> 38-41 (24-25)            17-18 -> 30-42 (29-30)
//   64>64 7^2  fwd     24-28 -> 58-64 (29)               19-22 -> 90-203 (32-48)
//              bwd_d   25-27 -> 58 (24-28)               22-28 -> 97-333 (27-30)
//              bwd_w   14-16 -> 59-63 (29-30)            13-15 -> 116-181 (29-30)
//   1>16 28^2  fwd, bwd_d: im2col 23-31 vs oneDNN blocked 5-22 (f32), 17-25 vs 10-21 (bf16);
//              bwd_w   4 -> 7-20 (f32), 4 -> 6-14 (bf16)
// At batch 16-64 the ranking is the same (bwd_w: 1>16 10 -> 24, 16>32 s2 24 -> 59 GFLOP/s). The
// conv itself runs near 60% of the FMA peak in f32 and at 760-1500 GFLOP/s in bf16 on AMX (quiet
// moments); reorders to and from nChw16c cost ~0.5 ms per 6.4 MB tensor on top.
// ResNet-20 training step (bench_nn, f32, batch 128), old vs new alternately: 1966, 2175 ms ->
// 834, 813 ms; batch 16 (--quick): 271, 198 -> 107, 98 ms.
//
// bf16 without AMX: on a Xeon with AVX512-BF16 and AVX512-FP16 but no AMX exposed (oneDNN ISA
// avx512_core_bf16; 1 thread, batch 128, throwaway probe: best of 5x5 calls, 2026-12-03), ms per
// call forward / backward-data / backward-weights, oneDNN's bf16 primitive -> bf16 widened to f32
// for the f32 primitive and rounded once (f32 itself in brackets):
//   16>16 28^2     7.7 / 7.8 / 8.2 -> 7.7 / 8.0 / 8.6   (5.7 / 6.8 / 6.2)
//   16>32 28^2 s2  4.1 / 4.3 / 4.4 -> 4.3 / 4.5 / 5.0   (3.2 / 3.6 / 3.4)
//   32>32 14^2     6.6 / 6.3 / 7.9 -> 6.0 / 6.1 / 5.9   (4.7 / 4.1 / 3.3)
//   64>64 7^2      5.7 / 5.9 / 8.1 -> 3.5 / 3.3 / 4.5   (4.1 / 3.9 / 4.2)
// over ResNet-20's layers about 360 -> 310 ms per step. So bf16 runs natively only where oneDNN has
// AMX, and is widened like f16 elsewhere.
#include "mixgrad/ops/cpu/conv_onednn.h"

#include <oneapi/dnnl/dnnl_debug.h>

#include <algorithm>
#include <array>
#include <omp.h>
#include <atomic>
#include <cstddef>
#include <dnnl.hpp>
#include <memory>
#include <vector>

#include "mixgrad/core/convert.h"
#include "mixgrad/core/error.h"
#include "mixgrad/core/parallel.h"
#include "mixgrad/ops/cpu/leaf_sum.h"
#include "mixgrad/ops/cpu/onednn_matmul.h"  // onednn_amx_available
#include "mixgrad/ops/cpu/onednn_runtime.h"

namespace mg::cpu {
namespace {

using dnnl::memory;
using Tag = memory::format_tag;
using Dt = memory::data_type;

std::atomic<ConvPath> g_path{ConvPath::Auto};
std::atomic<int64_t> g_calls{0};

// How the primitive sees its tensors: our plain NCHW / OIHW memory, or the layouts oneDNN prefers
// (format_tag::any), reordered from and to ours around the primitive.
enum class Layout { Plain, Blocked };

// The measured choice (table at the top of this file): whether oneDNN runs this direction and
// geometry (the same for f32 and bf16), and on which layouts.
bool auto_choice(ConvDir dir, const ConvGeom& g, Layout& layout) {
  layout = Layout::Blocked;
  if (g.groups > 1) return true;
  // Dense convs over a few input channels (a network's first layer) are memory-bound; im2col's
  // columns cost less there than oneDNN's reorders, below these input channel counts.
  switch (dir) {
    case ConvDir::Forward: return g.C >= 3;
    case ConvDir::BackwardData: return g.C >= 8;
    case ConvDir::BackwardWeights: return true;
  }
  return true;
}

// Whether oneDNN runs this conv under the current path, and on which layouts.
bool pick(ConvDir dir, DType dt, const ConvGeom& g, Layout& layout) {
  if (dt != DType::F32 && dt != DType::BF16) return false;
  // Inside a parallel region oneDNN runs its primitives on one thread; im2col is made for that.
  if (in_parallel_region()) return false;
  // Empty tensors stay on im2col, which writes the zeros a weight gradient over N = 0 needs.
  if (g.N == 0 || g.C == 0 || g.O == 0 || g.Ho <= 0 || g.Wo <= 0) return false;
  // oneDNN checks (H + pad_l + pad_r - keff) / s + 1 == Ho with the symmetric padding we pass;
  // a conv_transpose2d whose output_padding is not below its stride has a different Ho.
  const int64_t keff_h = g.dh * (g.kH - 1) + 1, keff_w = g.dw * (g.kW - 1) + 1;
  if ((g.H + 2 * g.ph - keff_h) / g.sh + 1 != g.Ho || (g.W + 2 * g.pw - keff_w) / g.sw + 1 != g.Wo) return false;
  switch (g_path.load(std::memory_order_relaxed)) {
    case ConvPath::Im2col: return false;
    case ConvPath::OnednnPlain: layout = Layout::Plain; return true;
    case ConvPath::OnednnBlocked: layout = Layout::Blocked; return true;
    case ConvPath::Auto: break;
  }
  // bf16 convolves natively where its dot products outrun f32 FMAs (AMX, AMD's AVX512-BF16);
  // elsewhere the kernels widen it to f32 for the f32 primitive (conv_kernels.cpp), measured faster
  // on Intel processors with AVX512-BF16 alone (the table).
  if (dt == DType::BF16 && !native_bf16_preferred()) return false;
  return auto_choice(dir, g, layout);
}

// ---- engine, streams, errors: ops/cpu/onednn_runtime.h ----

const dnnl::engine& cpu_engine() { return onednn::engine(); }
dnnl::stream& cpu_stream() { return onednn::stream(); }
using onednn::rethrow;

// ---- per-thread scratch buffers (64-byte aligned), reused across calls ----

using onednn::Buffer;

// Buffers beyond this size are given back after the call rather than kept.
constexpr std::size_t kKeepBytes = std::size_t(64) << 20;

// Slots: 0..2 reordered arguments, 3 the f32 result of conv_transpose2d before its bias, 4 the
// primitive's scratchpad. Threads of our parallel_for keep theirs too.
struct Workspace {
  std::array<Buffer, 5> slot;
  void trim() {
    for (Buffer& b : slot) {
      if (b.size > kKeepBytes) b = Buffer();
    }
  }
};
Workspace& workspace() {
  thread_local Workspace w;
  return w;
}

// ---- primitives, cached by shape and dtype ----

// One argument of a primitive: the memory we hold (`user`, plain) and the one the primitive reads
// or writes (`inner`); when they differ, a cached reorder between them.
struct Arg {
  int id = 0;
  bool output = false;
  memory::desc user, inner;
  dnnl::reorder to_inner, to_user;
  bool reordered() const { return user != inner; }
};

struct Plan {
  bool ok = false;  // false: oneDNN has no implementation for this conv
  dnnl::primitive prim;
  memory::desc scratchpad;
  std::vector<Arg> args;
};

using Key = std::array<int64_t, 22>;
// A small LRU of plans (onednn_runtime.h); plans are shared so an evicted one stays valid while a
// call uses it.
using PlanCache = onednn::LruCache<Key, Plan, onednn::ArrayHash>;

PlanCache& plan_cache() {
  static PlanCache c(128);  // its constructor makes the engine first, so it is destroyed after
  return c;
}

Dt dnnl_dtype(DType dt) { return dt == DType::BF16 ? Dt::bf16 : Dt::f32; }

// oneDNN sizes its kernels for the thread count at creation, so that is part of the key.
Key make_key(ConvDir dir, DType dt, Layout layout, bool bias, bool nhwc, int threads, const ConvGeom& g) {
  return {int64_t(dir), int64_t(dt), int64_t(layout), bias ? 1 : 0, nhwc ? 1 : 0, threads, g.N, g.C, g.H, g.W, g.O,
          g.kH, g.kW, g.Ho, g.Wo, g.sh, g.sw, g.ph, g.pw, g.dh, g.dw, g.groups};
}

// Descriptors of one conv: activations [N, C, H, W] / [N, O, Ho, Wo] and weights [O, C/g, kH, kW]
// (as [g, O/g, C/g, kH, kW] when grouped), plain or `any`. Channels-last activations (`nhwc`) are
// always described as nhwc — the primitive reads and writes them in place, with no reorder, on
// both paths; only the weights follow `layout`.
struct Descs {
  memory::dims src, wei, dst, strides, dilates, pad_l, pad_r;
  bool nhwc = false;
  // An activation (src or dst) and the weights, told apart by role: an activation's dims may
  // equal the weights' ([4, 3, 3, 3] against a 4x3x3x3 kernel), which once made an NHWC
  // activation read as NCHW.
  memory::desc act(const memory::dims& d, Dt t, Layout layout) const {
    if (nhwc) return memory::desc(d, t, Tag::nhwc);
    return memory::desc(d, t, layout == Layout::Blocked ? Tag::any : Tag::nchw);
  }
  memory::desc weights(Dt t, Layout layout) const {
    if (layout == Layout::Blocked) return memory::desc(wei, t, Tag::any);
    return memory::desc(wei, t, wei.size() == 5 ? Tag::goihw : Tag::oihw);
  }
};

Descs descs(const ConvGeom& g, bool nhwc) {
  Descs d;
  d.nhwc = nhwc;
  d.src = {g.N, g.C, g.H, g.W};
  d.dst = {g.N, g.O, g.Ho, g.Wo};
  if (g.groups > 1) {
    d.wei = {g.groups, g.og(), g.cg(), g.kH, g.kW};
  } else {
    d.wei = {g.O, g.C, g.kH, g.kW};
  }
  d.strides = {g.sh, g.sw};
  d.dilates = {g.dh - 1, g.dw - 1};  // oneDNN counts the gaps: dilation 1 is 0
  d.pad_l = {g.ph, g.pw};
  d.pad_r = {g.ph, g.pw};
  return d;
}

using onednn::user_scratchpad;  // ours, per thread: safe for concurrent calls

// The forward primitive descriptor (also the hint of the backward ones); empty when unimplemented.
dnnl::convolution_forward::primitive_desc forward_pd(const Descs& d, Dt t, Layout layout, bool bias) {
  const memory::desc bias_md = bias ? memory::desc({d.dst[1]}, t, Tag::x) : memory::desc();
  const dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_training, dnnl::algorithm::convolution_direct,
                                             d.act(d.src, t, layout), d.weights(t, layout), bias_md,
                                             d.act(d.dst, t, layout), d.strides, d.dilates, d.pad_l, d.pad_r);
  return dnnl::convolution_forward::primitive_desc(desc, user_scratchpad(), cpu_engine(), true);
}

void add_arg(Plan& p, int id, bool output, const memory::desc& user, const memory::desc& inner) {
  Arg a;
  a.id = id;
  a.output = output;
  a.user = user;
  a.inner = inner;
  if (a.reordered()) {
    const dnnl::engine& e = cpu_engine();
    if (output) {
      a.to_user = dnnl::reorder(dnnl::reorder::primitive_desc(e, inner, e, user));
    } else {
      a.to_inner = dnnl::reorder(dnnl::reorder::primitive_desc(e, user, e, inner));
    }
  }
  p.args.push_back(a);
}

std::shared_ptr<const Plan> make_plan(ConvDir dir, DType dt, Layout layout, bool bias, bool nhwc,
                                      const ConvGeom& g) {
  auto p = std::make_shared<Plan>();
  const Descs d = descs(g, nhwc);
  const Dt t = dnnl_dtype(dt);
  try {
    const auto fwd = forward_pd(d, t, layout, dir == ConvDir::Forward && bias);
    if (!fwd) return p;
    if (dir == ConvDir::Forward) {
      p->prim = dnnl::convolution_forward(fwd);
      p->scratchpad = fwd.scratchpad_desc();
      add_arg(*p, DNNL_ARG_SRC, false, d.act(d.src, t, Layout::Plain), fwd.src_desc());
      add_arg(*p, DNNL_ARG_WEIGHTS, false, d.weights(t, Layout::Plain), fwd.weights_desc());
      if (bias) add_arg(*p, DNNL_ARG_BIAS, false, fwd.bias_desc(), fwd.bias_desc());
      add_arg(*p, DNNL_ARG_DST, true, d.act(d.dst, t, Layout::Plain), fwd.dst_desc());
    } else if (dir == ConvDir::BackwardData) {
      // With a bias (conv_transpose2d) bf16 writes f32, to add the bias in f32 and round once.
      const Dt out = bias ? Dt::f32 : t;
      const dnnl::convolution_backward_data::desc desc(dnnl::algorithm::convolution_direct, d.act(d.src, out, layout),
                                                       d.weights(t, layout), d.act(d.dst, t, layout), d.strides,
                                                       d.dilates, d.pad_l, d.pad_r);
      const dnnl::convolution_backward_data::primitive_desc bwd(desc, user_scratchpad(), cpu_engine(), fwd, true);
      if (!bwd) return p;
      p->prim = dnnl::convolution_backward_data(bwd);
      p->scratchpad = bwd.scratchpad_desc();
      add_arg(*p, DNNL_ARG_DIFF_DST, false, d.act(d.dst, t, Layout::Plain), bwd.diff_dst_desc());
      add_arg(*p, DNNL_ARG_WEIGHTS, false, d.weights(t, Layout::Plain), bwd.weights_desc());
      add_arg(*p, DNNL_ARG_DIFF_SRC, true, d.act(d.src, out, Layout::Plain), bwd.diff_src_desc());
    } else {
      // The weight gradient accumulates in f32 and is written in f32; bf16 is rounded once by us.
      const dnnl::convolution_backward_weights::desc desc(
          dnnl::algorithm::convolution_direct, d.act(d.src, t, layout), d.weights(Dt::f32, layout),
          d.act(d.dst, t, layout), d.strides, d.dilates, d.pad_l, d.pad_r);
      const dnnl::convolution_backward_weights::primitive_desc bwd(desc, user_scratchpad(), cpu_engine(), fwd,
                                                                   true);
      if (!bwd) return p;
      p->prim = dnnl::convolution_backward_weights(bwd);
      p->scratchpad = bwd.scratchpad_desc();
      add_arg(*p, DNNL_ARG_SRC, false, d.act(d.src, t, Layout::Plain), bwd.src_desc());
      add_arg(*p, DNNL_ARG_DIFF_DST, false, d.act(d.dst, t, Layout::Plain), bwd.diff_dst_desc());
      add_arg(*p, DNNL_ARG_DIFF_WEIGHTS, true, d.weights(Dt::f32, Layout::Plain), bwd.diff_weights_desc());
    }
  } catch (const dnnl::error& e) {
    rethrow(e, "convolution primitive creation");
  }
  p->ok = true;
  return p;
}

// Runs the plan on our memory: ptrs[i] is the plain buffer of plan.args[i].
void execute(const Plan& plan, const std::vector<void*>& ptrs) {
  Workspace& ws = workspace();
  const dnnl::engine& eng = cpu_engine();
  dnnl::stream& s = cpu_stream();
  try {
    std::unordered_map<int, memory> args;
    std::vector<std::pair<const Arg*, std::pair<memory, memory>>> outputs;
    int slot = 0;
    for (std::size_t i = 0; i < plan.args.size(); ++i) {
      const Arg& a = plan.args[i];
      memory user(a.user, eng, ptrs[i]);
      if (!a.reordered()) {
        args.emplace(a.id, user);
        continue;
      }
      memory inner(a.inner, eng, ws.slot[std::size_t(slot++)].get(a.inner.get_size()));
      if (a.output) {
        outputs.push_back({&a, {inner, user}});
      } else {
        a.to_inner.execute(s, user, inner);
      }
      args.emplace(a.id, inner);
    }
    if (plan.scratchpad.get_size() > 0) {
      args.emplace(DNNL_ARG_SCRATCHPAD, memory(plan.scratchpad, eng, ws.slot[4].get(plan.scratchpad.get_size())));
    }
    plan.prim.execute(s, args);
    for (auto& [a, mem] : outputs) a->to_user.execute(s, mem.first, mem.second);
    s.wait();
  } catch (const dnnl::error& e) {
    rethrow(e, "convolution");
  }
}

// Whether a dense activation is channels-last (the kernels pass dense NCHW or dense NHWC only;
// a tensor dense in both, such as [N, C, 1, 1], is the same bytes either way and reads as NCHW).
bool is_nhwc(const Tensor& t) { return !t.is_contiguous() && t.is_contiguous(MemoryFormat::ChannelsLast); }

// Sets the calling thread's OpenMP thread count for a scope (oneDNN reads it when it creates a
// primitive). Only this thread's: set_num_threads is process-wide, and two threads making plans at
// once could leave the whole process on one thread (each restoring what the other had set).
class ThreadsGuard {
 public:
  explicit ThreadsGuard(int n) : prev_(omp_get_max_threads()) { omp_set_num_threads(n); }
  ~ThreadsGuard() { omp_set_num_threads(prev_); }
  ThreadsGuard(const ThreadsGuard&) = delete;
  ThreadsGuard& operator=(const ThreadsGuard&) = delete;

 private:
  int prev_;
};

// The cached plan for this conv, or nullptr when the current path does not run oneDNN here.
// `single_thread`: a primitive for one thread, to run inside our own parallel_for.
// `nhwc`: the activations are channels-last (dense NHWC), else dense NCHW.
std::shared_ptr<const Plan> plan_for(ConvDir dir, DType dt, bool bias, bool nhwc, const ConvGeom& g,
                                     bool single_thread = false) {
  Layout layout = Layout::Plain;
  if (!pick(dir, dt, g, layout)) return nullptr;
  const int threads = single_thread ? 1 : num_threads();
  std::shared_ptr<const Plan> plan = plan_cache().get(make_key(dir, dt, layout, bias, nhwc, threads, g), [&] {
    const ThreadsGuard guard(threads);
    return make_plan(dir, dt, layout, bias, nhwc, g);
  });
  return plan->ok ? plan : nullptr;
}

}  // namespace

void set_conv_path(ConvPath path) { g_path.store(path, std::memory_order_relaxed); }
ConvPath conv_path() { return g_path.load(std::memory_order_relaxed); }
int64_t onednn_conv_calls() { return g_calls.load(std::memory_order_relaxed); }

bool onednn_conv_picks(ConvDir dir, DType dt, const ConvGeom& g) {
  Layout layout = Layout::Plain;
  return pick(dir, dt, g, layout);
}

bool onednn_conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, Tensor& y, const ConvGeom& g) {
  const auto plan = plan_for(ConvDir::Forward, x.dtype(), bias.defined(), is_nhwc(x) || is_nhwc(y), g);
  if (!plan) return false;
  std::vector<void*> ptrs{x.data_ptr(), w.data_ptr()};
  if (bias.defined()) ptrs.push_back(bias.data_ptr());
  ptrs.push_back(y.data_ptr());
  // f32 accumulation for bf16, the bias added in f32, one rounding on store (oneDNN rounds to
  // nearest even)
  execute(*plan, ptrs);
  workspace().trim();
  g_calls.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool onednn_conv2d_backward_data(const Tensor& gy, const Tensor& w, const Tensor& bias, Tensor& dx,
                                 const ConvGeom& g) {
  const bool nhwc = is_nhwc(gy) || is_nhwc(dx);
  const auto plan = plan_for(ConvDir::BackwardData, gy.dtype(), bias.defined(), nhwc, g);
  if (!plan) return false;
  if (!bias.defined()) {
    // f32 accumulation for bf16, one rounding on store
    execute(*plan, {gy.data_ptr(), w.data_ptr(), dx.data_ptr()});
    workspace().trim();
    g_calls.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  // dx [N, C, H, W] in f32 (staged for bf16), + bias [C] in f32, then one rounding to bf16.
  const bool f32 = dx.dtype() == DType::F32;
  const int64_t plane = g.H * g.W, total = g.N * g.C * plane;
  float* acc = f32 ? static_cast<float*>(dx.data_ptr())
                   : static_cast<float*>(workspace().slot[3].get(std::size_t(total) * sizeof(float)));
  execute(*plan, {gy.data_ptr(), w.data_ptr(), acc});
  std::vector<float> b(std::size_t(g.C));
  if (f32) {
    std::copy_n(static_cast<const float*>(bias.data_ptr()), g.C, b.data());
  } else {
    convert_bf16_to_f32(static_cast<const BFloat16*>(bias.data_ptr()), b.data(), g.C);
  }
  // rows of the layout: NCHW an (n, c) plane of H*W values of one channel; NHWC an (n, h, w) pixel of C channels
  const int64_t rows = nhwc ? g.N * plane : g.N * g.C, len = nhwc ? g.C : plane;
  parallel_for(0, rows, std::max<int64_t>(1, kDefaultGrain / std::max<int64_t>(len, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t r = lo; r < hi; ++r) {
                   float* row = acc + r * len;
                   if (nhwc) {
                     for (int64_t i = 0; i < len; ++i) row[i] += b[std::size_t(i)];
                   } else {
                     const float bc = b[std::size_t(r % g.C)];
                     for (int64_t i = 0; i < len; ++i) row[i] += bc;
                   }
                   if (!f32) convert_f32_to_bf16(row, static_cast<BFloat16*>(dx.data_ptr()) + r * len, len);
                 }
               });
  workspace().trim();
  g_calls.fetch_add(1, std::memory_order_relaxed);
  return true;
}

bool onednn_conv2d_backward_weights(const Tensor& x, const Tensor& gy, Tensor& dw, const ConvGeom& g) {
  // One single-threaded primitive per slice of S = weight_grad_slice(N) images (a size set by N, so the
  // result does not depend on the thread count), each writing its own f32 partial; the partials
  // are combined by the summation rule's pairwise tree (f32) and rounded once. oneDNN's own
  // threading of this kernel joins its threads with spin barriers, many per call, which cost a
  // scheduler slice each on a busy host (measurements above).
  const int64_t S = weight_grad_slice(g.N), parts = (g.N + S - 1) / S;
  if (parts == 0) return false;  // an empty batch: im2col writes the zero gradient
  const bool nhwc = is_nhwc(x) || is_nhwc(gy);
  std::vector<std::shared_ptr<const Plan>> plans(static_cast<std::size_t>(parts));
  for (int64_t p = 0; p < parts; ++p) {
    ConvGeom slice = g;
    slice.N = std::min(g.N, (p + 1) * S) - p * S;
    plans[std::size_t(p)] = p > 0 && slice.N == S ? plans[0]
                                                  : plan_for(ConvDir::BackwardWeights, x.dtype(), false, nhwc, slice, true);
    if (!plans[std::size_t(p)]) return false;
  }
  const int64_t n = dw.numel();
  const std::size_t elem = x.dtype() == DType::F32 ? sizeof(float) : sizeof(BFloat16);
  char* xp = static_cast<char*>(x.data_ptr());
  char* gp = static_cast<char*>(gy.data_ptr());
  std::vector<float> partial(static_cast<std::size_t>(parts * n));  // [parts, O, C/groups, kH, kW]
  parallel_for(0, parts, 1, [&](int64_t b, int64_t e) {
    for (int64_t p = b; p < e; ++p) {
      const int64_t n0 = p * S;
      execute(*plans[std::size_t(p)], {xp + std::size_t(n0 * g.C * g.H * g.W) * elem,
                                       gp + std::size_t(n0 * g.O * g.Ho * g.Wo) * elem, partial.data() + p * n});
    }
    workspace().trim();  // this thread's
  });
  pairwise_rows(partial.data(), parts, n);  // f32 sum of the f32 partials, by the rule
  const float* acc = partial.data();
  if (dw.dtype() == DType::F32) {
    std::copy_n(acc, n, static_cast<float*>(dw.data_ptr()));
  } else {
    convert_f32_to_bf16(acc, static_cast<BFloat16*>(dw.data_ptr()), n);  // the one rounding
  }
  workspace().trim();
  g_calls.fetch_add(1, std::memory_order_relaxed);
  return true;
}

}  // namespace mg::cpu
