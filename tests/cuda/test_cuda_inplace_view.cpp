// In-place ops on views while autograd records (ops/inplace_view.h) on a GPU ([gpu], skipped
// without one): the base's and the view's gradients equal the CPU's, for a row-major base and a
// channels-last one, and double backward runs through it. The CPU cases are in
// tests/autograd/test_inplace_view.cpp.
#include <catch2/catch.hpp>

#include "autograd/engine.h"
#include "core/factory.h"
#include "cuda_test_util.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::gpu;
using mg::test::values;

namespace {

// y = 1.5 x (laid out in `f`); y[:, 1] += w * w; then sum(y^3): returns {y, dx, dw} on the CPU.
Tensors write_into_channel(const Tensor& xv, const Tensor& wv, Device device, MemoryFormat f) {
  Tensor x = clone(xv).to(device).requires_grad_(), w = clone(wv).to(device).requires_grad_();
  Tensor y = (x * 1.5).to(f);
  y.select(1, 1).add_(w * w);
  sum(y * y * y).backward();
  return {y.to(Device::cpu()), x.grad().to(Device::cpu()), w.grad().to(Device::cpu())};
}

}  // namespace

TEST_CASE("CUDA: an in-place write into a view carries gradients as on the CPU", "[cuda][gpu][autograd]") {
  Generator gen(9);
  const Tensor xv = randn({2, 3, 4, 5}, {.dtype = DType::F64}, &gen), wv = randn({2, 4, 5}, {.dtype = DType::F64}, &gen);
  for (const MemoryFormat f : {MemoryFormat::Contiguous, MemoryFormat::ChannelsLast}) {
    INFO((f == MemoryFormat::ChannelsLast ? "channels-last" : "contiguous"));
    const Tensors want = write_into_channel(xv, wv, Device::cpu(), f);
    const Tensors got = write_into_channel(xv, wv, gpu(), f);
    for (std::size_t i = 0; i < want.size(); ++i) {
      const std::vector<double> g = values(got[i]), e = values(want[i]);
      REQUIRE(g.size() == e.size());
      for (std::size_t k = 0; k < g.size(); ++k) CHECK(g[k] == Approx(e[k]).epsilon(1e-12));
    }
  }
  // Double backward: buf[:2] = x[:2]^2 in a zero buffer; d/dx sum(buf^2) = 4 x^3, then 12 x^2.
  Tensor x = from_vector<double>({1.5, -2, 0.5}, {3}).to(gpu()).requires_grad_();
  Tensor buf = zeros({3}, {.dtype = DType::F64, .device = gpu()});
  buf.slice(0, 0, 2).copy_(x.slice(0, 0, 2) * x.slice(0, 0, 2));
  const Tensor g = autograd::grad({sum(buf * buf)}, {x}, {}, std::nullopt, /*create_graph=*/true)[0];
  CHECK(values(g.to(Device::cpu())) == std::vector<double>{13.5, -32, 0});
  sum(g).backward();
  CHECK(values(x.grad().to(Device::cpu())) == std::vector<double>{27, 48, 0});
}
