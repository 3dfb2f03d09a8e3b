// CUDA kernels of dropout, pooling and the remaining losses against the CPU's (the reference).
// Inputs are made on the CPU in the tested dtype and copied, so both devices see the same bits.
// - dropout: the keep mask is a function of (seed, offset, element index) only, so it must match
//   bit for bit; the host test below proves it without a GPU by running the device's own keep
//   function (cuda/host/dropout_mask.h) as host code against the CPU kernel. The kept values are
//   x * (1 / (1 - p)) in opmath rounded once — one multiply on both devices, so exact too.
// - pooling: exact. Max pooling copies the first maximum (same scan order, same comparison); the
//   average kernels do the CPU's operations in the CPU's order (an in-order opmath sum, or the
//   same leaves of 128 combined by the same counter, one divide, one rounding; no multiply for
//   nvcc to fuse), and the max-pool backward is scatter_add with < 128 terms per target, which
//   equals the CPU's in-order sum (docs/cuda.md). The pooling ops have no ceil_mode on the CPU
//   (Ho = floor((H + 2p - d (k - 1) - 1) / s) + 1), so there is none to test; the odd sizes
//   [3, 5, 17, 19] with kernel 3 stride 2 padding 1 cover the partial last windows instead.
// - losses: the same public ops on both devices, so the per-element math differs only by CUDA's
//   expf/logf/log1pf (an ulp or two) and fused multiply-adds inside a functor, and a mean/sum by
//   the reduction tree (each within (128 + log2 n + 6) u Σ|x|, u = 2^-24: ~160 u for these
//   sizes). The f32 tolerance is 512 u (|want| + 1); f16/bf16 outputs are rounded once from those
//   f32 values and may land on the neighbouring value: one ulp of the dtype (2^-10 / 2^-7) plus
//   the f32 noise, relative to |want| + scale: scale 1 for f32 (O(1) quantities of O(1) inputs,
//   so an absolute part covers cancellation near zero); 8 for f16/bf16, whose composite losses
//   round every intermediate to the dtype: an intermediate of magnitude up to ~8 (inputs of scale
//   2-3, e.g. (1 - t) x + softplus(-x)) may land on the neighbouring value on one device when
//   exp/log differ by an ulp, and a later subtraction keeps that ulp of 8.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>

#include "core/factory.h"
#include "core/generator.h"
#include "ops/conv.h"
#include "core/cascade_sum.h"
#include "cuda/host/dropout_mask.h"
#include "cuda/host/pool_windows.h"
#include "cuda_test_util.h"
#include "ops/dispatcher.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::gpu;
using mg::test::values;

namespace {

Tensor randn_in(DType dt, const Shape& shape, double scale, uint64_t seed) {
  Generator gen(seed);
  return to(randn(shape, {}, &gen) * scale, dt);
}

// |got - want| <= rel (|want| + scale) element by element (rel = 0: bit for bit; NaN matches NaN).
void require_close(const std::string& what, const Tensor& got, const Tensor& want, double rel = 0, double scale = 0) {
  INFO(what << " " << dtype_name(want.dtype()) << " " << shape_str(want.shape()));
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(got.shape() == want.shape());
  const std::vector<double> g = values(got.to(Device::cpu())), w = values(want);
  for (std::size_t i = 0; i < w.size(); ++i) {
    const bool same = (std::isnan(g[i]) && std::isnan(w[i])) || g[i] == w[i] ||
                      (rel > 0 && std::abs(g[i] - w[i]) <= rel * (std::abs(w[i]) + scale));
    if (!same) FAIL(what << " element " << i << ": cuda " << g[i] << " cpu " << w[i]);
  }
}

const std::vector<DType> kFloats = {DType::F32, DType::F16, DType::BF16};

double loss_tolerance(DType dt) {
  switch (dt) {
    case DType::F32: return 512 * 0x1p-24;
    case DType::F16: return 1.01 * 0x1p-10 + 512 * 0x1p-24;
    case DType::BF16: return 1.01 * 0x1p-7 + 512 * 0x1p-24;
    default: return 0;
  }
}

// f(inputs) on the CPU and on GPU copies; with `grads`, also the gradients of every input that
// requires one after sum(f(...) * w) for a fixed random w (so each g differs).
using Fn = std::function<Tensor(const std::vector<Tensor>&)>;
void check_op(const std::string& what, const std::vector<Tensor>& cpu_in, const Fn& f, double rel, double scale,
              const std::vector<bool>& grads = {}) {
  std::vector<Tensor> hin, gin;
  for (std::size_t i = 0; i < cpu_in.size(); ++i) {
    const bool rg = i < grads.size() && grads[i];
    hin.push_back(rg ? cpu_in[i].detach().requires_grad_(true) : cpu_in[i]);
    gin.push_back(rg ? cpu_in[i].to(gpu()).detach().requires_grad_(true) : mg::test::to_gpu_keep_layout(cpu_in[i]));
  }
  const Tensor want = f(hin), got = f(gin);
  REQUIRE(got.device() == gpu());
  require_close(what, got, want, rel, scale);
  if (grads.empty()) return;
  // w in [0, 1): positive, so a gradient summed over broadcast dims (pos_weight's) has no
  // cancellation, and |w| <= 1, so it does not magnify a one-ulp difference of the local derivative
  Generator gen(42);
  const Tensor w = to(rand(want.shape(), {}, &gen), want.dtype());
  sum(want * w).backward();
  sum(got * w.to(gpu())).backward();
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (grads[i]) require_close(what + " grad " + std::to_string(i), gin[i].grad(), hin[i].grad(), rel, scale);
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Dropout
// ---------------------------------------------------------------------------------------------

TEST_CASE("the CUDA dropout keep function reproduces the CPU's mask bit for bit (host)", "[cuda][dropout]") {
  // offsets near 2^32 carry into the counter's high word; odd sizes leave a partial last block
  const std::vector<Shape> shapes = {{1}, {7}, {3, 5, 17, 19}, {4099}};
  const std::vector<uint64_t> offsets = {0, 5, (uint64_t(1) << 32) - 3};
  for (const Shape& s : shapes) {
    for (uint64_t offset : offsets) {
      for (double p : {0.1, 0.5, 0.9}) {
        const uint64_t seed = 0x1234567890abcdefull + offset;
        const Tensor x = randn_in(DType::F32, s, 1.0, 3);
        const Tensors out = dispatch(OpId::dropout, {x}, {.ints = {int64_t(seed), int64_t(offset)}, .alpha = p});
        const bool* m = out[1].data<bool>();
        int64_t bad = 0;
        for (int64_t i = 0; i < x.numel(); ++i) bad += m[i] != cuda::dropout_keep(seed, offset, uint64_t(i), float(p));
        INFO(shape_str(s) << " offset " << offset << " p " << p);
        REQUIRE(bad == 0);
      }
    }
  }
}

TEST_CASE("CUDA dropout matches the CPU's mask and values exactly", "[cuda][gpu][dropout]") {
  for (DType dt : {DType::F64, DType::F32, DType::F16, DType::BF16}) {
    for (const Shape& s : std::vector<Shape>{{3, 5, 17, 19}, {7}, {0}}) {
      for (double p : {0.2, 0.5}) {
        const Tensor x = randn_in(dt, s, 2.0, 11);
        const OpAttrs a{.ints = {12345, 77}, .alpha = p};
        const Tensors want = dispatch(OpId::dropout, {x}, a);
        const Tensors got = dispatch(OpId::dropout, {x.to(gpu())}, a);
        REQUIRE(got[0].device() == gpu());
        require_close("dropout mask", got[1], want[1]);
        require_close("dropout values", got[0], want[0]);
      }
    }
    // a strided input (a transpose) and the public op with autograd: dx = g * mask / (1 - p)
    Generator g1(99), g2(99);
    const Tensor xc = randn_in(dt, {19, 17}, 1.0, 5).transpose(0, 1);
    const Tensor xg = xc.to(gpu()).detach().requires_grad_(true);
    const Tensor xh = xc.detach().requires_grad_(true);
    const Tensor yh = dropout(xh, 0.3, true, &g1), yg = dropout(xg, 0.3, true, &g2);
    require_close("dropout strided", yg, yh);
    sum(yh).backward();
    sum(yg).backward();
    require_close("dropout backward", xg.grad(), xh.grad());
  }
  mg::test::require_no_pending_cuda_error();
}

// ---------------------------------------------------------------------------------------------
// Pooling
// ---------------------------------------------------------------------------------------------

namespace {

// The CUDA pooling kernels' per-element code (cuda/host/pool_windows.h) run on the CPU, one
// "thread" per output (forward) or input element (backward) in memory order, on dense CPU tensors
// in the layout f (NCHW or NHWC, as the kernels run them).
cuda::PoolLayout layout_in(MemoryFormat f, const Tensor& t) { return {f == MemoryFormat::ChannelsLast, t.size(1)}; }

template <typename T>
Tensor host_max_pool(const Tensor& x, const Tensor& like, const std::vector<int64_t>& ints, bool indices,
                     MemoryFormat f) {
  const Tensor xd = contiguous(x, f);
  Tensor out = empty(like.shape(), {.dtype = indices ? DType::I64 : x.dtype(), .memory_format = f});
  const cuda::PoolWin h = cuda::max_pool_win(ints, 0, x.size(2)), w = cuda::max_pool_win(ints, 1, x.size(3));
  const cuda::PoolLayout l = layout_in(f, x);
  for (int64_t o = 0; o < out.numel(); ++o) {
    int64_t base = 0;
    const int64_t best = cuda::max_pool_argmax(o, out.size(2), out.size(3), h, w, l, xd.data<T>(), &base);
    if (indices) {
      out.data<int64_t>()[o] = best;
    } else {
      out.data<T>()[o] = xd.data<T>()[base + best * l.step()];
    }
  }
  return out;
}
template <typename T>
Tensor host_avg_pool(const Tensor& x, const Shape& out_shape, bool adaptive, const std::vector<int64_t>& ints,
                     int64_t mode, MemoryFormat f) {
  const Tensor xd = contiguous(x, f);
  Tensor out = empty(out_shape, {.dtype = x.dtype(), .memory_format = f});
  const cuda::AvgGeom g = cuda::avg_geom(adaptive, ints, mode, x.size(2), x.size(3), out.size(2), out.size(3));
  for (int64_t o = 0; o < out.numel(); ++o) out.data<T>()[o] = cuda::avg_pool_at(o, g, layout_in(f, x), xd.data<T>());
  return out;
}
template <typename T>
Tensor host_avg_pool_grad(const Tensor& gr, const Shape& in_shape, bool adaptive, const std::vector<int64_t>& ints,
                          int64_t mode, MemoryFormat f) {
  const Tensor gd = contiguous(gr, f);
  Tensor dx = empty(in_shape, {.dtype = gr.dtype(), .memory_format = f});
  const cuda::AvgGeom g = cuda::avg_geom(adaptive, ints, mode, dx.size(2), dx.size(3), gr.size(2), gr.size(3));
  for (int64_t i = 0; i < dx.numel(); ++i)
    dx.data<T>()[i] = cuda::avg_pool_grad_at(i, g, layout_in(f, gr), gd.data<T>());
  return dx;
}

template <typename T>
Tensor host_max_pool_grad(const Tensor& gr, const Tensor& idx, const Shape& in_shape, const std::vector<int64_t>& ints,
                          MemoryFormat f) {
  const Tensor gd = contiguous(gr, f), id = contiguous(idx, f);
  Tensor dx = empty(in_shape, {.dtype = gr.dtype(), .memory_format = f});
  const cuda::PoolWin h = cuda::max_pool_win(ints, 0, in_shape[2]), w = cuda::max_pool_win(ints, 1, in_shape[3]);
  for (int64_t i = 0; i < dx.numel(); ++i) {
    dx.data<T>()[i] = cuda::max_pool_grad_at(i, gr.size(2), gr.size(3), h, w, layout_in(f, gr), gd.data<T>(),
                                             id.data<int64_t>());
  }
  return dx;
}

// Exact: the CPU kernels give the same bits in both layouts (docs/memory_format.md).
template <typename T>
void check_pool_host(DType dt, MemoryFormat f) {
  INFO((f == MemoryFormat::ChannelsLast ? "NHWC" : "NCHW"));
  const Tensor x = randn_in(dt, {3, 5, 17, 19}, 2.0, 21);
  const Tensor ties = to(clamp(randn_in(DType::F32, {3, 5, 17, 19}, 1.5, 22), -0.5, 0.5), dt);
  // max: {kH, kW, sH, sW, pH, pW, dH, dW}
  for (const std::vector<int64_t>& m : std::vector<std::vector<int64_t>>{{3, 3, 2, 2, 1, 1, 1, 1},
                                                                         {2, 3, 1, 2, 1, 1, 2, 1},
                                                                         {3, 3, 2, 2, 1, 1, 2, 2},
                                                                         {1, 1, 1, 1, 0, 0, 1, 1}}) {
    for (const Tensor& in : {x, ties}) {
      const Tensor want = max_pool2d(in, {m[0], m[1]}, {m[2], m[3]}, {m[4], m[5]}, {m[6], m[7]});
      const Tensor wi = max_pool2d_indices(in, {m[0], m[1]}, {m[2], m[3]}, {m[4], m[5]}, {m[6], m[7]});
      require_close("host max_pool2d", host_max_pool<T>(in, want, m, false, f), want);
      require_close("host max_pool2d_indices", host_max_pool<T>(in, want, m, true, f), wi);
      const Tensor g = randn_in(dt, want.shape(), 1.0, 26);
      const Tensor wg = max_pool2d_backward(g, wi, {17, 19}, {m[0], m[1]}, {m[2], m[3]}, {m[4], m[5]}, {m[6], m[7]});
      require_close("host max_pool2d_backward", host_max_pool_grad<T>(g, wi, x.shape(), m, f), wg);
    }
  }
  // avg: {kH, kW, sH, sW, pH, pW}, both count_include_pad modes, and its backward
  for (const std::vector<int64_t>& a : std::vector<std::vector<int64_t>>{{3, 3, 2, 2, 1, 1},
                                                                         {2, 3, 3, 1, 1, 0},
                                                                         {17, 19, 1, 1, 0, 0},
                                                                         {5, 4, 2, 3, 2, 2}}) {
    for (int64_t mode : {1, 0}) {
      const Tensor want = avg_pool2d(x, {a[0], a[1]}, {a[2], a[3]}, {a[4], a[5]}, mode != 0);
      require_close("host avg_pool2d", host_avg_pool<T>(x, want.shape(), false, a, mode, f), want);
      const Tensor g = randn_in(dt, want.shape(), 1.0, 23);
      const Tensor wg = avg_pool2d_backward(g, {17, 19}, {a[0], a[1]}, {a[2], a[3]}, {a[4], a[5]}, mode != 0);
      require_close("host avg_pool2d_backward", host_avg_pool_grad<T>(g, x.shape(), false, a, mode, f), wg);
    }
  }
  for (const std::array<int64_t, 2> o : {std::array<int64_t, 2>{1, 1}, {5, 7}, {20, 23}, {17, 19}, {3, 1}}) {
    const Tensor want = adaptive_avg_pool2d(x, o);
    require_close("host adaptive_avg_pool2d", host_avg_pool<T>(x, want.shape(), true, {}, 0, f), want);
    const Tensor g = randn_in(dt, want.shape(), 1.0, 24);
    const Tensor wg = adaptive_avg_pool2d_backward(g, {17, 19});
    require_close("host adaptive_avg_pool2d_backward", host_avg_pool_grad<T>(g, x.shape(), true, {}, 0, f), wg);
  }
  // a global pool over more than 64 leaves of 128 (the counter's higher levels)
  const Tensor big = randn_in(dt, {1, 2, 97, 89}, 1.0, 25);
  const Tensor wb = adaptive_avg_pool2d(big, {1, 1});
  require_close("host global pool 97x89", host_avg_pool<T>(big, wb.shape(), true, {}, 0, f), wb);
}

}  // namespace

TEST_CASE("the CUDA pooling kernels' per-element code reproduces the CPU bit for bit, NCHW and NHWC (host)", "[cuda][pool]") {
  STATIC_REQUIRE(cuda::kPoolLeaf == kSumLeaf);
  for (const MemoryFormat f : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    check_pool_host<double>(DType::F64, f);
    check_pool_host<float>(DType::F32, f);
    check_pool_host<Half>(DType::F16, f);
    check_pool_host<BFloat16>(DType::BF16, f);
  }
}

// NHWC pooling runs natively on CUDA (no NCHW temporary): the outputs are channels-last and equal
// the CPU's and the NCHW CUDA kernels' bit for bit (the same per-element arithmetic in both layouts).
TEST_CASE("CUDA pooling on channels-last tensors: NHWC outputs, the NCHW bits, forward and backward",
          "[cuda][gpu][pool]") {
  const auto cl = MemoryFormat::ChannelsLast;
  for (DType dt : {DType::F64, DType::F32, DType::F16, DType::BF16}) {
    const Tensor x = randn_in(dt, {3, 37, 17, 19}, 2.0, 7);  // C = 37: channels not a multiple of a warp
    const Tensor xg = x.to(gpu()), xgl = xg.to(cl);
    REQUIRE(xgl.is_contiguous(cl));
    using F = std::function<Tensor(const Tensor&)>;
    const std::vector<std::pair<std::string, F>> fwd = {
        {"max_pool2d k3 s2 p1", [](const Tensor& v) { return max_pool2d(v, {3, 3}, {2, 2}, {1, 1}); }},
        {"max_pool2d_indices k3 s2 p1", [](const Tensor& v) { return max_pool2d_indices(v, {3, 3}, {2, 2}, {1, 1}); }},
        {"avg_pool2d k3 s2 p1", [](const Tensor& v) { return avg_pool2d(v, {3, 3}, {2, 2}, {1, 1}); }},
        {"avg_pool2d k2x3 s3x1 exclude pad",
         [](const Tensor& v) { return avg_pool2d(v, {2, 3}, {3, 1}, {1, 0}, false); }},
        {"adaptive_avg_pool2d 5x7", [](const Tensor& v) { return adaptive_avg_pool2d(v, {5, 7}); }},
        {"global pool", [](const Tensor& v) { return adaptive_avg_pool2d(v, {1, 1}); }}};
    for (const auto& [what, f] : fwd) {
      const Tensor got = f(xgl), nchw = f(xg), want = f(x);
      INFO(what);
      CHECK(got.suggest_memory_format() == cl);
      require_close(what + " NHWC vs NCHW on cuda", got, nchw.to(Device::cpu()));
      require_close(what + " NHWC cuda vs cpu", got, want);
    }
    // backward ops: dx comes out in the forward input's layout (attrs.dims = {format})
    const Tensor g = randn_in(dt, {3, 37, 9, 10}, 1.0, 8), gg = g.to(gpu());
    const Tensor dxl = avg_pool2d_backward(gg.to(cl), {17, 19}, {3, 3}, {2, 2}, {1, 1}, true);
    CHECK(dxl.suggest_memory_format() == cl);
    require_close("avg_pool2d_backward NHWC", dxl, avg_pool2d_backward(g, {17, 19}, {3, 3}, {2, 2}, {1, 1}, true));
    // autograd through NHWC (max pool: the scatter, avg and global pool: the backward ops)
    for (const auto& [what, f] : fwd) {
      if (what.find("indices") != std::string::npos) continue;
      const Tensor xa = xgl.detach().requires_grad_(true), xc = x.detach().requires_grad_(true);
      const Tensor ya = f(xa), yc = f(xc);
      Generator gen(9);
      const Tensor w = to(rand(yc.shape(), {}, &gen), dt);
      sum(ya * w.to(gpu()).to(cl)).backward();
      sum(yc * w).backward();
      INFO(what << " grad");
      CHECK(xa.grad().suggest_memory_format() == cl);
      require_close(what + " grad NHWC cuda vs cpu", xa.grad(), xc.grad());
    }
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA max pooling matches the CPU exactly (values, first-max indices, backward)", "[cuda][gpu][pool]") {
  for (DType dt : {DType::F64, DType::F32, DType::F16, DType::BF16}) {
    const Tensor x = randn_in(dt, {3, 5, 17, 19}, 2.0, 1);
    // ties: clamped values make many windows hold several equal maxima (0.5)
    const Tensor ties = to(clamp(randn_in(DType::F32, {3, 5, 17, 19}, 1.5, 2), -0.5, 0.5), dt);
    for (const Tensor& in : {x, ties}) {
      check_op("max_pool2d k3 s2 p1", {in}, [](const auto& v) { return max_pool2d(v[0], {3, 3}, {2, 2}, {1, 1}); },
               0, 0, {true});
      check_op("max_pool2d_indices k3 s2 p1", {in},
               [](const auto& v) { return max_pool2d_indices(v[0], {3, 3}, {2, 2}, {1, 1}); }, 0, 0);
      check_op("max_pool2d k2x3 s1x2 dil 2x1", {in},
               [](const auto& v) { return max_pool2d(v[0], {2, 3}, {1, 2}, {1, 1}, {2, 1}); }, 0, 0, {true});
      check_op("max_pool2d_indices k2x3 s1x2 dil 2x1", {in},
               [](const auto& v) { return max_pool2d_indices(v[0], {2, 3}, {1, 2}, {1, 1}, {2, 1}); }, 0, 0);
    }
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA average pooling matches the CPU exactly, forward and backward", "[cuda][gpu][pool]") {
  for (DType dt : {DType::F64, DType::F32, DType::F16, DType::BF16}) {
    const Tensor x = randn_in(dt, {3, 5, 17, 19}, 2.0, 3);
    for (bool include_pad : {true, false}) {
      const std::string tag = include_pad ? " count_include_pad" : " exclude pad";
      check_op("avg_pool2d k3 s2 p1" + tag, {x},
               [=](const auto& v) { return avg_pool2d(v[0], {3, 3}, {2, 2}, {1, 1}, include_pad); }, 0, 0, {true});
      check_op("avg_pool2d k2x3 s3x1 p1x0" + tag, {x},
               [=](const auto& v) { return avg_pool2d(v[0], {2, 3}, {3, 1}, {1, 0}, include_pad); }, 0, 0, {true});
      const Tensor g = randn_in(dt, {3, 5, 9, 10}, 1.0, 4);
      check_op("avg_pool2d_backward k3 s2 p1" + tag, {g},
               [=](const auto& v) { return avg_pool2d_backward(v[0], {17, 19}, {3, 3}, {2, 2}, {1, 1}, include_pad); },
               0, 0);
    }
    // 1x1 is a global pool of 323 taps (leaves of 128 combined pairwise); 5x7 has overlapping
    // windows of unequal sizes; 20x23 makes more outputs than inputs along both dims
    for (const std::array<int64_t, 2> out : {std::array<int64_t, 2>{1, 1}, {5, 7}, {20, 23}}) {
      const std::string tag = " to " + std::to_string(out[0]) + "x" + std::to_string(out[1]);
      check_op("adaptive_avg_pool2d" + tag, {x}, [=](const auto& v) { return adaptive_avg_pool2d(v[0], out); }, 0, 0,
               {true});
      const Tensor g = randn_in(dt, {3, 5, out[0], out[1]}, 1.0, 5);
      check_op("adaptive_avg_pool2d_backward" + tag, {g},
               [](const auto& v) { return adaptive_avg_pool2d_backward(v[0], {17, 19}); }, 0, 0);
    }
    // a strided input is made dense first
    const Tensor xt = randn_in(dt, {3, 5, 19, 17}, 1.0, 6).transpose(2, 3);
    check_op("avg_pool2d strided", {xt}, [](const auto& v) { return avg_pool2d(v[0], {3, 3}, {2, 2}, {1, 1}); }, 0, 0);
    check_op("max_pool2d strided", {xt}, [](const auto& v) { return max_pool2d(v[0], {3, 3}, {2, 2}, {1, 1}); }, 0, 0);
  }
  mg::test::require_no_pending_cuda_error();
}

// ---------------------------------------------------------------------------------------------
// Losses
// ---------------------------------------------------------------------------------------------

TEST_CASE("CUDA elementwise losses match the CPU in every reduction, with their gradients", "[cuda][gpu][loss]") {
  const Shape s = {3, 5, 17, 19};
  for (DType dt : kFloats) {
    const double tol = loss_tolerance(dt), sc = dt == DType::F32 ? 1.0 : 8.0;  // see the file comment
    const Tensor x = randn_in(dt, s, 2.0, 7), y = randn_in(dt, s, 2.0, 8);
    const Tensor logits = randn_in(dt, s, 3.0, 9);
    const Tensor t01 = to(sigmoid(randn_in(DType::F32, s, 2.0, 10)), dt);  // targets in (0, 1)
    const Tensor pw = to(exp(randn_in(DType::F32, {19}, 0.5, 11)), dt);    // pos_weight, broadcast
    const Tensor probs = to(sigmoid(randn_in(DType::F32, s, 1.0, 12)), dt);  // no f16 rounding to 1
    const Tensor logp = to(log_softmax(randn_in(DType::F32, s, 1.0, 13), 3), dt);
    // a distribution with exact zeros (the 0 * log 0 = 0 branch)
    const Tensor q = softmax(randn_in(DType::F32, s, 1.0, 14), 3);
    const Tensor tq = to(where(gt(q, scalar_like(0.08, q)), q, scalar_like(0.0, q)), dt);
    const Tensor logq = to(log_softmax(randn_in(DType::F32, s, 1.0, 15), 3), dt);
    for (Reduction r : {Reduction::None, Reduction::Mean, Reduction::Sum}) {
      const std::string tag = std::string(" ") + reduction_name(r);
      check_op("mse_loss" + tag, {x, y}, [=](const auto& v) { return mse_loss(v[0], v[1], r); }, tol, sc, {true, true});
      check_op("l1_loss" + tag, {x, y}, [=](const auto& v) { return l1_loss(v[0], v[1], r); }, tol, sc, {true, true});
      for (double beta : {1.0, 0.0}) {
        check_op("smooth_l1_loss beta " + std::to_string(beta) + tag, {x, y},
                 [=](const auto& v) { return smooth_l1_loss(v[0], v[1], r, beta); }, tol, sc, {true, true});
      }
      check_op("bce_with_logits" + tag, {logits, t01},
               [=](const auto& v) { return binary_cross_entropy_with_logits(v[0], v[1], Tensor(), r); }, tol, sc,
               {true, true});
      check_op("bce_with_logits pos_weight" + tag, {logits, t01, pw},
               [=](const auto& v) { return binary_cross_entropy_with_logits(v[0], v[1], v[2], r); }, tol, sc,
               {true, true, true});
      check_op("bce" + tag, {probs, t01}, [=](const auto& v) { return binary_cross_entropy(v[0], v[1], r); }, tol, sc,
               {true, true});
      check_op("kl_div" + tag, {logp, tq}, [=](const auto& v) { return kl_div(v[0], v[1], r, false); }, tol, sc,
               {true, true});
      check_op("kl_div log_target" + tag, {logp, logq}, [=](const auto& v) { return kl_div(v[0], v[1], r, true); },
               tol, sc, {true, true});
    }
    check_op("kl_div batchmean", {logp, tq}, [](const auto& v) { return kl_div(v[0], v[1], Reduction::BatchMean); },
             tol, sc, {true, true});
    // empty inputs: a mean is NaN, a sum 0, as on the CPU
    const Tensor e = randn_in(dt, {0, 3}, 1.0, 16);
    check_op("mse_loss empty mean", {e, e}, [](const auto& v) { return mse_loss(v[0], v[1]); }, 0, 0);
    check_op("l1_loss empty sum", {e, e}, [](const auto& v) { return l1_loss(v[0], v[1], Reduction::Sum); }, 0, 0);
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA max_pool2d_backward reports an index outside its window at the next wait, with the CPU's text",
          "[cuda][gpu][pool]") {
  // [2, 1, 4, 4], 2x2 windows of stride 2 -> [2, 1, 2, 2]; plane 1's output (1, 0) points at row 0.
  const Tensor g = ones({2, 1, 2, 2});
  const Tensor idx = from_vector<int64_t>({0, 2, 8, 10, 0, 2, 1, 10}, {2, 1, 2, 2});
  const Tensor ok = from_vector<int64_t>({0, 2, 8, 10, 0, 2, 8, 10}, {2, 1, 2, 2});
  Tensor got;
  CHECK(mg::test::error_of([&] { got = max_pool2d_backward(g.to(gpu()), idx.to(gpu()), {4, 4}, {2, 2}, {2, 2}); }) == "");
  const std::string raised = mg::test::error_of([] { cuda::synchronize(); });
  CHECK(raised.find("max_pool2d_backward: index 1 at output (1, 0) of plane 1 is not an element of that output's "
                    "window in the 4 x 4 input plane") == 0);
  // The bad index added nothing: the rest equals the backward of the good indices but that one.
  const std::vector<double> want = mg::test::values(max_pool2d_backward(g, ok, {4, 4}, {2, 2}, {2, 2}));
  std::vector<double> gv = mg::test::values(got);
  CHECK(gv[16 + 8] == 0.0);  // plane 1, row 2, column 0: output (1, 0)'s gradient went nowhere
  gv[16 + 8] = want[16 + 8];
  CHECK(gv == want);
  mg::test::require_no_pending_cuda_error();
}
