// The fused multi-tensor kernels on CUDA (cuda/kernels/multi_tensor.cu, core/multi_tensor_kernels.h)
// against the CPU ([gpu]; each case skips without a device):
// - unscale (in place and into f32 masters, accumulating): values bit for bit equal to the CPU pass
//   (one multiply by the same float(1/scale), nothing to contract) and the statistics exactly;
// - a step the device found-inf flag skips changes nothing (weights, state, step counts) and
//   last_step_skipped() says so when asked; the next clean step matches the CPU's first step;
// - the L2 norm repeats bit for bit and is within a few f32 ulps of the CPU's (another
//   summation tree);
// - GradScaler on CUDA keeps its state on the device and follows the CPU scaler's transitions
//   exactly (the shared fn::loss_scale_update), the floor error surfacing at the lazy read;
// - the proof: 100 O2 ResNet-8 steps with dynamic scaling and clipping add nothing to
//   cuda::sync_count().
// The optimizers' fused kernels are also compared with the CPU for every option set, dtype and O2
// master weights by tests/cuda/test_cuda_optim.cpp (within tests/optim/path_compare.h's
// tolerances: the same functor, but nvcc and g++ contract different a*b+c into FMAs).
#include <catch2/catch.hpp>

#include <cmath>
#include <limits>
#include <vector>

#include "amp/grad_scaler.h"
#include "amp/initialize.h"
#include "amp/unscale.h"
#include "core/factory.h"
#include "core/multi_tensor_kernels.h"
#include "cuda_test_util.h"
#include "nn/models/resnet.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "optim/adam.h"
#include "optim/clip_grad.h"
#include "optim/optim_test_util.h"
#include "optim/sgd.h"

using namespace mg;
using test::gpu;

namespace {

const MultiTensorKernels& kernels() {
  const MultiTensorKernels* k = multi_tensor_kernels(DeviceType::CUDA);
  REQUIRE(k != nullptr);
  return *k;
}

// Gradients of `dtype` with zeros, values below the smallest normal, an inf and a NaN, over a
// multi-chunk tensor and small ones; scaled by `scale` so that unscaling brings them back.
Tensors special_grads(DType dtype, double scale) {
  Generator gen(77);
  Tensors out;
  for (int64_t n : {int64_t(1), int64_t(1000), int64_t(65536 * 2 + 11), int64_t(3)}) {
    std::vector<double> v = test::values(randn({n}, {.dtype = DType::F64}, &gen));
    for (double& x : v) x *= scale;
    if (n >= 1000) {
      v[0] = 0.0;
      v[1] = -0.0;
      v[2] = 1e-39;  // subnormal in f32 and bf16
      v[3] = 3e-6;   // subnormal in f16
      v[n - 1] = 0.0;
    }
    out.push_back(to(from_vector<double>(v, {n}), dtype));
  }
  Tensor last = out[2];
  std::vector<double> v = test::values(last);
  v[70000] = std::numeric_limits<double>::infinity();
  v[70001] = std::numeric_limits<double>::quiet_NaN();
  out[2] = to(from_vector<double>(v, {int64_t(v.size())}), dtype);
  return out;
}

Tensors to_device(const Tensors& ts, Device d) {
  Tensors out;
  for (const Tensor& t : ts) out.push_back(clone(t.to(d)));
  return out;
}

std::vector<int64_t> host_counts(const Tensor& c) {
  const Tensor h = contiguous(c.to(Device::cpu()));
  return {h.data<int64_t>()[0], h.data<int64_t>()[1], h.data<int64_t>()[2]};
}

}  // namespace

TEST_CASE("fused CUDA unscale equals the CPU pass bit for bit (NaN payloads aside) with the same statistics", "[cuda][gpu][amp]") {
  const double scale = 1024.0;
  for (DType dt : {DType::F32, DType::F16, DType::BF16, DType::F64}) {
    INFO(dtype_name(dt));
    const Tensors cpu = to_device(special_grads(dt, dt == DType::F16 ? 1.0 : scale), Device::cpu());
    const Tensors dev = to_device(cpu, gpu());
    const amp::UnscaleStats want = amp::unscale_grads(cpu, 1.0 / scale);
    const Tensor s = full({1}, scale, {.dtype = DType::F64, .device = gpu()});
    const Tensor found = zeros({1}, {.dtype = DType::F32, .device = gpu()});
    const Tensor counts = zeros({3}, {.dtype = DType::I64, .device = gpu()});
    kernels().unscale({.src = dev, .scale = s.data<double>(), .found_inf = found.data<float>(), .counts = counts.data<int64_t>()});
    for (std::size_t i = 0; i < cpu.size(); ++i) CHECK(test::bits_equal_any_nan(dev[i].to(Device::cpu()), cpu[i]));
    CHECK(host_counts(counts) == std::vector<int64_t>{want.zeros, want.underflowed, want.nonfinite});
    CHECK(found.to(Device::cpu()).item<float>() == 1.0f);
  }
  // Into f32 masters, accumulating, from f16 and bf16 model gradients.
  for (DType dt : {DType::F16, DType::BF16}) {
    INFO(dtype_name(dt) << " to masters");
    const Tensors src = special_grads(dt, 1.0);
    Tensors cpu_dst, dev_dst;
    for (const Tensor& g : src) cpu_dst.push_back(full(g.shape(), 0.25, {.dtype = DType::F32}));
    dev_dst = to_device(cpu_dst, gpu());
    const amp::UnscaleStats want = amp::unscale_grads_to(src, cpu_dst, 1.0 / scale, /*accumulate=*/true);
    const Tensor s = full({1}, scale, {.dtype = DType::F64, .device = gpu()});
    const Tensor found = zeros({1}, {.dtype = DType::F32, .device = gpu()});
    const Tensor counts = zeros({3}, {.dtype = DType::I64, .device = gpu()});
    kernels().unscale({.src = to_device(src, gpu()), .dst = dev_dst, .accumulate = true, .scale = s.data<double>(),
                       .found_inf = found.data<float>(), .counts = counts.data<int64_t>()});
    for (std::size_t i = 0; i < src.size(); ++i) CHECK(test::bits_equal_any_nan(dev_dst[i].to(Device::cpu()), cpu_dst[i]));
    CHECK(host_counts(counts) == std::vector<int64_t>{want.zeros, want.underflowed, want.nonfinite});
  }
  // Clean gradients leave the flag down.
  const Tensors clean = to_device({full({5000}, 2048.0, {.dtype = DType::F16})}, gpu());
  const Tensor s = full({1}, scale, {.dtype = DType::F64, .device = gpu()});
  const Tensor found = zeros({1}, {.dtype = DType::F32, .device = gpu()});
  kernels().unscale({.src = clean, .scale = s.data<double>(), .found_inf = found.data<float>()});
  CHECK(found.to(Device::cpu()).item<float>() == 0.0f);
  CHECK(test::values(clean[0])[4999] == 2.0);
  test::require_no_pending_cuda_error();
}

TEST_CASE("a step the device found-inf flag skips changes nothing, and the next one is the CPU's first",
          "[cuda][gpu][optim]") {
  for (int kind : {0, 1}) {  // SGD with momentum, AdamW
    INFO((kind == 0 ? "SGD" : "AdamW"));
    auto make = [&](const Tensors& ps) -> std::unique_ptr<optim::Optimizer> {
      if (kind == 0) return std::make_unique<optim::SGD>(ps, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.2});
      return std::make_unique<optim::AdamW>(ps, optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.1});
    };
    manual_seed(3);
    const Tensor w0 = randn({70000});
    const Tensor g0 = randn({70000});
    Tensor cw = clone(w0).requires_grad_();
    cw.set_grad(clone(g0));
    auto cpu_opt = make({cw});
    cpu_opt->step();

    Tensor dw = w0.to(gpu()).requires_grad_();
    dw.set_grad(g0.to(gpu()));
    auto dev_opt = make({dw});
    const Tensor raised = full({1}, 1.0, {.dtype = DType::F32, .device = gpu()});
    dev_opt->step_unless_found_inf(raised);
    CHECK(dev_opt->last_step_skipped());
    CHECK(test::bits_equal(dw.detach().to(Device::cpu()), w0));
    CHECK(dev_opt->state(dw)->step == 0);
    const Tensor down = zeros({1}, {.dtype = DType::F32, .device = gpu()});
    dev_opt->step_unless_found_inf(down);
    CHECK_FALSE(dev_opt->last_step_skipped());
    CHECK(dev_opt->state(dw)->step == 1);
    CHECK(test::rel_error(dw.detach().to(Device::cpu()), test::values(cw.detach())) <= 4 * 5.96e-8);
  }
  test::require_no_pending_cuda_error();
}

TEST_CASE("the fused CUDA L2 norm repeats bit for bit and matches the CPU's within f32 ulps", "[cuda][gpu][optim]") {
  Generator gen(9);
  Tensors cpu;
  for (int64_t n : {int64_t(100), int64_t(65536 * 3 + 5), int64_t(7)}) cpu.push_back(randn({n}, {}, &gen));
  cpu.push_back(to(randn({4000}, {}, &gen), DType::BF16));
  const Tensors dev = to_device(cpu, gpu());
  const Tensor a = empty({1}, {.dtype = DType::F32, .device = gpu()});
  const Tensor b = empty({1}, {.dtype = DType::F32, .device = gpu()});
  kernels().l2_norm(dev, a);
  kernels().l2_norm(dev, b);
  const float fa = a.to(Device::cpu()).item<float>(), fb = b.to(Device::cpu()).item<float>();
  CHECK(std::memcmp(&fa, &fb, sizeof(float)) == 0);
  double want = 0.0;
  for (const Tensor& t : cpu) {
    for (double v : test::values(t)) want += v * v;
  }
  CHECK(std::fabs(fa - std::sqrt(want)) <= 8 * 5.96e-8 * std::sqrt(want));
  // clip_grad_norm_ on CUDA takes it and returns the same total as the CPU within ulps.
  Tensors cps, dps;
  for (std::size_t i = 0; i < cpu.size(); ++i) {
    cps.push_back(zeros_like(cpu[i]).requires_grad_());
    cps.back().set_grad(clone(cpu[i]));
    dps.push_back(zeros_like(dev[i]).requires_grad_());
    dps.back().set_grad(clone(dev[i]));
  }
  const double cn = optim::clip_grad_norm_(cps, 1.0).item<double>();
  const double dn = optim::clip_grad_norm_(dps, 1.0).item<double>();
  CHECK(std::fabs(cn - dn) <= 8 * 5.96e-8 * cn);
  test::require_no_pending_cuda_error();
}

TEST_CASE("GradScaler on CUDA follows the CPU scaler's transitions exactly with its state on the device",
          "[cuda][gpu][amp][scaler]") {
  const amp::GradScalerOptions o{.init_scale = 64, .growth_interval = 2, .min_scale = 8, .max_scale = 256, .hysteresis = 2};
  //            iteration:   1  2  3  4  5  6  7  8  9 10 11 12
  const std::vector<int> bad{0, 0, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1};
  auto run = [&](Device device, std::vector<double>* scales, std::vector<int64_t>* skipped) {
    amp::GradScaler scaler(o);
    Tensor w = zeros({8}, {.device = device}).requires_grad_();
    optim::SGD sgd({w}, {.lr = 0.1});
    for (int b : bad) {
      std::vector<float> g(8, 64.0f);
      if (b) g[3] = INFINITY;
      w.set_grad(from_vector<float>(g, {8}).to(device));
      scaler.step(sgd);
      scaler.update();
      scales->push_back(scaler.get_scale());  // a read per iteration (the test asks every time)
      skipped->push_back(scaler.skipped_iterations());
    }
    CHECK(scaler.on_device() == device.is_cuda());
    return test::values(w.detach());
  };
  std::vector<double> cs, ds;
  std::vector<int64_t> ck, dk;
  const std::vector<double> cw = run(Device::cpu(), &cs, &ck);
  const std::vector<double> dw = run(gpu(), &ds, &dk);
  CHECK(ds == cs);
  CHECK(dk == ck);
  CHECK(dw == cw);
  // The floor: inf/NaN with the scale at min_scale surfaces at the next read.
  amp::GradScaler scaler({.init_scale = 8, .min_scale = 8});
  Tensor w = zeros({2}, {.device = gpu()}).requires_grad_();
  optim::SGD sgd({w}, {.lr = 0.1});
  w.set_grad(from_vector<float>({INFINITY, 1.0f}, {2}).to(gpu()));
  scaler.step(sgd);
  scaler.update();  // no host read, no error yet
  MG_REQUIRE_ERROR(scaler.get_scale(), "GradScaler: gradients are inf/NaN with the scale already at its floor");
  test::require_no_pending_cuda_error();
}

TEST_CASE("100 O2 ResNet-8 steps with dynamic scaling and clipping issue no host synchronisation on CUDA",
          "[cuda][gpu][amp]") {
  manual_seed(12);
  auto model = std::make_shared<nn::models::ResNet>(nn::models::ResNetConfig::cifar(8, 3, 10));
  model->to(gpu());
  optim::SGD sgd(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  amp::initialize(model, sgd, {.opt_level = "O2", .dtype = "f16", .verbosity = 0, .device = gpu()});
  amp::GradScaler scaler({.growth_interval = 10});  // grows and overflows back within the run
  const Tensor x = randn({16, 3, 32, 32}).to(gpu());
  const Tensor y = randint(0, 10, {16}).to(gpu());
  Tensor loss;
  auto step = [&] {
    sgd.zero_grad();
    loss = cross_entropy(amp::forward(*model, x).to(DType::F32), y);
    scaler.scale(loss).backward();
    scaler.unscale_(sgd);
    optim::clip_grad_norm_(amp::master_params(sgd), 1.0);
    scaler.step(sgd);
    scaler.update();
  };
  step();  // the first step creates the optimizer's state and the scaler's device state
  cuda::synchronize();
  const uint64_t before = cuda::sync_count();
  for (int i = 0; i < 100; ++i) step();
  const uint64_t after = cuda::sync_count();
  CHECK(after == before);
  // The lazy reads: the counters are right and reading them is what synchronises.
  CHECK(scaler.iterations() == 101);
  CHECK(cuda::sync_count() > after);
  CHECK(std::isfinite(loss.item<double>()));
  INFO("scale " << scaler.get_scale() << ", skipped " << scaler.skipped_iterations());
  CHECK(scaler.skipped_iterations() < 20);
  amp::reset();
  test::require_no_pending_cuda_error();
}
