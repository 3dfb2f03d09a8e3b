// [gpu] checks of fixes from a review of the CUDA copy, factory, dropout, cumsum, select, im2col
// and graph-state kernels (made before any of them ran on a GPU):
// - a random factory (rand, randn, randint) on CUDA during a graph capture, drawing from a
//   generator that is not part of the graph, is refused: core/factory.cpp refuses only captured
//   generators, so the fill kernel would have been captured with its (seed, offset) frozen and the
//   same values would have come back at every replay;
// - cumsum of a 0-d tensor is the value itself, as on the CPU: the line kernel computed 0 + x,
//   which turns -0 into +0;
// - an in-place op whose operand overlaps the written tensor reads it as it was (the dispatcher's
//   rule, tests/core/test_memory_overlap.cpp): on the GPU the kernel's threads would otherwise
//   race with each other's writes;
// - copy_ from another device moves the source to the destination first (a CPU checkpoint into
//   CUDA state: every O2 --resume on CUDA threw DeviceError).
#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <vector>

#include "core/factory.h"
#include "core/generator.h"
#include "cuda/graph.h"
#include "cuda_test_util.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;
using mg::test::gpu;

namespace {

std::vector<uint8_t> bytes_of(const Tensor& t) {
  const Tensor h = t.contiguous().to(Device::cpu());
  std::vector<uint8_t> b(std::size_t(h.numel()) * h.element_size());
  std::memcpy(b.data(), h.data_ptr(), b.size());
  return b;
}

}  // namespace

TEST_CASE("CUDA random factories refuse a graph capture that would freeze a generator outside the graph",
          "[cuda][gpu][graph][factory]") {
  Generator own(21);  // not added to the graph (the default generator is refused by core already)
  const std::vector<std::pair<const char*, std::function<Tensor()>>> draws = {
      {"rand", [&] { return rand({5}, {.device = gpu()}, &own); }},
      {"randn", [&] { return randn({5}, {.device = gpu()}, &own); }},
      {"randint", [&] { return randint(0, 10, {5}, {.dtype = DType::I64, .device = gpu()}, &own); }},
  };
  for (const auto& [name, draw_binding] : draws) {
    INFO(name);
    const auto& draw = draw_binding;  // clang 14 cannot capture a structured binding
    cuda::Graph graph;
    MG_REQUIRE_ERROR(([&] {
                       cuda::GraphCapture capture(graph);
                       (void)draw();
                     }()),
                     "drew random numbers during a CUDA graph capture from a generator that is not part of the graph");
    CHECK_FALSE(cuda::is_capturing());
    CHECK_FALSE(graph.ready());
    test::require_no_pending_cuda_error();
  }
  // Eagerly the same generator still gives the CPU's bits.
  Generator a, b;
  a.set_state(own.seed(), own.offset());
  b.set_state(own.seed(), own.offset());
  CHECK(bytes_of(randn({9}, {.device = gpu()}, &a)) == bytes_of(randn({9}, {}, &b)));
  // Deterministic fills stay capturable (no generator involved).
  cuda::Graph graph;
  Tensor z;
  {
    cuda::GraphCapture capture(graph);
    z = full({4}, 2.5, {.device = gpu()});
  }
  REQUIRE(graph.ready());
  graph.replay();
  CHECK(bytes_of(z) == bytes_of(full({4}, 2.5)));
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA cumsum of a 0-d tensor is its value, -0 and all, as on the CPU", "[cuda][gpu][reduce]") {
  for (DType dt : {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I32, DType::Bool}) {
    INFO(dtype_name(dt));
    for (double v : {-0.0, 1.0, -3.0}) {
      if (dt == DType::Bool && v < 0) continue;
      const Tensor x = scalar_tensor(v, {.dtype = dt});
      const Tensor want = cumsum(x, 0), got = cumsum(x.to(gpu()), 0);
      REQUIRE(got.device() == gpu());
      REQUIRE(got.dtype() == want.dtype());
      REQUIRE(got.shape() == want.shape());
      CHECK(bytes_of(got) == bytes_of(want));
    }
  }
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA in-place ops read an overlapping operand as it was before the write, as on the CPU",
          "[cuda][gpu][overlap]") {
  for (DType dt : {DType::F32, DType::F16, DType::I64}) {
    INFO(dtype_name(dt));
    Tensor c = arange(0, 5001, 1, {.dtype = dt}), g = c.to(gpu());
    c.slice(0, 1, 5001).copy_(c.slice(0, 0, 5000));
    g.slice(0, 1, 5001).copy_(g.slice(0, 0, 5000));
    CHECK(bytes_of(g) == bytes_of(c));
    Tensor m = arange(0, 64, 1, {.dtype = dt}).reshape({8, 8}), gm = m.to(gpu());
    m.add_(m.select(0, 3));
    gm.add_(gm.select(0, 3));
    CHECK(bytes_of(gm) == bytes_of(m));
  }
  MG_REQUIRE_ERROR(zeros({4}, {.device = gpu()}).unsqueeze(0).expand({3, 4}).add_(1.0),
                   "has elements that share one memory location");
  const Tensor r = zeros({4}, {.device = gpu()});
  r.unsqueeze(0).expand({3, 4}).fill_(1.0);  // one value: each location written once
  CHECK(test::values(r) == std::vector<double>{1, 1, 1, 1});
  test::require_no_pending_cuda_error();
}

TEST_CASE("copy_ from another device moves the source first, as PyTorch's", "[cuda][gpu][copy]") {
  // A checkpoint's CPU tensors into CUDA state (an optimizer's f32 masters at O2), and back.
  const Tensor host = arange(0, 1000, 1, {.dtype = DType::F32});
  Tensor dev = zeros({1000}, {.device = gpu()});
  dev.copy_(host);
  CHECK(bytes_of(dev) == bytes_of(host));
  Tensor back = zeros({2, 1000}, {.dtype = DType::F16});
  back.copy_(dev);  // broadcast and cast on the way
  CHECK(bytes_of(back) == bytes_of(host.to(DType::F16).unsqueeze(0).expand({2, 1000})));
  test::require_no_pending_cuda_error();
}
