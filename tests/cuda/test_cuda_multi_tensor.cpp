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
//   cuda::sync_count(), through a GradScaler and through the Apex front door (amp::scale_loss),
//   whose device path gives the same bits as the GradScaler's, overflows included;
// - the front door on CUDA decides as its CPU host path (skips, step counts, scheduler, scales;
//   weights within f16 ulps) for a dynamic scale, a static one and two losses, reads nothing in
//   the step, and says an overflow at the next read of the scaler.
// The optimizers' fused kernels are also compared with the CPU for every option set, dtype and O2
// master weights by tests/cuda/test_cuda_optim.cpp (within tests/optim/path_compare.h's
// tolerances: the same functor, but nvcc and g++ contract different a*b+c into FMAs).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"
#include "amp/initialize.h"
#include "amp/unscale.h"
#include "core/factory.h"
#include "core/multi_tensor_kernels.h"
#include "cuda/conv_settings.h"
#include "cuda_test_util.h"
#include "nn/linear.h"
#include "nn/models/resnet.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "optim/adadelta.h"
#include "optim/adagrad.h"
#include "optim/adam.h"
#include "optim/adamax.h"
#include "optim/asgd.h"
#include "optim/clip_grad.h"
#include "optim/lr_scheduler.h"
#include "optim/nadam.h"
#include "optim/radam.h"
#include "optim/rmsprop.h"
#include "optim/rprop.h"
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
  // Into f32 masters, accumulating, from f16 and bf16 model gradients; with a scale that is not a
  // power of two too, where g * (1/scale) is inexact and a fused multiply-add would differ.
  for (const double master_scale : {1024.0, 1000.0})
  for (DType dt : {DType::F16, DType::BF16}) {
    INFO(dtype_name(dt) << " to masters, scale " << master_scale);
    const Tensors src = special_grads(dt, 1.0);
    Tensors cpu_dst, dev_dst;
    for (const Tensor& g : src) cpu_dst.push_back(full(g.shape(), 0.25, {.dtype = DType::F32}));
    dev_dst = to_device(cpu_dst, gpu());
    const amp::UnscaleStats want = amp::unscale_grads_to(src, cpu_dst, 1.0 / master_scale, /*accumulate=*/true);
    const Tensor s = full({1}, master_scale, {.dtype = DType::F64, .device = gpu()});
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
  // SGD with momentum, AdamW, RMSprop centered with momentum, Adagrad with lr decay, Adamax, RAdam,
  // NAdam (decoupled), Adadelta, Rprop, ASGD (averaging from its first update)
  for (int kind = 0; kind < 10; ++kind) {
    INFO("optimizer " << kind);
    auto make = [&](const Tensors& ps) -> std::unique_ptr<optim::Optimizer> {
      switch (kind) {
        case 0: return std::make_unique<optim::SGD>(ps, optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .dampening = 0.2});
        case 1: return std::make_unique<optim::AdamW>(ps, optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.1});
        case 2: return std::make_unique<optim::RMSprop>(ps, optim::RMSpropOptions{.lr = 0.01, .momentum = 0.5, .centered = true});
        // Adagrad: a skipped step must not advance the step count its lr decay reads.
        case 3: return std::make_unique<optim::Adagrad>(ps, optim::AdagradOptions{.lr = 0.1, .lr_decay = 0.5});
        case 4: return std::make_unique<optim::Adamax>(ps, optim::AdamaxOptions{.lr = 0.01, .weight_decay = 0.1});
        case 5: return std::make_unique<optim::RAdam>(ps, optim::RAdamOptions{.lr = 0.01, .weight_decay = 0.1});
        // NAdam: nor the product of the mu's its coefficients read.
        case 6: return std::make_unique<optim::NAdam>(ps, optim::NAdamOptions{.lr = 0.01, .weight_decay = 0.1, .decoupled_weight_decay = true});
        case 7: return std::make_unique<optim::Adadelta>(ps, optim::AdadeltaOptions{.lr = 0.5, .weight_decay = 0.1});
        case 8: return std::make_unique<optim::Rprop>(ps, optim::RpropOptions{.lr = 0.05, .etas = {0.3, 1.5}});
        // ASGD: nor its eta and mu.
        default: return std::make_unique<optim::ASGD>(ps, optim::ASGDOptions{.lr = 0.05, .lambd = 0.1, .t0 = 0});
      }
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
    const uint64_t syncs = cuda::sync_count();
    dev_opt->step_unless_found_inf(down);
    CHECK(cuda::sync_count() == syncs);  // the flag stays on the device
    CHECK_FALSE(dev_opt->last_step_skipped());
    CHECK(dev_opt->state(dw)->step == 1);
    CHECK(test::rel_error(dw.detach().to(Device::cpu()), test::values(cw.detach())) <= 4 * 5.96e-8);
    // Host scalars (NAdam's mu_product) come back from the device with the step count.
    for (const auto& [name, v] : cpu_opt->state(cw)->scalars) {
      INFO(name);
      REQUIRE(dev_opt->state(dw)->scalars.count(name) == 1);
      CHECK(std::fabs(dev_opt->state(dw)->scalars.at(name) - v) <= 4e-16 * std::fabs(v));
    }
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
          "[cuda][gpu][amp][big]") {
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

namespace {
// O2 f16 ResNet-8 steps with clipping, dynamic scaling and an inf in the input at chosen steps,
// through the Apex front door (amp::scale_loss, the optimizer's step gate) or through a GradScaler
// with amp's own scaler options. Counts the host synchronisations of the timed steps (after the
// first, which creates the optimizer's and the scaler's device state).
struct Resnet8Run {
  std::vector<double> weights;
  double scale = 0;
  int64_t iterations = 0, skipped = 0;
  uint64_t syncs = 0;
};
Resnet8Run resnet8_amp_run(bool front_door, int steps, const std::vector<int>& inf_steps) {
  manual_seed(12);
  auto model = std::make_shared<nn::models::ResNet>(nn::models::ResNetConfig::cifar(8, 3, 10));
  model->to(gpu());
  optim::SGD sgd(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  amp::initialize(model, sgd, {.opt_level = "O2", .dtype = "f16", .verbosity = 0, .device = gpu()});
  amp::GradScaler twin(amp::loss_scaler().options());
  if (!front_door) sgd.set_step_gate(nullptr);  // the GradScaler decides
  manual_seed(13);
  const Tensor x = randn({16, 3, 32, 32}).to(gpu());
  Tensor x_inf = randn({16, 3, 32, 32});
  x_inf.data<float>()[5] = std::numeric_limits<float>::infinity();
  x_inf = x_inf.to(gpu());
  const Tensor y = randint(0, 10, {16}).to(gpu());
  Resnet8Run r;
  auto step = [&](int i) {
    const bool bad = std::find(inf_steps.begin(), inf_steps.end(), i) != inf_steps.end();
    sgd.zero_grad();
    const Tensor loss = cross_entropy(amp::forward(*model, bad ? x_inf : x).to(DType::F32), y);
    if (front_door) {
      amp::scale_loss(loss, sgd).backward();
      optim::clip_grad_norm_(amp::master_params(sgd), 1.0);
      sgd.step();
    } else {
      twin.scale(loss).backward();
      twin.unscale_(sgd);
      optim::clip_grad_norm_(amp::master_params(sgd), 1.0);
      twin.step(sgd);
      twin.update();
    }
  };
  step(0);
  cuda::synchronize();
  const uint64_t before = cuda::sync_count();
  for (int i = 1; i < steps; ++i) step(i);
  r.syncs = cuda::sync_count() - before;
  const amp::GradScaler& s = front_door ? amp::loss_scaler() : twin;
  r.scale = s.get_scale();
  r.iterations = s.iterations();
  r.skipped = s.skipped_iterations();
  Tensors flat;
  for (const Tensor& p : amp::master_params(sgd)) flat.push_back(reshape(p, {-1}));
  r.weights = test::values(cat(flat));
  amp::reset();
  return r;
}
}  // namespace

TEST_CASE("100 O2 ResNet-8 steps through amp::scale_loss issue no host synchronisation and equal the GradScaler's",
          "[cuda][gpu][amp][big]") {
  // Inf inputs at 3 and 4 (a backoff each) and at 60: the device decides those skips. cuDNN's
  // deterministic mode: the default heuristics may pick backward algorithms with atomics, which
  // need not repeat bit for bit between the two runs.
  const bool deterministic = cuda::cudnn_deterministic();
  cuda::set_cudnn_deterministic(true);
  struct Restore {
    bool on;
    ~Restore() { cuda::set_cudnn_deterministic(on); }
  } restore{deterministic};
  const std::vector<int> inf_steps = {3, 4, 60};
  const Resnet8Run front = resnet8_amp_run(true, 101, inf_steps);
  const Resnet8Run scaler = resnet8_amp_run(false, 101, inf_steps);
  CHECK(front.syncs == 0);
  CHECK(scaler.syncs == 0);
  CHECK(front.iterations == 101);
  CHECK(front.skipped == 3);
  CHECK(front.scale == 65536.0 / 8);
  // The same kernels in the same order: the same bits.
  CHECK(front.scale == scaler.scale);
  CHECK(front.skipped == scaler.skipped);
  CHECK(front.weights == scaler.weights);
  test::require_no_pending_cuda_error();
}

namespace {
// Iterations of the Apex front door on a Linear(8, 4) at O2 f16 with SGD and a StepLR: in iteration
// i, loss l is the output's mean times factors[i][l] (inf: an overflow). What the user can see
// after each iteration, for a CPU (host path) vs CUDA (device path) comparison.
struct FrontDoorRun {
  std::vector<std::vector<double>> weights;  // the f32 masters after each iteration
  std::vector<bool> skipped, sched_stepped;  // per iteration
  std::vector<int64_t> step_counts;          // per iteration
  std::vector<std::vector<double>> scale_history;  // every loss scaler's scale after each iteration
  std::vector<double> scales;                // per loss scaler, at the end
  std::vector<int64_t> skip_counts;          // per loss scaler, at the end
  std::string log;
};
FrontDoorRun front_door_run(Device device, const char* loss_scale, const std::vector<std::vector<double>>& factors) {
  FrontDoorRun r;
  amp::set_log_sink([&](const std::string& line) { r.log += line; });
  manual_seed(32);
  auto m = std::make_shared<nn::Linear>(nn::LinearOptions{.in = 8, .out = 4});
  m->to(device);
  optim::SGD sgd(m->parameters(), {.lr = 0.1, .momentum = 0.9});
  const int losses = int(factors.front().size());
  amp::initialize(m, sgd, {.opt_level = "O2", .dtype = "f16", .loss_scale = loss_scale, .num_losses = losses,
                           .verbosity = 1, .device = device});
  optim::StepLR sched(sgd, {.step_size = 1, .gamma = 0.9});
  manual_seed(33);
  const Tensor x = randn({6, 8}).to(device);
  for (const std::vector<double>& f : factors) {
    sgd.zero_grad();
    for (int l = 0; l < losses; ++l) {
      // mean x 0.25 and below: the f16 output and weight gradients stay finite at the 2^16 scale
      const Tensor loss = amp::forward(*m, x).to(DType::F32).mean() * f[std::size_t(l)];
      amp::scale_loss(loss, sgd, {.loss_id = l}).backward();
    }
    sgd.step();
    r.skipped.push_back(sgd.last_step_skipped());
    r.sched_stepped.push_back(sched.optimizer_stepped());
    sched.step();
    r.step_counts.push_back(sgd.step_count());
    std::vector<double> scales;  // a read of each scaler: on CUDA the overflow line comes here
    for (int l = 0; l < losses; ++l) scales.push_back(amp::loss_scale(l));
    r.scale_history.push_back(scales);
    const Tensors p = amp::master_params(sgd);
    r.weights.push_back(test::values(cat({reshape(p[0], {-1}), p[1]})));
  }
  for (int l = 0; l < losses; ++l) {
    r.scales.push_back(amp::loss_scale(l));
    r.skip_counts.push_back(amp::loss_scaler(l).skipped_iterations());
  }
  amp::reset();
  amp::set_log_sink(nullptr);
  return r;
}

void check_same_front_door(const FrontDoorRun& gpu_run, const FrontDoorRun& cpu_run) {
  CHECK(gpu_run.skipped == cpu_run.skipped);
  CHECK(gpu_run.sched_stepped == cpu_run.sched_stepped);
  CHECK(gpu_run.step_counts == cpu_run.step_counts);
  CHECK(gpu_run.scales == cpu_run.scales);
  CHECK(gpu_run.scale_history == cpu_run.scale_history);
  CHECK(gpu_run.skip_counts == cpu_run.skip_counts);
  REQUIRE(gpu_run.weights.size() == cpu_run.weights.size());
  for (std::size_t i = 0; i < cpu_run.weights.size(); ++i) {
    INFO("iteration " << i);
    REQUIRE(gpu_run.weights[i].size() == cpu_run.weights[i].size());
    for (std::size_t k = 0; k < cpu_run.weights[i].size(); ++k) {
      // f16 products summed in another order: the gradients differ by f16 ulps, the steps by lr x that
      CHECK(std::fabs(gpu_run.weights[i][k] - cpu_run.weights[i][k]) <= 1e-3 * std::max(1.0, std::fabs(cpu_run.weights[i][k])));
    }
  }
}
}  // namespace

TEST_CASE("amp::scale_loss on CUDA decides as the CPU's host path: dynamic, static and two losses", "[cuda][gpu][amp]") {
  const double inf = std::numeric_limits<double>::infinity();
  SECTION("dynamic") {
    const std::vector<std::vector<double>> f = {{0.25}, {inf}, {0.25}, {inf}, {inf}, {0.25}};
    const FrontDoorRun cpu_run = front_door_run(Device::cpu(), "dynamic", f);
    const FrontDoorRun gpu_run = front_door_run(gpu(), "dynamic", f);
    CHECK(cpu_run.skipped == std::vector<bool>{false, true, false, true, true, false});
    CHECK(cpu_run.step_counts == std::vector<int64_t>{1, 1, 2, 2, 2, 3});
    CHECK(cpu_run.scales == std::vector<double>{65536.0 / 8});
    check_same_front_door(gpu_run, cpu_run);
    // The device path's overflow line comes at the reads (here every iteration reads the scaler).
    CHECK_THAT(gpu_run.log, Catch::Matchers::Contains("amp: gradient overflow in iteration 2 of loss scaler 0 (1 skipped in all)"));
    CHECK_THAT(gpu_run.log, Catch::Matchers::Contains("loss scale now 32768"));
  }
  SECTION("static") {
    const std::vector<std::vector<double>> f = {{0.25}, {inf}, {0.25}};
    const FrontDoorRun cpu_run = front_door_run(Device::cpu(), "128", f);
    const FrontDoorRun gpu_run = front_door_run(gpu(), "128", f);
    CHECK(cpu_run.skipped == std::vector<bool>{false, true, false});
    CHECK(cpu_run.scales == std::vector<double>{128});
    check_same_front_door(gpu_run, cpu_run);
    CHECK_THAT(gpu_run.log, Catch::Matchers::Contains("static loss scale 128"));
  }
  SECTION("two losses: an overflow in one skips the step and backs off only its scaler") {
    const std::vector<std::vector<double>> f = {{0.25, 0.125}, {0.25, inf}, {0.125, 0.25}};
    const FrontDoorRun cpu_run = front_door_run(Device::cpu(), "dynamic", f);
    const FrontDoorRun gpu_run = front_door_run(gpu(), "dynamic", f);
    CHECK(cpu_run.skipped == std::vector<bool>{false, true, false});
    CHECK(cpu_run.scales == std::vector<double>{65536, 32768});
    check_same_front_door(gpu_run, cpu_run);
  }
  test::require_no_pending_cuda_error();
}

TEST_CASE("amp::scale_loss on CUDA: no host read in the step, the overflow line and the flags when read",
          "[cuda][gpu][amp]") {
  std::string log;
  amp::set_log_sink([&](const std::string& line) { log += line; });
  struct Restore {
    ~Restore() {
      amp::reset();
      amp::set_log_sink(nullptr);
    }
  } restore;
  manual_seed(32);
  auto m = std::make_shared<nn::Linear>(nn::LinearOptions{.in = 8, .out = 4});
  m->to(gpu());
  optim::SGD sgd(m->parameters(), {.lr = 0.1});
  amp::initialize(m, sgd, {.opt_level = "O2", .dtype = "f16", .verbosity = 1, .device = gpu()});
  optim::StepLR sched(sgd, {.step_size = 1, .gamma = 0.9});
  sched.step();  // the scheduler's mark before the step
  const Tensor x = randn({6, 8}).to(gpu());
  const Tensor before = clone(amp::master_params(sgd)[0]);
  cuda::synchronize();
  const uint64_t syncs = cuda::sync_count();
  const Tensor loss = amp::forward(*m, x).to(DType::F32).mean() * std::numeric_limits<double>::infinity();
  amp::ScaledLoss scaled = amp::scale_loss(loss, sgd);
  scaled.backward();
  sgd.step();
  const optim::Optimizer::StepMark mark = sgd.step_mark();  // what a scheduler's step() takes
  CHECK(cuda::sync_count() == syncs);
  CHECK_THAT(log, !Catch::Matchers::Contains("gradient overflow"));  // nothing was read yet
  CHECK(scaled.overflow());
  CHECK(sgd.last_step_skipped());
  CHECK(sgd.step_count() == 0);  // the device skipped it: not counted
  CHECK(!sched.optimizer_stepped());
  CHECK(!sgd.stepped_since(mark));
  CHECK(cuda::sync_count() > syncs);
  CHECK(test::values(amp::master_params(sgd)[0]) == test::values(before));
  CHECK(amp::loss_scale() == 32768.0);
  CHECK_THAT(log, Catch::Matchers::Contains("amp: gradient overflow in iteration 1 of loss scaler 0 (1 skipped in all)"));
  test::require_no_pending_cuda_error();
}
