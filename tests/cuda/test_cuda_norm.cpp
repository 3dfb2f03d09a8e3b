// CUDA kernels of the norm ops (cuda/kernels/norm.cu) against the CPU's (the reference):
// layer_norm (1 and 2 normalised dims), rms_norm, group_norm (2 and 3 groups), batch_norm
// (training with and without running statistics, eval) and the fused backward ops, on odd sizes,
// with and without weight/bias, in f64/f32/f16/bf16, every output (the saved statistics too).
// Inputs are made on the CPU in the tested dtype and copied, so both devices see the same bits;
// the backward ops get the CPU forward's statistics on both devices.
//
// Tolerances (why): both devices compute in A = f32 (f64 for f64) and round each output once,
// but they sum in different orders — the CPU by the cascade rule (leaves of 128, O(log n)
// ulps), the GPU by a tree of per-thread partials (at most ~32 terms each, then warp shuffles
// and shared memory) — and nvcc contracts a*b + c into fused multiply-adds. Each sum's error is
// below ~(32 + 2 log2 n) u Σ|terms| on either side, u the unit roundoff of A. So a value of A
// (mean, rstd, dweight, dbias) may differ by k u (|want| + scale) with k = 256 and scale the
// size of the terms summed into it (4 for statistics of inputs of scale ~3 around 2; the number
// of terms for the parameter gradients, whose terms are O(1)); an output rounded to T (y, dx)
// may in addition land on the neighbouring value of T from those slightly different A values:
// one ulp of T, 2^-10 (f16) or 2^-7 (bf16) relative. Any indexing mistake gives O(1) errors.
// Exact cases: a constant channel/row normalises to exactly 0 on both devices (x - mean is 0
// whatever the summation order: every partial sum of equal small differences is exact).
#include <catch2/catch.hpp>

#include <cmath>
#include <string>

#include "core/factory.h"
#include "cuda_test_util.h"
#include "ops/dispatcher.h"
#include "ops/norm.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::gpu;
using mg::test::values;

namespace {

const std::vector<DType> kFloats = {DType::F64, DType::F32, DType::F16, DType::BF16};

DType acc_dtype(DType dt) { return dt == DType::F64 ? DType::F64 : DType::F32; }
double unit_of_acc(DType dt) { return dt == DType::F64 ? 0x1p-53 : 0x1p-24; }
// One ulp of T relative (f16/bf16 outputs rounded from slightly different f32 values).
double rounding_of(DType dt) {
  switch (dt) {
    case DType::F16: return 1.01 * 0x1p-10;
    case DType::BF16: return 1.01 * 0x1p-7;
    default: return 0;
  }
}

// got (on the GPU) vs want (CPU): |got - want| <= rel |want| + 256 u_A (|want| + scale).
void require_close(const std::string& what, const Tensor& got, const Tensor& want, DType x_dtype, double scale,
                   bool rounded_to_x_dtype) {
  INFO(what << " " << dtype_name(want.dtype()) << " " << shape_str(want.shape()) << " (x " << dtype_name(x_dtype)
            << ")");
  REQUIRE(got.device() == gpu());
  REQUIRE(got.dtype() == want.dtype());
  REQUIRE(got.shape() == want.shape());
  const double rel = rounded_to_x_dtype ? rounding_of(x_dtype) : 0.0;
  const double k = 256 * unit_of_acc(x_dtype);
  const std::vector<double> g = values(got), w = values(want);
  for (std::size_t i = 0; i < w.size(); ++i) {
    const double tol = rel * std::abs(w[i]) + k * (std::abs(w[i]) + scale);
    const bool same = (std::isnan(g[i]) && std::isnan(w[i])) || std::abs(g[i] - w[i]) <= tol;
    if (!same) FAIL(what << " element " << i << ": cuda " << g[i] << " cpu " << w[i] << " (tol " << tol << ")");
  }
}

Tensor randn_in(DType dt, const Shape& shape, double scale, double shift, uint64_t seed) {
  Generator gen(seed);
  return to(randn(shape, {}, &gen) * scale + shift, dt);
}

Tensors on_gpu(const Tensors& in) {
  Tensors out;
  for (const Tensor& t : in) out.push_back(t.to(gpu()));
  return out;
}

// Runs op on the CPU inputs and on GPU copies; returns {cpu outputs, gpu outputs}.
std::pair<Tensors, Tensors> run_both(OpId op, const Tensors& cpu_in, const OpAttrs& a) {
  const Tensors gpu_in = on_gpu(cpu_in);
  Tensors want = dispatch(op, cpu_in, a);
  Tensors got = dispatch(op, gpu_in, a);
  return {want, got};
}

// The parameter gradients of a fused backward (outputs 1.. in the statistics dtype).
void require_param_grads(const std::string& what, const Tensors& want, const Tensors& got, DType dt, double terms) {
  REQUIRE(got.size() == want.size());
  for (std::size_t k = 1; k < want.size(); ++k)
    require_close(what + " param grad " + std::to_string(k), got[k], want[k], dt, terms, false);
}

void require_all_zero(const std::string& what, const Tensor& y) {
  INFO(what << " " << dtype_name(y.dtype()));
  for (double v : values(y)) REQUIRE(v == 0.0);
}

}  // namespace

TEST_CASE("CUDA layer_norm and layer_norm_backward match the CPU over 1 and 2 normalised dims",
          "[cuda][gpu][norm]") {
  for (DType dt : kFloats) {
    for (int64_t k : {1, 2}) {
      const Shape shape = k == 1 ? Shape{37, 4097} : Shape{37, 17, 241};
      const Shape pshape = k == 1 ? Shape{4097} : Shape{17, 241};
      const Tensor x = randn_in(dt, shape, 3.0, 2.0, 1);
      const Tensor w = randn_in(dt, pshape, 0.5, 1.0, 2), b = randn_in(dt, pshape, 0.5, 0.0, 3);
      const Tensor g = randn_in(dt, shape, 1.0, 0.0, 4);
      for (int64_t mode = 0; mode < 4; ++mode) {
        const std::string what = "layer_norm dims " + std::to_string(k) + " mode " + std::to_string(mode);
        Tensors in{x};
        if (mode & 1) in.push_back(w);
        if (mode & 2) in.push_back(b);
        const auto [want, got] = run_both(OpId::layer_norm, in, {.dim = k, .alpha = 1e-5, .mode = mode});
        require_close(what + " y", got[0], want[0], dt, 1.0, true);
        require_close(what + " mean", got[1], want[1], dt, 4.0, false);
        require_close(what + " rstd", got[2], want[2], dt, 4.0, false);
        // backward: mode bit0 weight, bit1 dbias; the CPU's statistics on both devices
        Tensors bin{g, x, want[1], want[2]};
        if (mode & 1) bin.push_back(w);
        const auto [bw, bg] = run_both(OpId::layer_norm_backward, bin, {.dim = k, .mode = mode});
        require_close(what + " dx", bg[0], bw[0], dt, 1.0, true);
        require_param_grads(what, bw, bg, dt, 37);
      }
    }
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA layer_norm reads strided inputs and gives the same bits on every run", "[cuda][gpu][norm]") {
  for (DType dt : {DType::F32, DType::BF16}) {
    const Tensor x = randn_in(dt, {4097, 37}, 3.0, 2.0, 5).permute({1, 0});  // [37, 4097], not dense
    const Tensor g = randn_in(dt, {4097, 37}, 1.0, 0.0, 6).permute({1, 0});
    const Tensor w = randn_in(dt, {4097}, 0.5, 1.0, 7), b = randn_in(dt, {4097}, 0.5, 0.0, 8);
    const OpAttrs a{.dim = 1, .alpha = 1e-5, .mode = 3};
    const auto [want, got] = run_both(OpId::layer_norm, {x, w, b}, a);
    require_close("strided layer_norm y", got[0], want[0], dt, 1.0, true);
    require_close("strided layer_norm rstd", got[2], want[2], dt, 4.0, false);
    const auto [bw, bg] = run_both(OpId::layer_norm_backward, {g, x, want[1], want[2], w}, a);
    require_close("strided layer_norm dx", bg[0], bw[0], dt, 1.0, true);
    require_param_grads("strided layer_norm", bw, bg, dt, 37);
    // determinism: no atomics, fixed trees
    const Tensors again = dispatch(OpId::layer_norm_backward, on_gpu({g, x, want[1], want[2], w}), a);
    for (std::size_t k = 0; k < again.size(); ++k) REQUIRE(values(again[k]) == values(bg[k]));
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA rms_norm matches the CPU", "[cuda][gpu][norm]") {
  for (DType dt : kFloats) {
    for (int64_t k : {1, 2}) {
      const Shape shape = k == 1 ? Shape{37, 4097} : Shape{37, 17, 241};
      const Shape pshape = k == 1 ? Shape{4097} : Shape{17, 241};
      const Tensor x = randn_in(dt, shape, 3.0, 1.0, 11), w = randn_in(dt, pshape, 0.5, 1.0, 12);
      for (int64_t mode = 0; mode < 2; ++mode) {
        const std::string what = "rms_norm dims " + std::to_string(k) + " mode " + std::to_string(mode);
        Tensors in{x};
        if (mode & 1) in.push_back(w);
        const auto [want, got] = run_both(OpId::rms_norm, in, {.dim = k, .alpha = 1e-6, .mode = mode});
        require_close(what + " y", got[0], want[0], dt, 1.0, true);
        require_close(what + " rstd", got[1], want[1], dt, 4.0, false);
      }
    }
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA group_norm and group_norm_backward match the CPU with 2 and 3 groups", "[cuda][gpu][norm]") {
  const Shape shape{3, 6, 17, 19};
  for (DType dt : kFloats) {
    const Tensor x = randn_in(dt, shape, 3.0, 2.0, 21), g = randn_in(dt, shape, 1.0, 0.0, 22);
    const Tensor w = randn_in(dt, {6}, 0.5, 1.0, 23), b = randn_in(dt, {6}, 0.5, 0.0, 24);
    for (int64_t groups : {2, 3}) {
      for (int64_t mode = 0; mode < 4; ++mode) {
        const std::string what = "group_norm groups " + std::to_string(groups) + " mode " + std::to_string(mode);
        Tensors in{x};
        if (mode & 1) in.push_back(w);
        if (mode & 2) in.push_back(b);
        const auto [want, got] = run_both(OpId::group_norm, in, {.dim = groups, .alpha = 1e-5, .mode = mode});
        require_close(what + " y", got[0], want[0], dt, 1.0, true);
        require_close(what + " mean", got[1], want[1], dt, 4.0, false);
        require_close(what + " rstd", got[2], want[2], dt, 4.0, false);
        Tensors bin{g, x, want[1], want[2]};
        if (mode & 1) bin.push_back(w);
        const auto [bw, bg] = run_both(OpId::group_norm_backward, bin, {.dim = groups, .mode = mode});
        require_close(what + " dx", bg[0], bw[0], dt, 1.0, true);
        require_param_grads(what, bw, bg, dt, 3 * 17 * 19);  // N·S terms per channel
      }
    }
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA batch_norm training, eval and backward match the CPU, running statistics included",
          "[cuda][gpu][norm]") {
  const Shape shape{16, 5, 7, 9};
  for (DType dt : kFloats) {
    const DType rdt = acc_dtype(dt);  // f32 running statistics next to f16/bf16, as the CPU's tests
    const Tensor x = randn_in(dt, shape, 3.0, 2.0, 31), g = randn_in(dt, shape, 1.0, 0.0, 32);
    const Tensor w = randn_in(dt, {5}, 0.5, 1.0, 33), b = randn_in(dt, {5}, 0.5, 0.0, 34);
    const Tensor rm0 = randn_in(rdt, {5}, 1.0, 0.0, 35);
    const Tensor rv0 = randn_in(rdt, {5}, 1.0, 0.0, 36) * randn_in(rdt, {5}, 1.0, 0.0, 36) + 0.5;
    for (int64_t mode = 0; mode < 8; ++mode) {
      for (bool training : {true, false}) {
        if (!training && !(mode & 4)) continue;  // eval needs the running statistics
        const std::string what = std::string("batch_norm ") + (training ? "training" : "eval") + " mode " +
                                 std::to_string(mode);
        Tensors in{x};
        if (mode & 1) in.push_back(w);
        if (mode & 2) in.push_back(b);
        Tensor rm_cpu = clone(rm0), rv_cpu = clone(rv0);
        Tensor rm_gpu = rm0.to(gpu()), rv_gpu = rv0.to(gpu());
        Tensors gin = on_gpu(in);
        if (mode & 4) in.push_back(rm_cpu), in.push_back(rv_cpu), gin.push_back(rm_gpu), gin.push_back(rv_gpu);
        const OpAttrs a{.keepdim = training, .alpha = 1e-5, .beta = 0.1, .mode = mode};
        const Tensors want = dispatch(OpId::batch_norm, in, a);
        const Tensors got = dispatch(OpId::batch_norm, gin, a);
        require_close(what + " y", got[0], want[0], dt, 1.0, true);
        require_close(what + " mean", got[1], want[1], dt, 4.0, false);
        require_close(what + " invstd", got[2], want[2], dt, 4.0, false);
        if (mode & 4) {  // updated in place by a training step, left alone by eval
          require_close(what + " running_mean", rm_gpu, rm_cpu, dt, 4.0, false);
          require_close(what + " running_var", rv_gpu, rv_cpu, dt, 4.0, false);
          if (!training) REQUIRE(values(rm_gpu) == values(rm0));
          if (!training) REQUIRE(values(rv_gpu) == values(rv0));
        }
        if (!training) continue;  // the fused backward is training only
        Tensors bin{g, x, want[1], want[2]};
        if (mode & 1) bin.push_back(w);
        const auto [bw, bg] = run_both(OpId::batch_norm_backward, bin, {.mode = mode & 3});
        require_close(what + " dx", bg[0], bw[0], dt, 1.0, true);
        require_param_grads(what, bw, bg, dt, 16 * 7 * 9);  // N·S terms per channel
      }
    }
    // a strided input (a permuted dense [5, 16, 7, 9])
    const Tensor xs = randn_in(dt, {5, 16, 7, 9}, 3.0, 2.0, 37).permute({1, 0, 2, 3});
    const auto [want, got] = run_both(OpId::batch_norm, {xs, w, b}, {.keepdim = true, .alpha = 1e-5, .mode = 3});
    require_close("strided batch_norm y", got[0], want[0], dt, 1.0, true);
    require_close("strided batch_norm invstd", got[2], want[2], dt, 4.0, false);
  }
  mg::test::require_no_pending_cuda_error();
}

// Channels-last batch norm runs natively on CUDA (column sums over the [N·H·W, C] rows, no NCHW
// temporary): y and dx come out NHWC; against the CPU the tolerances above hold (the sums are
// taken in another order again: 32 lanes of up to 128 rows, a tree, then the chunks); eval mode,
// whose statistics are the running ones, gives the NCHW CUDA kernel's bits exactly (the same
// per-element arithmetic). Shapes: C below a warp, C over two tiles of 32, and N·H·W over one
// chunk of 4096 rows.
TEST_CASE("CUDA batch_norm on channels-last tensors: NHWC y and dx, CPU values, eval bit for bit",
          "[cuda][gpu][norm]") {
  const auto cl = MemoryFormat::ChannelsLast;
  for (const Shape& shape : {Shape{16, 5, 7, 9}, Shape{4, 70, 5, 3}, Shape{8, 3, 40, 40}}) {
    const int64_t c = shape[1], terms = shape[0] * shape[2] * shape[3];
    for (DType dt : kFloats) {
      const DType rdt = acc_dtype(dt);
      const Tensor x = randn_in(dt, shape, 3.0, 2.0, 61), g = randn_in(dt, shape, 1.0, 0.0, 62);
      const Tensor w = randn_in(dt, {c}, 0.5, 1.0, 63), b = randn_in(dt, {c}, 0.5, 0.0, 64);
      const Tensor rm0 = randn_in(rdt, {c}, 1.0, 0.0, 65);
      const Tensor rv0 = randn_in(rdt, {c}, 1.0, 0.0, 66) * randn_in(rdt, {c}, 1.0, 0.0, 66) + 0.5;
      const Tensor xl = x.to(gpu()).to(cl), gl = g.to(gpu()).to(cl);
      for (int64_t mode : {int64_t(7), int64_t(3), int64_t(0)}) {
        for (bool training : {true, false}) {
          if (!training && !(mode & 4)) continue;
          const std::string what = "NHWC batch_norm " + shape_str(shape) + (training ? " training" : " eval") +
                                   " mode " + std::to_string(mode);
          Tensors in{x}, gin{xl};
          if (mode & 1) in.push_back(w), gin.push_back(w.to(gpu()));
          if (mode & 2) in.push_back(b), gin.push_back(b.to(gpu()));
          Tensor rm_cpu = clone(rm0), rv_cpu = clone(rv0), rm_gpu = rm0.to(gpu()), rv_gpu = rv0.to(gpu());
          if (mode & 4) in.push_back(rm_cpu), in.push_back(rv_cpu), gin.push_back(rm_gpu), gin.push_back(rv_gpu);
          const OpAttrs a{.keepdim = training, .alpha = 1e-5, .beta = 0.1, .mode = mode};
          const Tensors want = dispatch(OpId::batch_norm, in, a);
          const Tensors got = dispatch(OpId::batch_norm, gin, a);
          CHECK(got[0].is_contiguous(cl));
          CHECK_FALSE(got[0].is_contiguous());
          require_close(what + " y", got[0], want[0], dt, 1.0, true);
          require_close(what + " mean", got[1], want[1], dt, 4.0, false);
          require_close(what + " invstd", got[2], want[2], dt, 4.0, false);
          if (mode & 4) {
            require_close(what + " running_mean", rm_gpu, rm_cpu, dt, 4.0, false);
            require_close(what + " running_var", rv_gpu, rv_cpu, dt, 4.0, false);
          }
          if (!training) {  // the NCHW CUDA kernel's bits
            Tensors nin{x.to(gpu())};
            for (std::size_t k = 1; k < gin.size(); ++k) nin.push_back(gin[k]);
            REQUIRE(values(got[0]) == values(dispatch(OpId::batch_norm, nin, a)[0]));
            continue;
          }
          // backward with an NHWC g, and with an NCHW g next to NHWC x (dx still in x's layout)
          Tensors bin{g, x, want[1], want[2]};
          Tensors gbin{gl, xl, want[1].to(gpu()), want[2].to(gpu())};
          if (mode & 1) bin.push_back(w), gbin.push_back(w.to(gpu()));
          const Tensors bw = dispatch(OpId::batch_norm_backward, bin, {.mode = mode & 3});
          for (const Tensor& gx : {gl, g.to(gpu())}) {
            gbin[0] = gx;
            const Tensors bg = dispatch(OpId::batch_norm_backward, gbin, {.mode = mode & 3});
            CHECK(bg[0].is_contiguous(cl));
            require_close(what + " dx", bg[0], bw[0], dt, 1.0, true);
            require_param_grads(what, bw, bg, dt, double(terms));
          }
        }
      }
    }
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA group_norm on channels-last tensors: NHWC y and dx with the CPU's values", "[cuda][gpu][norm]") {
  const auto cl = MemoryFormat::ChannelsLast;
  const Shape shape{3, 6, 17, 19};
  for (DType dt : kFloats) {
    const Tensor x = randn_in(dt, shape, 3.0, 2.0, 71), g = randn_in(dt, shape, 1.0, 0.0, 72);
    const Tensor w = randn_in(dt, {6}, 0.5, 1.0, 73), b = randn_in(dt, {6}, 0.5, 0.0, 74);
    const Tensor xl = x.to(gpu()).to(cl), gl = g.to(gpu()).to(cl);
    for (int64_t groups : {2, 6}) {
      const std::string what = "NHWC group_norm groups " + std::to_string(groups);
      const Tensors want = dispatch(OpId::group_norm, {x, w, b}, {.dim = groups, .alpha = 1e-5, .mode = 3});
      const Tensors got =
          dispatch(OpId::group_norm, {xl, w.to(gpu()), b.to(gpu())}, {.dim = groups, .alpha = 1e-5, .mode = 3});
      CHECK(got[0].is_contiguous(cl));
      CHECK_FALSE(got[0].is_contiguous());
      require_close(what + " y", got[0], want[0], dt, 1.0, true);
      require_close(what + " mean", got[1], want[1], dt, 4.0, false);
      const Tensors bw = dispatch(OpId::group_norm_backward, {g, x, want[1], want[2], w}, {.dim = groups, .mode = 3});
      for (const Tensor& gx : {gl, g.to(gpu())}) {  // an NHWC or NCHW g: dx follows x
        const Tensors bg = dispatch(OpId::group_norm_backward,
                                    {gx, xl, want[1].to(gpu()), want[2].to(gpu()), w.to(gpu())},
                                    {.dim = groups, .mode = 3});
        CHECK(bg[0].is_contiguous(cl));
        CHECK_FALSE(bg[0].is_contiguous());
        require_close(what + " dx", bg[0], bw[0], dt, 1.0, true);
        require_param_grads(what, bw, bg, dt, 3 * 17 * 19);
      }
    }
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA norms take f32 parameters next to f16/bf16 inputs, as the CPU does", "[cuda][gpu][norm]") {
  for (DType dt : {DType::F16, DType::BF16}) {
    const Tensor x = randn_in(dt, {16, 6, 7, 9}, 3.0, 2.0, 41), g = randn_in(dt, {16, 6, 7, 9}, 1.0, 0.0, 42);
    const Tensor w = randn_in(DType::F32, {6}, 0.5, 1.0, 43), b = randn_in(DType::F32, {6}, 0.5, 0.0, 44);
    const Tensor wl = randn_in(DType::F32, {9}, 0.5, 1.0, 45), bl = randn_in(DType::F32, {9}, 0.5, 0.0, 46);
    {
      const auto [want, got] = run_both(OpId::batch_norm, {x, w, b}, {.keepdim = true, .alpha = 1e-5, .mode = 3});
      require_close("mixed batch_norm y", got[0], want[0], dt, 1.0, true);
      const auto [bw, bg] = run_both(OpId::batch_norm_backward, {g, x, want[1], want[2], w}, {.mode = 3});
      require_close("mixed batch_norm dx", bg[0], bw[0], dt, 1.0, true);
      require_param_grads("mixed batch_norm", bw, bg, dt, 16 * 7 * 9);
    }
    {
      const auto [want, got] = run_both(OpId::group_norm, {x, w, b}, {.dim = 3, .alpha = 1e-5, .mode = 3});
      require_close("mixed group_norm y", got[0], want[0], dt, 1.0, true);
      const auto [bw, bg] = run_both(OpId::group_norm_backward, {g, x, want[1], want[2], w}, {.dim = 3, .mode = 3});
      require_close("mixed group_norm dx", bg[0], bw[0], dt, 1.0, true);
      require_param_grads("mixed group_norm", bw, bg, dt, 16 * 7 * 9);
    }
    {
      const auto [want, got] = run_both(OpId::layer_norm, {x, wl, bl}, {.dim = 1, .alpha = 1e-5, .mode = 3});
      require_close("mixed layer_norm y", got[0], want[0], dt, 1.0, true);
      const auto [bw, bg] = run_both(OpId::layer_norm_backward, {g, x, want[1], want[2], wl}, {.dim = 1, .mode = 3});
      require_close("mixed layer_norm dx", bg[0], bw[0], dt, 1.0, true);
      require_param_grads("mixed layer_norm", bw, bg, dt, 16 * 6 * 7);  // column sums over the rows
    }
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA norm ops make the host wait for nothing (no counted synchronisation)", "[cuda][gpu][norm]") {
  const Tensor x = randn_in(DType::F32, {16, 6, 7, 9}, 3.0, 2.0, 51).to(gpu());
  const Tensor g = randn_in(DType::F32, {16, 6, 7, 9}, 1.0, 0.0, 52).to(gpu());
  const Tensor w = ones({6}).to(gpu()), b = zeros({6}).to(gpu());
  Tensor rm = zeros({6}).to(gpu()), rv = ones({6}).to(gpu());
  const Tensor wl = ones({9}).to(gpu());
  const uint64_t before = cuda::sync_count();
  const Tensors bn = dispatch(OpId::batch_norm, {x, w, b, rm, rv}, {.keepdim = true, .alpha = 1e-5, .beta = 0.1, .mode = 7});
  dispatch(OpId::batch_norm_backward, {g, x, bn[1], bn[2], w}, {.mode = 3});
  const Tensors gn = dispatch(OpId::group_norm, {x, w, b}, {.dim = 3, .alpha = 1e-5, .mode = 3});
  dispatch(OpId::group_norm_backward, {g, x, gn[1], gn[2], w}, {.dim = 3, .mode = 3});
  const Tensors ln = dispatch(OpId::layer_norm, {x, wl}, {.dim = 1, .alpha = 1e-5, .mode = 1});
  dispatch(OpId::layer_norm_backward, {g, x, ln[1], ln[2], wl}, {.dim = 1, .mode = 3});
  dispatch(OpId::rms_norm, {x, wl}, {.dim = 1, .alpha = 1e-6, .mode = 1});
  REQUIRE(cuda::sync_count() == before);
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA norms of a constant channel, group or row are exactly 0, as on the CPU", "[cuda][gpu][norm]") {
  for (DType dt : kFloats) {
    const Tensor x = full({16, 1, 28, 28}, 0.1, {.dtype = dt}).to(gpu());
    const Tensor w = ones({1}, {.dtype = dt}).to(gpu()), b = zeros({1}, {.dtype = dt}).to(gpu());
    require_all_zero("batch_norm constant channel", batch_norm(x, w, b, Tensor(), Tensor(), /*training=*/true));
    require_all_zero("batch_norm constant channel, no affine",
                     batch_norm(x, Tensor(), Tensor(), Tensor(), Tensor(), /*training=*/true));
    require_all_zero("group_norm constant group", group_norm(x, 1));
    const Tensor r = full({37, 4097}, 0.1, {.dtype = dt}).to(gpu());
    require_all_zero("layer_norm constant row", layer_norm(r, {4097}));
    // and the saved mean is the constant itself (0.1 rounded to the dtype, in the statistics dtype)
    const Tensors out = dispatch(OpId::batch_norm, {x}, {.keepdim = true, .alpha = 1e-5});
    const double c = values(full({1}, 0.1, {.dtype = dt}))[0];
    REQUIRE(values(out[1])[0] == c);
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA layer_norm's weight and bias gradients over more rows than one grid column of chunks",
          "[cuda][gpu][norm][big]") {
  // 2^28 + 4096 rows of one feature: 65537 chunks of 4096 rows, one more than a grid's y extent, so
  // a block also sums a second chunk. With one feature xhat is 0 on every row, so dweight is exactly
  // 0 and dbias exactly the row count (every partial and total is an integer below 2^29, a multiple
  // of 32: exact in f32).
  const int64_t rows = (int64_t(1) << 28) + 4096;
  const Tensor x = randn({rows, 1}, {.device = gpu()});
  const Tensor w = ones({1}, {.device = gpu()}).requires_grad_(), b = zeros({1}, {.device = gpu()}).requires_grad_();
  layer_norm(x, {1}, w, b).sum().backward();
  CHECK(w.grad().item<float>() == 0.0f);
  CHECK(b.grad().item<float>() == float(rows));
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA norms over lines long enough for 1024-thread blocks match the CPU", "[cuda][gpu][norm]") {
  // Rows of 40000 (layer_norm) and planes of 130 x 130 = 16900 (batch_norm) get 1024 threads per
  // block (line_threads), where warp 0 combines all 32 warps' sums and each thread adds several
  // leaves of 32: the shapes of the other tests stop at 256.
  for (DType dt : {DType::F32, DType::F64}) {
    const Tensor x = randn_in(dt, {3, 40000}, 3.0, 2.0, 41), g = randn_in(dt, {3, 40000}, 1.0, 0.0, 42);
    const Tensor w = randn_in(dt, {40000}, 0.5, 1.0, 43);
    const auto [want, got] = run_both(OpId::layer_norm, {x, w}, {.dim = 1, .alpha = 1e-5, .mode = 1});
    require_close("layer_norm row of 40000 y", got[0], want[0], dt, 1.0, true);
    require_close("layer_norm row of 40000 mean", got[1], want[1], dt, 4.0, false);
    require_close("layer_norm row of 40000 rstd", got[2], want[2], dt, 4.0, false);
    const auto [bw, bg] = run_both(OpId::layer_norm_backward, {g, x, want[1], want[2], w}, {.dim = 1, .mode = 1});
    require_close("layer_norm row of 40000 dx", bg[0], bw[0], dt, 1.0, true);
    const Tensor xb = randn_in(dt, {2, 3, 130, 130}, 3.0, 2.0, 44), gb = randn_in(dt, {2, 3, 130, 130}, 1.0, 0.0, 45);
    const auto [bn_want, bn_got] = run_both(OpId::batch_norm, {xb}, {.keepdim = true, .alpha = 1e-5, .beta = 0.1, .mode = 0});
    require_close("batch_norm planes of 16900 y", bn_got[0], bn_want[0], dt, 1.0, true);
    require_close("batch_norm planes of 16900 invstd", bn_got[2], bn_want[2], dt, 4.0, false);
    const auto [bnb_want, bnb_got] = run_both(OpId::batch_norm_backward, {gb, xb, bn_want[1], bn_want[2]}, {.mode = 0});
    require_close("batch_norm planes of 16900 dx", bnb_got[0], bnb_want[0], dt, 1.0, true);
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA layer_norm's bias gradient over 2^20 rows stays within the column sums' bound", "[cuda][gpu][norm][big]") {
  // dbias = Σ_rows g with g = 0.1f everywhere: exactly rows · 0.1f in real arithmetic. The column
  // sums add each lane's rows and the chunk partials in leaves of 32 (LeafSums), so the error stays
  // near 32 u · Σ|g|; plain running sums of 128 rows per lane and of 256 chunk partials measured
  // 45 u here (a host simulation of the old kernels).
  const int64_t rows = int64_t(1) << 20;
  const Tensor x = randn({rows, 4}, {.device = gpu()});
  const Tensor w = ones({4}, {.device = gpu()}).requires_grad_(), b = zeros({4}, {.device = gpu()}).requires_grad_();
  (layer_norm(x, {4}, w, b) * full({rows, 4}, 0.1, {.device = gpu()})).sum().backward();
  const double exact = double(rows) * double(0.1f);
  for (double v : values(b.grad())) CHECK(std::abs(v - exact) <= 32 * 0x1p-24 * exact);
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA batch_norm training takes an empty batch as the CPU: statistics 0 and 1/sqrt(eps), running ones kept",
          "[cuda][gpu][norm]") {
  for (const Shape& s : std::vector<Shape>{{0, 3, 4, 4}, {2, 3, 0, 0}}) {
    INFO(str_cat(s));
    Tensor w = ones({3}, {.device = gpu()}).requires_grad_(), b = zeros({3}, {.device = gpu()}).requires_grad_();
    Tensor rm = zeros({3}, {.device = gpu()}), rv = ones({3}, {.device = gpu()});
    Tensor x = zeros(s, {.device = gpu()}).requires_grad_();
    const Tensor y = batch_norm(x, w, b, rm, rv, /*training=*/true, 0.1, 1e-5);
    CHECK(y.shape() == s);
    CHECK(values(rm.to(Device::cpu())) == std::vector<double>(3, 0.0));
    CHECK(values(rv.to(Device::cpu())) == std::vector<double>(3, 1.0));
    sum(y).backward();
    CHECK(values(w.grad().to(Device::cpu())) == std::vector<double>(3, 0.0));
    CHECK(values(b.grad().to(Device::cpu())) == std::vector<double>(3, 0.0));
  }
}
