// CUDA kernels of dropout, pooling and the remaining losses against the CPU's (the reference).
// Inputs are made on the CPU in the tested dtype and copied, so both devices see the same bits.
// - dropout: the keep mask is a function of (seed, offset, element index) only, so it must match
//   bit for bit; the host test below proves it without a GPU by running the device's own keep
//   function (cuda/host/dropout_mask.h) as host code against the CPU kernel. The kept values are
//   x * (1 / (1 - p)) in opmath rounded once — one multiply on both devices, so exact too.
#include <catch2/catch.hpp>

#include <cmath>
#include <functional>

#include "core/factory.h"
#include "core/generator.h"
#include "cuda/host/dropout_mask.h"
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
