// Autocast regions per device type, as in PyTorch: a region casts only the ops that run on its
// device type, the default dtype is bf16 on the CPU and f16 on CUDA, CPU and CUDA regions nest
// independently, AutocastOffGuard turns both off, and amp::initialize's O1 autocast follows its
// device. The CUDA half runs where a device is present ([gpu]).
#include <catch2/catch.hpp>

#include "amp/autocast.h"
#include "amp/initialize.h"
#include "core/autocast_state.h"
#include "core/factory.h"
#include "cuda/cuda.h"
#include "nn/linear.h"
#include "optim/sgd.h"
#include "ops/ops.h"
#include "test_util.h"

using namespace mg;

TEST_CASE("the default autocast dtype is bf16 on the CPU and f16 on CUDA", "[amp][autocast]") {
  REQUIRE(amp::default_autocast_dtype(DeviceType::CPU) == DType::BF16);
  REQUIRE(amp::default_autocast_dtype(DeviceType::CUDA) == DType::F16);
  // Outside any region too, as PyTorch's get_autocast_dtype.
  CHECK(amp::autocast_dtype(DeviceType::CPU) == DType::BF16);
  CHECK(amp::autocast_dtype(DeviceType::CUDA) == DType::F16);
  const Tensor a = ones({2, 2}), b = ones({2, 2});
  amp::Autocast cpu_region;
  CHECK(amp::autocast_dtype(DeviceType::CPU) == DType::BF16);
  CHECK(matmul(a, b).dtype() == DType::BF16);
}

TEST_CASE("a CUDA region leaves CPU ops alone, and the two nest independently", "[amp][autocast]") {
  const Tensor a = ones({2, 2}), b = ones({2, 2});
  {
    amp::Autocast gpu_region({.device = DeviceType::CUDA});
    CHECK(amp::is_autocast_enabled(DeviceType::CUDA));
    CHECK(amp::autocast_dtype(DeviceType::CUDA) == DType::F16);
    CHECK_FALSE(amp::is_autocast_enabled(DeviceType::CPU));
    CHECK(matmul(a, b).dtype() == DType::F32);  // a CPU op: not cast
    {
      amp::Autocast cpu_region({.dtype = DType::F16});
      CHECK(matmul(a, b).dtype() == DType::F16);
      CHECK(autocast_state(DeviceType::CPU).depth == 1);
      CHECK(autocast_state(DeviceType::CUDA).depth == 1);
      {
        AutocastOffGuard off;
        CHECK_FALSE(amp::is_autocast_enabled(DeviceType::CPU));
        CHECK_FALSE(amp::is_autocast_enabled(DeviceType::CUDA));
        CHECK(matmul(a, b).dtype() == DType::F32);
      }
      CHECK(amp::is_autocast_enabled(DeviceType::CUDA));
    }
    CHECK_FALSE(amp::is_autocast_enabled(DeviceType::CPU));
    CHECK(amp::is_autocast_enabled(DeviceType::CUDA));
  }
  CHECK_FALSE(amp::is_autocast_enabled(DeviceType::CUDA));
  CHECK(autocast_state(DeviceType::CUDA).depth == 0);
}

TEST_CASE("the weight cast cache lives until the last region of any device ends", "[amp][autocast]") {
  const Tensor w = ones({3, 3}).requires_grad_();
  const Tensor x = ones({2, 3});
  {
    amp::Autocast cpu_region;
    {
      amp::Autocast gpu_region({.device = DeviceType::CUDA});
      (void)matmul(x, w);
      CHECK(amp::weight_cache_size() == 1);
    }
    CHECK(amp::weight_cache_size() == 1);  // the CPU region is still open
  }
  CHECK(amp::weight_cache_size() == 0);
}

TEST_CASE("amp::initialize on a CUDA device without one is a clear DeviceError", "[amp][autocast]") {
  if (cuda::is_available()) return;  // the [gpu] case below covers a real device
  auto model = std::make_shared<nn::Linear>(nn::LinearOptions{.in = 4, .out = 2});
  optim::SGD sgd(model->parameters(), {.lr = 0.1});
  MG_REQUIRE_ERROR(amp::initialize(model, sgd, {.opt_level = "O1", .verbosity = 0, .device = Device::cuda(0)}),
                   "cuda:0 is not available");
  REQUIRE_FALSE(amp::is_initialized());
}

TEST_CASE("O1 on a CUDA device turns on the CUDA region only", "[amp][autocast][gpu]") {
  auto model = std::make_shared<nn::Linear>(nn::LinearOptions{.in = 4, .out = 2});
  optim::SGD sgd(model->parameters(), {.lr = 0.1});
  amp::initialize(model, sgd, {.opt_level = "O1", .verbosity = 0, .device = Device::cuda(0)});
  CHECK(amp::is_autocast_enabled(DeviceType::CUDA));
  CHECK_FALSE(amp::is_autocast_enabled(DeviceType::CPU));
  // exp is an fp32-policy op: an f16 CUDA input comes out f32; the same op on the CPU keeps f16.
  const Tensor h = ones({4}, {.dtype = DType::F16});
  CHECK(exp(h.to(Device::cuda(0))).dtype() == DType::F32);
  CHECK(exp(h).dtype() == DType::F16);
  amp::reset();
  CHECK_FALSE(amp::is_autocast_enabled(DeviceType::CUDA));
}
