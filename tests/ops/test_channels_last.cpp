// Channels-last through the ops: each op that keeps the layout (elementwise, conv2d and its
// gradients, conv_transpose2d, batch norm, group norm, pooling) gives the NCHW path's values — bit for bit
// where the arithmetic is the same (elementwise, batch norm, pooling, im2col convs), within a few
// ulps where oneDNN's NHWC kernels sum in another order — and its outputs and gradients come out
// channels-last where they must. The elementwise rule (the first full-shape input decides) and
// size-1 dims (global pooling's [N, C, 1, 1]) are covered too.
#include <catch2/catch.hpp>

#include <cmath>
#include <iterator>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "ops/conv.h"
#include "ops/dispatcher.h"
#include "ops/cpu/conv_onednn.h"
#include "ops/norm.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::values;

namespace {

constexpr MemoryFormat kCL = MemoryFormat::ChannelsLast;

bool is_cl(const Tensor& t) { return t.is_contiguous(kCL) && !t.is_contiguous(); }

double max_rel_diff(const Tensor& a, const Tensor& b) {
  const auto va = values(a), vb = values(b);
  REQUIRE(va.size() == vb.size());
  double m = 0;
  for (std::size_t i = 0; i < va.size(); ++i) m = std::max(m, std::abs(va[i] - vb[i]) / (1.0 + std::abs(vb[i])));
  return m;
}

// Runs f(input) on an NCHW leaf and on its channels-last copy; returns {y, dx} for each with a
// random cotangent (the same values in both layouts).
template <typename F>
void both_layouts(const Tensor& x0, F f, Tensor& y_nchw, Tensor& dx_nchw, Tensor& y_cl, Tensor& dx_cl) {
  Tensor a = x0.clone().requires_grad_();
  Tensor b = x0.to(kCL).detach().requires_grad_();
  REQUIRE(is_cl(b));
  y_nchw = f(a);
  y_cl = f(b);
  manual_seed(99);
  const Tensor g = randn(y_nchw.shape(), {.dtype = y_nchw.dtype()});
  y_nchw.backward(g);
  y_cl.backward(g.dim() == 4 ? g.to(kCL) : g);
  dx_nchw = a.grad();
  dx_cl = b.grad();
}

}  // namespace

TEST_CASE("elementwise ops keep channels-last and give the same bits", "[ops][memory_format]") {
  manual_seed(5);
  const Tensor x = randn({2, 8, 5, 3}), y = randn({2, 8, 5, 3}), bias = randn({1, 8, 1, 1});
  const Tensor xc = x.to(kCL), yc = y.to(kCL);
  for (DType dt : {DType::F32, DType::F16, DType::BF16}) {
    const Tensor a = x.to(dt), b = y.to(dt), ac = xc.to(dt), bc = yc.to(dt), bb = bias.to(dt);
    CHECK(is_cl(ac));  // casts keep the layout
    const Tensor r = relu(ac), s = add(ac, bc), t = add(ac, bb), e = exp(ac), m = ac * 2.0;
    CHECK(is_cl(r));
    CHECK(is_cl(s));
    CHECK(is_cl(t));  // a broadcast [1, C, 1, 1] operand has no say
    CHECK(is_cl(e));
    CHECK(is_cl(m));
    CHECK(values(r) == values(relu(a)));
    CHECK(values(s) == values(add(a, b)));
    CHECK(values(t) == values(add(a, bb)));
    CHECK(values(e) == values(exp(a)));
    CHECK(values(m) == values(a * 2.0));
  }
  // mixed layouts: the first full-shape input decides (PyTorch's TensorIterator)
  CHECK(is_cl(add(xc, y)));
  CHECK(add(y, xc).is_contiguous());
  CHECK(values(add(xc, y)) == values(add(x, y)));
  // in place on a channels-last tensor writes through its strides
  Tensor z = clone(xc, kCL);
  z.add_(yc);
  CHECK(is_cl(z));
  CHECK(values(z) == values(add(x, y)));
  // relu's backward (where) keeps the layout of the gradient
  Tensor dx, dxc, o, oc;
  both_layouts(x, [](const Tensor& v) { return relu(v); }, o, dx, oc, dxc);
  CHECK(is_cl(dxc));
  CHECK(values(dxc) == values(dx));
}

TEST_CASE("conv2d on channels-last: NHWC output and gradients, NCHW values", "[ops][memory_format][conv]") {
  manual_seed(7);
  const Tensor w0 = randn({16, 8, 3, 3}) * 0.2, b0 = randn({16});
  for (const cpu::ConvPath path : {cpu::ConvPath::Auto, cpu::ConvPath::OnednnPlain, cpu::ConvPath::Im2col}) {
    const cpu::ConvPathGuard guard(path);
    INFO("path " << int(path));
    const Tensor x0 = randn({4, 8, 9, 7});
    Tensor w = w0.clone().requires_grad_(), wc = w0.clone().requires_grad_();
    Tensor b = b0.clone().requires_grad_(), bc = b0.clone().requires_grad_();
    Tensor y, dx, yc, dxc;
    const int64_t calls = cpu::onednn_conv_calls();
    both_layouts(
        x0, [&](const Tensor& v) { return conv2d(v, v.is_contiguous() ? w : wc, v.is_contiguous() ? b : bc, {.stride = {2, 1}, .padding = {1, 1}}); },
        y, dx, yc, dxc);
    CHECK((cpu::onednn_conv_calls() > calls) == (path != cpu::ConvPath::Im2col));
    CHECK(is_cl(yc));
    CHECK(is_cl(dxc));
    CHECK(wc.grad().is_contiguous());
    if (path == cpu::ConvPath::Im2col) {  // the same NCHW arithmetic, copied into NHWC
      CHECK(values(yc) == values(y));
      CHECK(values(dxc) == values(dx));
      CHECK(values(wc.grad()) == values(w.grad()));
    } else {  // oneDNN's nhwc kernels: another summation order
      CHECK(max_rel_diff(yc, y) < 1e-5);
      CHECK(max_rel_diff(dxc, dx) < 1e-5);
      CHECK(max_rel_diff(wc.grad(), w.grad()) < 1e-5);
    }
    CHECK(max_rel_diff(bc.grad(), b.grad()) < 1e-5);  // a sum over N, H, W in another order
  }
}

// oneDNN's descriptors once told the weights from an activation by comparing dims, so an NHWC
// activation whose dims equal the kernel's ([4, 3, 3, 3] against a 4x3x3x3 weight, or [4, 4, 3,
// 3] against 4x4x3x3 with padding 1, where the output collides too) was read as NCHW: values off
// by up to 14. Forward, both backward passes and conv_transpose2d, f32 and bf16, on every path.
TEST_CASE("conv2d on channels-last where an activation's shape equals the weight's", "[ops][memory_format][conv]") {
  manual_seed(11);
  for (const DType dt : {DType::F32, DType::BF16}) {
    for (const cpu::ConvPath path : {cpu::ConvPath::Auto, cpu::ConvPath::OnednnPlain, cpu::ConvPath::OnednnBlocked}) {
      const cpu::ConvPathGuard guard(path);
      for (const Shape& shape : {Shape{4, 3, 3, 3}, Shape{4, 4, 3, 3}}) {
        INFO("dtype " << dtype_name(dt) << " path " << int(path) << " x " << shape_str(shape));
        const Tensor x0 = to(randn(shape), dt), w0 = to(randn({4, shape[1], 3, 3}) * 0.3, dt);
        Tensor w = w0.clone().requires_grad_(), wc = w0.clone().requires_grad_();
        Tensor y, dx, yc, dxc;
        both_layouts(
            x0, [&](const Tensor& v) { return conv2d(v, v.is_contiguous() ? w : wc, {}, {.padding = {1, 1}}); }, y,
            dx, yc, dxc);
        const double tol = dt == DType::F32 ? 1e-5 : 2e-2;
        CHECK(max_rel_diff(yc, y) < tol);
        CHECK(max_rel_diff(dxc, dx) < tol);
        CHECK(max_rel_diff(wc.grad(), w.grad()) < tol);
        // conv_transpose2d: its input [4, 4, 3, 3] is the weight's shape too.
        const Tensor wt = to(randn({4, 4, 3, 3}) * 0.3, dt), xt = to(randn({4, 4, 3, 3}), dt);
        CHECK(max_rel_diff(conv_transpose2d(xt.to(kCL), wt), conv_transpose2d(xt, wt)) < tol);
      }
    }
  }
}

TEST_CASE("conv2d f64, f16 and bf16 on channels-last", "[ops][memory_format][conv][lowp]") {
  manual_seed(8);
  const Tensor x = randn({2, 4, 6, 6}), w = randn({8, 4, 3, 3}) * 0.3;
  for (DType dt : {DType::F64, DType::F16, DType::BF16}) {
    const Tensor a = x.to(dt), wt = w.to(dt);
    const Tensor y = conv2d(a, wt, {}, {.padding = {1, 1}});
    const Tensor yc = conv2d(a.to(kCL), wt, {}, {.padding = {1, 1}});
    CHECK(is_cl(yc));
    CHECK(yc.dtype() == dt);
    // f64: im2col both ways; f16/bf16: the f32 primitives on widened inputs, one rounding each —
    // another summation order in NHWC, so at most one rounding step apart
    const double tol = dt == DType::F64 ? 0.0 : dt == DType::F16 ? 2e-3 : 1.6e-2;
    CHECK(max_rel_diff(yc, y) <= tol);
  }
}

TEST_CASE("conv_transpose2d with a bias keeps channels-last", "[ops][memory_format][conv]") {
  manual_seed(9);
  const Tensor x = randn({2, 8, 5, 5}), w = randn({8, 4, 3, 3}) * 0.3, b = randn({4});
  for (DType dt : {DType::F32, DType::BF16}) {
    const Tensor y = conv_transpose2d(x.to(dt), w.to(dt), b.to(dt), {.stride = {2, 2}, .padding = {1, 1}});
    const Tensor yc = conv_transpose2d(x.to(dt).to(kCL), w.to(dt), b.to(dt), {.stride = {2, 2}, .padding = {1, 1}});
    CHECK(is_cl(yc));
    CHECK(max_rel_diff(yc, y) <= (dt == DType::F32 ? 1e-5 : 1.6e-2));
  }
}

TEST_CASE("batch_norm on channels-last gives the NCHW bits, forward and backward", "[ops][memory_format][norm]") {
  manual_seed(11);
  const Tensor x0 = randn({4, 6, 5, 3}) * 3.0 + 1.0;
  for (DType dt : {DType::F64, DType::F32, DType::F16, DType::BF16}) {
    INFO(dtype_name(dt));
    const Tensor weight = randn({6}), bias = randn({6});
    Tensor rm = zeros({6}), rv = ones({6}), rmc = zeros({6}), rvc = ones({6});
    Tensor w1 = weight.clone().requires_grad_(), w2 = weight.clone().requires_grad_();
    Tensor y, dx, yc, dxc;
    both_layouts(
        x0.to(dt),
        [&](const Tensor& v) {
          const bool c = !v.is_contiguous();
          return batch_norm(v, c ? w2 : w1, bias, c ? rmc : rm, c ? rvc : rv, /*training=*/true);
        },
        y, dx, yc, dxc);
    CHECK(is_cl(yc));
    CHECK(is_cl(dxc));
    CHECK(values(yc) == values(y));
    CHECK(values(dxc) == values(dx));
    CHECK(values(w2.grad()) == values(w1.grad()));
    CHECK(values(rmc) == values(rm));
    CHECK(values(rvc) == values(rv));
    // eval mode: the running statistics
    NoGradGuard no_grad;
    const Tensor e = batch_norm(x0.to(dt), weight, bias, rm, rv, false);
    const Tensor ec = batch_norm(x0.to(dt).to(kCL), weight, bias, rm, rv, false);
    CHECK(is_cl(ec));
    CHECK(values(ec) == values(e));
  }
}

TEST_CASE("group_norm on channels-last gives the NCHW bits, NHWC y and dx", "[ops][memory_format][norm]") {
  manual_seed(12);
  const Tensor x0 = randn({3, 6, 5, 7}) * 3.0 + 1.0;
  for (DType dt : {DType::F64, DType::F32, DType::F16, DType::BF16}) {
    for (int64_t groups : {1, 3, 6}) {  // one group (layer norm per sample), groups, instance norm
      INFO(dtype_name(dt) << " groups " << groups);
      const Tensor weight = randn({6}), bias = randn({6});
      Tensor w1 = weight.clone().requires_grad_(), w2 = weight.clone().requires_grad_();
      Tensor y, dx, yc, dxc;
      both_layouts(
          x0.to(dt),
          [&](const Tensor& v) { return group_norm(v, groups, v.is_contiguous() ? w1 : w2, bias, 1e-5); }, y, dx, yc,
          dxc);
      CHECK(is_cl(yc));
      CHECK(is_cl(dxc));
      CHECK(values(yc) == values(y));
      CHECK(values(dxc) == values(dx));
      CHECK(values(w2.grad()) == values(w1.grad()));
      // An NCHW gradient for an NHWC x: dx still follows x.
      const Tensor xc = x0.to(dt).to(kCL);
      NoGradGuard no_grad;
      const Tensors fwd = dispatch(OpId::group_norm, {xc}, {.dim = groups, .alpha = 1e-5, .mode = 0});
      const Tensor g = randn(x0.shape()).to(dt);
      const Tensors bw = dispatch(OpId::group_norm_backward, {g, xc, fwd[1], fwd[2]}, {.dim = groups, .mode = 0});
      const Tensors bw_nchw =
          dispatch(OpId::group_norm_backward, {g, x0.to(dt), fwd[1], fwd[2]}, {.dim = groups, .mode = 0});
      CHECK(is_cl(bw[0]));
      CHECK(bw_nchw[0].is_contiguous());
      CHECK(values(bw[0]) == values(bw_nchw[0]));
    }
  }
  // Other ranks and layouts are unchanged: a 3-D input and a transposed 4-D view give row-major outputs.
  const Tensor x3 = randn({2, 4, 9});
  CHECK(group_norm(x3, 2, {}, {}, 1e-5).is_contiguous());
  CHECK(group_norm(x0.transpose(2, 3), 2, {}, {}, 1e-5).is_contiguous());
}

TEST_CASE("pooling on channels-last gives the NCHW bits and NHWC gradients", "[ops][memory_format][pool]") {
  manual_seed(13);
  const Tensor x0 = randn({2, 5, 7, 6});
  using Fn = Tensor (*)(const Tensor&);
  const Fn fns[] = {
      [](const Tensor& v) { return max_pool2d(v, {3, 3}, {2, 2}, {1, 1}); },
      [](const Tensor& v) { return avg_pool2d(v, {3, 2}, {2, 2}, {1, 1}, false); },
      [](const Tensor& v) { return adaptive_avg_pool2d(v, {3, 2}); },
      [](const Tensor& v) { return adaptive_avg_pool2d(v, {1, 1}); },  // global: a [N, C, 1, 1] output
  };
  for (DType dt : {DType::F32, DType::BF16}) {
    for (std::size_t i = 0; i < std::size(fns); ++i) {
      INFO("pool " << i << " " << dtype_name(dt));
      Tensor y, dx, yc, dxc;
      both_layouts(x0.to(dt), fns[i], y, dx, yc, dxc);
      CHECK(yc.is_contiguous(kCL));
      CHECK(yc.suggest_memory_format() == kCL);
      CHECK(is_cl(dxc));  // also after global pooling, whose [N, C, 1, 1] gradient cannot tell
      CHECK(values(yc) == values(y));
      CHECK(values(dxc) == values(dx));
    }
  }
  const Tensor idx = max_pool2d_indices(x0, {2, 2}), idxc = max_pool2d_indices(x0.to(kCL), {2, 2});
  CHECK(values(idxc) == values(idx));
}

TEST_CASE("a conv, batch norm, relu, add, pool chain stays channels-last end to end", "[ops][memory_format]") {
  manual_seed(17);
  const Tensor w1 = randn({8, 3, 3, 3}) * 0.3, w2 = randn({8, 8, 3, 3}) * 0.2;
  auto net = [&](const Tensor& x) {
    const Tensor h = relu(batch_norm(conv2d(x, w1, {}, {.padding = {1, 1}}), {}, {}, {}, {}, true));
    const Tensor r = relu(add(batch_norm(conv2d(h, w2, {}, {.padding = {1, 1}}), {}, {}, {}, {}, true), h));
    CHECK(r.suggest_memory_format() == x.suggest_memory_format());
    return adaptive_avg_pool2d(r, {1, 1}).flatten(1);
  };
  Tensor y, dx, yc, dxc;
  both_layouts(randn({4, 3, 8, 8}), net, y, dx, yc, dxc);
  CHECK(is_cl(dxc));
  CHECK(max_rel_diff(yc, y) < 1e-5);
  CHECK(max_rel_diff(dxc, dx) < 1e-5);
}

TEST_CASE("a move between devices keeps channels-last and makes a non-dense source dense", "[ops][memory_format]") {
  // The rule of the to_device op, run here as a move to the same device (the CPU kernel); the GPU
  // moves are checked in tests/cuda/test_cuda_runtime.cpp.
  auto move = [](const Tensor& t) { return dispatch1(OpId::to_device, {t}, {.device = Device::cpu()}); };
  const Tensor x = randn({2, 3, 4, 5}).to(kCL);
  const Tensor y = move(x);
  CHECK(is_cl(y));
  CHECK_FALSE(y.is_same(x));
  CHECK(values(y) == values(x));
  CHECK(move(randn({2, 3, 4, 5})).is_contiguous());
  const Tensor t = randn({5, 7}).t();
  const Tensor yt = move(t);
  CHECK(yt.is_contiguous());
  CHECK(values(yt) == values(t));
}
