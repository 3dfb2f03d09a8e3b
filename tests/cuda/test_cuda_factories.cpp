// The factories on a CUDA device (issue 14): zeros/ones/full/arange/linspace/eye/rand/randn/randint
// and the *_like forms run as kernels on the current stream (cuda/kernels/factory.cu) through the
// same fill_item() as the CPU (core/fill_values.h), so for the same seed and generator state the
// device's bytes equal the CPU's and the generator ends in the same state. That equality is
// checked here bit for bit ([gpu]); the shared function itself is tested on the CPU against the
// old CPU loops (tests/core/test_fill_values.cpp). Without a usable device the factories on cuda
// are DeviceErrors that leave the generator where it was (runs everywhere).
#include <catch2/catch.hpp>

#include <cstring>
#include <functional>
#include <vector>

#include "core/factory.h"
#include "core/generator.h"
#include "cuda/cuda.h"
#include "cuda_test_util.h"
#include "ops/dispatcher.h"
#include "test_util.h"

using namespace mg;
using mg::test::gpu;

namespace {

const DType kAll[] = {DType::F64, DType::F32, DType::F16, DType::BF16, DType::I64, DType::I32, DType::U8, DType::Bool};
const DType kFloating[] = {DType::F64, DType::F32, DType::F16, DType::BF16};

// A factory call on `device` with generator `g` (ignored by the deterministic ones).
using Make = std::function<Tensor(Device device, Generator* g)>;

struct Case {
  std::string name;
  Make make;
};

// Every factory at size n, for dtype dt.
std::vector<Case> cases(DType dt, int64_t n) {
  std::vector<Case> c = {
      {"zeros", [=](Device d, Generator*) { return zeros({n}, {.dtype = dt, .device = d}); }},
      {"ones", [=](Device d, Generator*) { return ones({n, 1}, {.dtype = dt, .device = d}); }},
      {"full", [=](Device d, Generator*) { return full({n}, 1.0 / 3.0, {.dtype = dt, .device = d}); }},
      {"arange", [=](Device d, Generator*) { return arange(3, 3 + 2 * n, 2, {.dtype = dt, .device = d}); }},
      {"linspace", [=](Device d, Generator*) { return linspace(0.5, 100.75, n, {.dtype = dt, .device = d}); }},
      // eye: 3 columns for the long case (a 2^20 x 2^19 identity would be terabytes on both devices).
      {"eye", [=](Device d, Generator*) { return eye(n, n > 4096 ? 3 : n / 2 + 1, {.dtype = dt, .device = d}); }},
      {"randint", [=](Device d, Generator* g) { return randint(-3, 250, {n}, {.dtype = dt, .device = d}, g); }},
      {"zeros_like", [=](Device d, Generator*) { return zeros_like(empty({n}, {.dtype = dt, .device = d})); }},
      {"ones_like", [=](Device d, Generator*) { return ones_like(empty({n}, {.dtype = dt, .device = d})); }},
      {"full_like", [=](Device d, Generator*) { return full_like(empty({n}, {.dtype = dt, .device = d}), -2.5); }},
  };
  // randint's range must fit the dtype.
  if (dt == DType::U8) c[6].make = [=](Device d, Generator* g) { return randint(0, 250, {n}, {.dtype = dt, .device = d}, g); };
  if (dt == DType::Bool) c[6].make = [=](Device d, Generator* g) { return randint(0, 2, {n}, {.dtype = dt, .device = d}, g); };
  if (dt == DType::U8 || dt == DType::Bool) c[9].make = [=](Device d, Generator*) { return full_like(empty({n}, {.dtype = dt, .device = d}), 2.0); };
  if (is_floating(dt)) {
    c.push_back({"rand", [=](Device d, Generator* g) { return rand({n}, {.dtype = dt, .device = d}, g); }});
    c.push_back({"randn", [=](Device d, Generator* g) { return randn({n}, {.dtype = dt, .device = d}, g); }});
  }
  return c;
}

// The bytes of a tensor (copied to the host).
std::vector<unsigned char> bytes(const Tensor& t) {
  const Tensor c = t.to(Device::cpu());
  const auto* p = static_cast<const unsigned char*>(c.data_ptr());
  return std::vector<unsigned char>(p, p + std::size_t(c.numel()) * c.element_size());
}

}  // namespace

TEST_CASE("cuda factories: every factory equals the CPU's bits and leaves the same generator state",
          "[cuda][gpu]") {
  // The backend registers its allocator and fill function in init() (ops/init.cpp), which the
  // dispatcher calls lazily; a process whose first call is a factory has dispatched nothing yet.
  init();
  for (const DType dt : kAll) {
    for (const int64_t n : {int64_t(1), int64_t(2), int64_t(3), int64_t(5), int64_t(1001), int64_t((1 << 20) + 3)}) {
      for (const uint64_t offset : {uint64_t(0), uint64_t(7), uint64_t(0xFFFFFFFFull)}) {
        for (const Case& c : cases(dt, n)) {
          INFO(c.name << " " << dtype_name(dt) << " n " << n << " offset " << offset);
          Generator gc(1234), gg(1234);
          gc.set_state(1234, offset);
          gg.set_state(1234, offset);
          const Tensor want = c.make(Device::cpu(), &gc);
          const Tensor got = c.make(gpu(), &gg);
          REQUIRE(got.device() == gpu());
          REQUIRE(got.dtype() == want.dtype());
          REQUIRE(got.shape() == want.shape());
          REQUIRE(bytes(got) == bytes(want));
          REQUIRE(gg.seed() == gc.seed());
          REQUIRE(gg.offset() == gc.offset());
        }
      }
    }
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("cuda factories: the default generator, mixed CPU and CUDA calls stay one reproducible stream",
          "[cuda][gpu]") {
  init();  // as above
  // The same program twice: once all on the CPU, once alternating devices.
  manual_seed(77);
  const Tensor a0 = randn({1001}), b0 = rand({513}, {.dtype = DType::F16}), c0 = randint(0, 10, {9}), d0 = randn({4});
  const uint64_t end0 = default_generator().offset();
  manual_seed(77);
  const Tensor a1 = randn({1001}, {.device = gpu()});
  const Tensor b1 = rand({513}, {.dtype = DType::F16});
  const Tensor c1 = randint(0, 10, {9}, {.dtype = DType::I64, .device = gpu()});
  const Tensor d1 = randn({4});
  CHECK(default_generator().offset() == end0);
  CHECK(bytes(a1) == bytes(a0));
  CHECK(bytes(b1) == bytes(b0));
  CHECK(bytes(c1) == bytes(c0));
  CHECK(bytes(d1) == bytes(d0));
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("cuda factories: no host synchronisation, the current stream, empty shapes", "[cuda][gpu]") {
  init();  // as above
  SECTION("no counted sync") {
    (void)zeros({16}, {.device = gpu()});  // the allocator's first block
    cuda::synchronize();
    const uint64_t before = cuda::sync_count();
    Generator g(5);
    std::vector<Tensor> made;
    for (const DType dt : kAll)
      for (const Case& c : cases(dt, 4099)) made.push_back(c.make(gpu(), &g));
    CHECK(cuda::sync_count() == before);
  }
  SECTION("on the current stream") {
    const cuda::Stream s = cuda::Stream::create(0);
    Generator gc(9), gg(9);
    Tensor got;
    {
      cuda::StreamGuard guard(s);
      got = randn({1 << 22}, {.device = gpu()}, &gg);
    }
    s.synchronize();
    CHECK(bytes(got) == bytes(randn({1 << 22}, {}, &gc)));
  }
  SECTION("empty shapes") {
    for (const DType dt : kFloating) {
      Generator g(3);
      const Tensor e1 = randn({0}, {.dtype = dt, .device = gpu()}, &g);
      const Tensor e2 = rand({3, 0}, {.dtype = dt, .device = gpu()}, &g);
      const Tensor e3 = randint(0, 5, {0, 2}, {.dtype = dt, .device = gpu()}, &g);
      const Tensor e4 = linspace(0, 1, 0, {.dtype = dt, .device = gpu()});
      const Tensor e5 = eye(0, 3, {.dtype = dt, .device = gpu()});
      for (const Tensor& e : {e1, e2, e3, e4, e5}) {
        CHECK(e.numel() == 0);
        CHECK(e.device() == gpu());
      }
      CHECK(g.offset() == 0);
    }
  }
  mg::test::require_no_pending_cuda_error();
}

TEST_CASE("cuda factories: without a usable device they are DeviceErrors and leave the generator alone",
          "[cuda]") {
  init();  // as above
  if (cuda::is_available()) return;  // the [gpu] cases above cover the device
  Generator g(11);
  const Device d = Device::cuda(0);
  for (const DType dt : kAll) {
    for (const Case& c : cases(dt, 5)) {
      INFO(c.name << " " << dtype_name(dt));
      REQUIRE_THROWS_AS(c.make(d, &g), DeviceError);
      REQUIRE(g.offset() == 0);
    }
  }
  const std::string why = mg::test::error_of([&] { (void)randn({2}, {.device = d}, &g); });
  REQUIRE_THAT(why, Catch::Matchers::Contains(cuda::built_with_cuda() ? "cuda:0 is not available"
                                                                      : "this build of mixgrad has no CUDA support"));
}
