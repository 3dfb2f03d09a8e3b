// Training on CUDA tensors vs the CPU (the reference): every optimizer and option set of
// tests/optim/path_compare.h for five seeded steps on the GPU (the generic path) against the
// fused CPU path, O2 master weights, clip_grad_norm_ (norm, clipped gradients, inf/NaN left
// unchanged with no host read), unscale (statistics exactly equal, values bitwise equal, one
// counted synchronisation per generic unscale_grads call; none for a GradScaler's fused unscale_ and
// step), a GradScaler step skipped on inf, and the mixed-device error.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"
#include "amp/unscale.h"
#include "core/factory.h"
#include "core/generator.h"
#include "cuda_test_util.h"
#include "optim/muon.h"
#include "optim/path_compare.h"
#include "test_util.h"
#include "optim/sgd.h"
#include "nn/linear.h"

using namespace mg;
using test::bits_equal;
using test::gpu;

namespace {

const DType kAllFloats[] = {DType::F64, DType::F32, DType::F16, DType::BF16};

Tensor seeded(int64_t n, DType dtype, uint64_t seed, double mag = 1.0) {
  Generator gen(seed);
  return to(randn({n}, {.dtype = DType::F64}, &gen) * mag, dtype);
}

// Fresh parameters on `device` whose .grad are copies of `grads` (moved to `device`).
Tensors params_with_grads(const Tensors& grads, Device device) {
  Tensors ps;
  for (const Tensor& g : grads) {
    Tensor p = zeros(g.shape(), {.dtype = g.dtype(), .device = device}).requires_grad_();
    p.set_grad(clone(to(g, device)));
    ps.push_back(p);
  }
  return ps;
}

}  // namespace

TEST_CASE("CUDA optimizers match the fused CPU path for every optimizer and option set", "[cuda][gpu][optim]") {
  for (const test::OptimCase& c : test::optim_cases()) {
    for (DType dt : kAllFloats) {
      const auto cpu = test::run_optim_case(c, dt, Device::cpu(), /*generic=*/false, 5);
      const auto cuda = test::run_optim_case(c, dt, gpu(), /*generic=*/false, 5);
      test::compare_runs(cuda, cpu, dt, c.name + " cuda " + dtype_name(dt));
    }
  }
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA O2 master weights match the CPU", "[cuda][gpu][optim][amp]") {
  for (DType dt : {DType::F16, DType::BF16}) {
    for (std::size_t k : {1u, 3u, 7u, 9u, 16u, 19u, 20u, 21u, 22u, 23u, 31u}) {  // as tests/optim/test_generic_path.cpp
      const test::OptimCase c = test::optim_cases()[k];
      const auto cpu = test::run_optim_case(c, dt, Device::cpu(), false, 4, /*masters=*/true);
      const auto cuda = test::run_optim_case(c, dt, gpu(), false, 4, /*masters=*/true);
      test::compare_runs(cuda, cpu, DType::F32, c.name + " cuda masters " + dtype_name(dt));
    }
  }
  test::require_no_pending_cuda_error();
}

TEST_CASE("a model moved to CUDA after its masters were made is a named error, not a host write into the device",
          "[cuda][gpu][optim][amp]") {
  // Module::to keeps the parameters (their storage swapped): the masters stayed on the CPU and the
  // fused copy wrote the model's device memory on the host.
  auto net = nn::make<nn::Linear>({.in = 4, .out = 2});
  net->to(DType::BF16);
  optim::SGD opt(net->parameters(), {.lr = 0.1});
  opt.use_master_weights();
  net->to(gpu());
  (*net)(ones({3, 4}, {.dtype = DType::BF16, .device = gpu()})).to(DType::F32).sum().backward();
  MG_REQUIRE_ERROR(opt.step(), "is on another device than its f32 master");
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA optimizer steps make no counted synchronisation", "[cuda][gpu][optim]") {
  Tensor w = randn({1000}, {.device = gpu()}).requires_grad_();
  optim::LAMB opt({w}, {.lr = 1e-2});
  w.set_grad(randn({1000}, {.device = gpu()}));
  opt.step();  // first step: state allocation
  const uint64_t before = cuda::sync_count();
  opt.step();
  CHECK(cuda::sync_count() == before);
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA Muon matches the CPU with the Newton-Schulz iteration in f32 and in bf16", "[cuda][gpu][optim]") {
  // Public ops on the device: the iteration's GEMMs run on cuBLASLt.
  for (const bool ns_bf16 : {false, true}) {
    Generator gen(44);
    Tensors cpu, dev;
    for (const Shape& s : std::vector<Shape>{{40, 24}, {24, 40}}) {
      const Tensor w = randn(s, {}, &gen);
      cpu.push_back(clone(w).requires_grad_());
      dev.push_back(w.to(gpu()).requires_grad_());
    }
    optim::Muon oc(cpu, {.lr = 0.02, .ns_bf16 = ns_bf16}), od(dev, {.lr = 0.02, .ns_bf16 = ns_bf16});
    for (int s = 0; s < 4; ++s) {
      for (std::size_t k = 0; k < cpu.size(); ++k) {
        const Tensor g = randn(cpu[k].shape(), {}, &gen);
        cpu[k].set_grad(clone(g));
        dev[k].set_grad(g.to(gpu()));
      }
      oc.step();
      const uint64_t syncs = cuda::sync_count();
      od.step();
      CHECK(cuda::sync_count() == syncs);
    }
    for (std::size_t k = 0; k < cpu.size(); ++k) {
      INFO((ns_bf16 ? "bf16" : "f32") << " iteration, parameter " << k);
      // f32: the GEMMs' summation orders differ; bf16: a rounding of X may land on a neighbour.
      CHECK(test::path_rel_error(dev[k].detach().to(Device::cpu()), cpu[k].detach()) <= (ns_bf16 ? 2e-3 : 1e-5));
    }
  }
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA Muon with AdamW groups at O2: step_unless_found_inf reads nothing on the host, a flagged step "
          "changes no bit, the others match the CPU",
          "[cuda][gpu][optim]") {
  // The fused device path: Muon groups on public ops with device scalars and a device skip flag,
  // the AdamW group on the AdamW kernel; bf16 models behind f32 masters written in the same step.
  Generator gen(45);
  const std::vector<Shape> shapes = {{40, 24}, {24, 40}, {24}, {10, 24}};
  Tensors cpu, dev;
  for (const Shape& s : shapes) {
    const Tensor w = to(randn(s, {}, &gen) * 0.5, DType::BF16);
    cpu.push_back(clone(w).requires_grad_());
    dev.push_back(w.to(gpu()).requires_grad_());
  }
  auto make = [](const Tensors& p) {
    return std::make_unique<optim::Muon>(
        std::vector<optim::ParamGroupSpec>{{.params = {p[0], p[1]}},
                                           {.params = {p[2], p[3]}, .options = {{"use_muon", 0}, {"weight_decay", 0.0}}}},
        optim::MuonOptions{.lr = 0.02, .weight_decay = 0.05});
  };
  const auto oc = make(cpu), od = make(dev);
  oc->use_master_weights();
  od->use_master_weights();
  const Tensor no_inf = zeros({1}, {.device = gpu()}), inf = full({1}, 1.0, {.device = gpu()});
  for (int s = 0; s < 5; ++s) {
    const bool flagged = s == 2;
    for (std::size_t k = 0; k < cpu.size(); ++k) {
      Tensor g = randn(cpu[k].shape(), {}, &gen);
      if (flagged) g = full(cpu[k].shape(), NAN);
      cpu[k].set_grad(to(g, DType::BF16));
      dev[k].set_grad(to(g, DType::BF16).to(gpu()));
    }
    Tensors before;
    for (const Tensor& t : dev) before.push_back(clone(t.detach()));
    for (const Tensor& m : od->parameters()) before.push_back(clone(m.detach()));
    for (const Tensor& m : od->parameters()) {
      if (const optim::ParamState* st = od->state(m)) {
        for (const auto& [name, b] : st->buffers) before.push_back(clone(b));
      }
    }
    if (!flagged) oc->step();
    const uint64_t syncs = cuda::sync_count();
    od->step_unless_found_inf(flagged ? inf : no_inf);
    CHECK(cuda::sync_count() == syncs);
    if (flagged) {
      CHECK(od->last_step_skipped());
      Tensors after;
      for (const Tensor& t : dev) after.push_back(t.detach());
      for (const Tensor& m : od->parameters()) after.push_back(m.detach());
      for (const Tensor& m : od->parameters()) {
        if (const optim::ParamState* st = od->state(m)) {
          for (const auto& [name, b] : st->buffers) after.push_back(b);
        }
      }
      REQUIRE(after.size() == before.size());
      for (std::size_t i = 0; i < after.size(); ++i) CHECK(bits_equal(after[i].to(Device::cpu()), before[i].to(Device::cpu())));
    }
  }
  CHECK(od->step_count() == 4);
  for (std::size_t k = 0; k < cpu.size(); ++k) {
    INFO("parameter " << k);
    // The bf16 iteration's roundings may land on neighbours; the AdamW group is the same kernel math.
    CHECK(test::path_rel_error(od->parameters()[k].detach().to(Device::cpu()), oc->parameters()[k].detach()) <=
          (k < 2 ? 2e-3 : 1e-6));
    CHECK(bits_equal(dev[k].detach().to(Device::cpu()), to(od->parameters()[k].detach().to(Device::cpu()), DType::BF16)));
  }
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA clip_grad_norm_ matches the CPU and leaves inf/NaN gradients unchanged", "[cuda][gpu][clip]") {
  for (double nt : {2.0, 1.0, 3.0, double(INFINITY)}) {
    for (double mn : {0.0, 0.5, 1e6}) {
      INFO("norm_type " << nt << ", max_norm " << mn);
      const Tensors grads = {seeded(optim::kChunkSize + 5, DType::F32, 1), seeded(37, DType::F16, 2),
                             seeded(19, DType::BF16, 3)};
      const Tensors pc = params_with_grads(grads, Device::cpu()), pg = params_with_grads(grads, gpu());
      const Tensor nc = optim::clip_grad_norm_(pc, mn, nt);
      const uint64_t before = cuda::sync_count();
      const Tensor ng = optim::clip_grad_norm_(pg, mn, nt);
      CHECK(cuda::sync_count() == before);  // the factor stays on the device
      CHECK(ng.device() == gpu());
      CHECK(std::fabs(ng.item<double>() - nc.item<double>()) <= 16 * 5.96e-8 * nc.item<double>());
      for (std::size_t k = 0; k < grads.size(); ++k) {
        CHECK(test::path_rel_error(pg[k].grad(), pc[k].grad()) <= test::path_rtol(grads[k].dtype()));
      }
    }
  }
  const Tensor bad = cat({seeded(50, DType::F16, 4), to(from_vector(std::vector<double>{double(NAN)}), DType::F16)});
  const Tensors pg = params_with_grads({bad}, gpu());
  CHECK(std::isnan(optim::clip_grad_norm_(pg, 1.0).item<double>()));
  CHECK(bits_equal(to(pg[0].grad(), Device::cpu()), bad));
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA unscale: the CPU's statistics exactly, bitwise-equal values, one synchronisation",
          "[cuda][gpu][unscale]") {
  for (int special = 0; special < 3; ++special) {
    Tensors grads;
    for (DType dt : kAllFloats) {
      Tensor g = cat({seeded(5000, dt, 10 + int(dt), 1e3), to(from_vector(std::vector<double>{0.0, 1e-6, 3e-5, 1e-39}), dt)});
      if (special == 1) g = cat({g, to(from_vector(std::vector<double>{INFINITY}), dt)});
      if (special == 2) g = cat({g, to(from_vector(std::vector<double>{double(NAN)}), dt)});
      grads.push_back(g);
    }
    Tensors gc, gg;
    for (const Tensor& g : grads) {
      gc.push_back(clone(g));
      gg.push_back(to(g, gpu()));
    }
    const amp::UnscaleStats sc = amp::unscale_grads(gc, 1.0 / 3000);
    const uint64_t before = cuda::sync_count();
    const amp::UnscaleStats sg = amp::unscale_grads(gg, 1.0 / 3000);
    CHECK(cuda::sync_count() == before + 1);  // part 1's cost: the counts come to the host once
    CHECK(sg.values == sc.values);
    CHECK(sg.zeros == sc.zeros);
    CHECK(sg.underflowed == sc.underflowed);
    CHECK(sg.nonfinite == sc.nonfinite);
    for (std::size_t k = 0; k < grads.size(); ++k) CHECK(test::bits_equal_any_nan(to(gg[k], Device::cpu()), gc[k]));
  }
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA GradScaler skips an inf step without touching parameters or state", "[cuda][gpu][amp]") {
  Tensor w = to(from_vector(std::vector<float>{1.0f, -2.0f, 3.0f}), gpu()).requires_grad_();
  optim::SGD opt({w}, {.lr = 0.1, .momentum = 0.9});
  amp::GradScaler scaler({.init_scale = 1024.0});
  w.set_grad(to(from_vector(std::vector<float>{1024.0f, 2048.0f, -512.0f}), gpu()));
  REQUIRE(scaler.step(opt));
  scaler.update();
  const Tensor w_before = to(w.detach(), Device::cpu());
  const Tensor buf_before = to(opt.state(w)->buffers.at("momentum_buffer"), Device::cpu());
  w.set_grad(to(from_vector(std::vector<float>{1.0f, INFINITY, 2.0f}), gpu()));
  scaler.step(opt);  // issued: the fused kernel reads the device found-inf flag and does nothing
  CHECK(opt.last_step_skipped());
  scaler.update();
  CHECK(scaler.get_scale() == 512.0);
  CHECK(bits_equal(to(w.detach(), Device::cpu()), w_before));
  CHECK(bits_equal(to(opt.state(w)->buffers.at("momentum_buffer"), Device::cpu()), buf_before));
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA SGD: momentum switched on after steps starts its buffer as the gradient, as on the CPU",
          "[cuda][gpu][optim]") {
  // The fused kernel took "first step" from the device step count alone, so a buffer created at
  // step 2 (momentum raised from 0, or a state loaded without buffers) was read uninitialised.
  const std::vector<float> w0 = {1.0f, -2.0f, 3.0f, 0.5f};
  const std::vector<std::vector<float>> grads = {{0.5f, 1.0f, -1.0f, 2.0f}, {1.5f, -0.5f, 0.25f, 1.0f},
                                                 {-1.0f, 2.0f, 0.5f, -0.75f}, {0.125f, 0.5f, -2.0f, 1.0f}};
  Tensor wc = from_vector(w0).requires_grad_();
  Tensor wg = to(from_vector(w0), gpu()).requires_grad_();
  optim::SGD oc({wc}, {.lr = 0.1, .momentum = 0.0, .dampening = 0.25});
  optim::SGD og({wg}, {.lr = 0.1, .momentum = 0.0, .dampening = 0.25});
  for (std::size_t i = 0; i < grads.size(); ++i) {
    if (i == 2) {  // momentum on from the third step
      oc.param_groups()[0].options["momentum"] = 0.9;
      og.param_groups()[0].options["momentum"] = 0.9;
    }
    wc.set_grad(from_vector(grads[i]));
    wg.set_grad(to(from_vector(grads[i]), gpu()));
    oc.step();
    og.step();
    INFO("step " << i);
    CHECK(test::path_rel_error(wg.detach(), wc.detach()) <= 1e-6);
  }
  CHECK(test::path_rel_error(og.state(wg)->buffers.at("momentum_buffer"), oc.state(wc)->buffers.at("momentum_buffer")) <= 1e-6);
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA SGD: a state saved while every step was skipped starts momentum as the gradient after loading",
          "[cuda][gpu][optim]") {
  // The fused step makes the (zero) momentum buffer even on a step its found-inf flag skips; saved
  // as is, a loaded state would take it for a started buffer and the first real update would use
  // (1 - dampening) g instead of g. state_dict leaves such a buffer out, so both devices (and a
  // CPU-made state, which has no buffer then) continue alike.
  const std::vector<float> w0 = {1.0f, -2.0f, 3.0f, 0.5f}, g = {0.5f, 1.0f, -1.0f, 2.0f};
  for (const Device dev : {Device::cpu(), gpu()}) {
    INFO(dev.str());
    Tensor w = to(from_vector(w0), dev).requires_grad_();
    optim::SGD opt({w}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.5});
    amp::GradScaler scaler({.init_scale = 1024.0});
    w.set_grad(to(from_vector(std::vector<float>{1.0f, INFINITY, 2.0f, 0.0f}), dev));
    scaler.step(opt);  // skipped
    scaler.update();
    CHECK(opt.last_step_skipped());
    const StateDict saved = opt.state_dict();
    for (const auto& [key, t] : saved.tensors) CHECK(key.find("momentum_buffer") == std::string::npos);
    Tensor w2 = to(from_vector(w0), dev).requires_grad_();
    optim::SGD loaded({w2}, {.lr = 0.1, .momentum = 0.9, .dampening = 0.5});
    loaded.load_state_dict(saved);
    w2.set_grad(to(from_vector(g), dev));
    loaded.step();
    const std::vector<double> got = test::values(w2.detach());
    for (std::size_t i = 0; i < g.size(); ++i) CHECK(got[i] == Approx(w0[i] - 0.1 * g[i]).epsilon(1e-6));
    // Once a real update ran, the buffer is saved.
    bool has_buffer = false;
    for (const auto& [key, t] : loaded.state_dict().tensors) has_buffer = has_buffer || key == "state.0.momentum_buffer";
    CHECK(has_buffer);
  }
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA: a first step the device flag skips, then an lr change, steps as on the CPU for every optimizer",
          "[cuda][gpu][optim]") {
  // The fused path makes the state at the skipped step (the CPU path makes none): what a first
  // update takes from the lr (Rprop's step sizes, ASGD's eta) must come from the real one.
  for (const test::OptimCase& c : test::optim_cases()) {
    INFO(c.name);
    Generator gen(78);
    const Tensor w0 = randn({500}, {}, &gen);
    Tensor cw = clone(w0).requires_grad_();
    Tensor dw = w0.to(gpu()).requires_grad_();
    auto cpu = test::make_optimizer(c.kind, {{{cw}, c.options}});
    auto dev = test::make_optimizer(c.kind, {{{dw}, c.options}});
    for (int s = 0; s < 4; ++s) {
      const Tensor g = randn({500}, {}, &gen);
      cw.set_grad(clone(g));
      dw.set_grad(g.to(gpu()));
      const double flag = s == 0 ? 1.0 : 0.0;
      cpu->step_unless_found_inf(full({1}, flag, {.dtype = DType::F32}));
      dev->step_unless_found_inf(full({1}, flag, {.dtype = DType::F32, .device = gpu()}));
      if (s == 0) {
        for (auto* o : {cpu.get(), dev.get()}) o->param_groups()[0].set_lr(2.5 * o->param_groups()[0].lr());
      }
    }
    CHECK(test::path_rel_error(dw.detach().to(Device::cpu()), cw.detach()) <= 16 * 5.96e-8);
    CHECK(dev->state(dw)->step == 3);
  }
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA: a group whose parameters with gradients span devices on some steps only steps as on the CPU",
          "[cuda][gpu][optim]") {
  // Parameter a on the GPU has a gradient every step, b on the CPU every other step: the group
  // alternates between the fused kernel (a alone) and the generic path (a and b), and a's step
  // counts, buffers and NAdam's mu_product must carry over both ways.
  for (const test::OptimCase& c : test::optim_cases()) {
    INFO(c.name);
    Generator gen(77);
    const Tensor a0 = randn({1000}, {}, &gen), b0 = randn({300}, {}, &gen);
    Tensor ca = clone(a0).requires_grad_(), cb = clone(b0).requires_grad_();
    Tensor da = a0.to(gpu()).requires_grad_(), db = clone(b0).requires_grad_();
    auto cpu = test::make_optimizer(c.kind, {{{ca, cb}, c.options}});
    auto dev = test::make_optimizer(c.kind, {{{da, db}, c.options}});
    for (int s = 0; s < 7; ++s) {
      const Tensor ga = randn({1000}, {}, &gen), gb = randn({300}, {}, &gen);
      ca.set_grad(clone(ga));
      da.set_grad(ga.to(gpu()));
      cb.set_grad(s % 2 == 1 ? clone(gb) : Tensor());
      db.set_grad(s % 2 == 1 ? clone(gb) : Tensor());
      if (s == 4) {  // a skipped step on the fused path: the device flag decides
        dev->step_unless_found_inf(full({1}, 1.0, {.dtype = DType::F32, .device = gpu()}));
        cpu->step_unless_found_inf(full({1}, 1.0, {.dtype = DType::F32}));
      } else {
        cpu->step();
        dev->step();
      }
    }
    CHECK(test::path_rel_error(da.detach().to(Device::cpu()), ca.detach()) <= 16 * 5.96e-8);
    CHECK(test::path_rel_error(db.detach(), cb.detach()) <= 16 * 5.96e-8);
    CHECK(dev->state(da)->step == cpu->state(ca)->step);
    for (const auto& [name, v] : cpu->state(ca)->scalars) CHECK(dev->state(da)->scalars.at(name) == Approx(v).epsilon(1e-15));
  }
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA: a gradient on another device, or gradients on two devices, are errors", "[cuda][gpu][optim]") {
  Tensor w = zeros({3}, {.device = gpu()}).requires_grad_();
  CHECK(test::error_of([&] { w.set_grad(zeros({3})); }).find("set_grad: gradient") == 0);
  Tensor a = zeros({3}).requires_grad_(), b = zeros({3}, {.device = gpu()}).requires_grad_();
  a.set_grad(ones({3}));
  b.set_grad(ones({3}, {.device = gpu()}));
  CHECK(test::error_of([&] { optim::clip_grad_norm_({a, b}, 1.0); }).find("clip_grad_norm_: gradient 1 is on cuda:0 but gradient 0 is on cpu") == 0);
  CHECK(test::error_of([&] { amp::unscale_grads({a.grad(), b.grad()}, 0.5); }).find("unscale: gradient 1 is on cuda:0 but gradient 0 is on cpu") == 0);
  test::require_no_pending_cuda_error();
}

TEST_CASE("a master-weight model copy moved to f32 after use_master_weights gets the master's values on CUDA",
          "[cuda][gpu][optim]") {
  // The fused kernels write f16 or bf16 model copies; an f32 one (Module::to after
  // use_master_weights) takes the generic copy instead of bf16 bits written into its memory.
  Tensor w = to(to(randn({1000}), DType::F16), gpu()).requires_grad_();
  optim::SGD opt({w}, {.lr = 0.1});
  opt.use_master_weights();
  const std::vector<double> start = test::values(w);
  {
    NoGradGuard no_grad;
    w.set_data(w.to(DType::F32));  // what Module::to(DType::F32) does to the parameter
  }
  const Tensor g = randn({1000});
  w.set_grad(g.to(gpu()));
  opt.step();
  REQUIRE(w.dtype() == DType::F32);
  const std::vector<double> got = test::values(w), gv = test::values(g);
  int wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double want = double(float(start[i]) - float(0.1f * float(gv[i])));
    if (std::fabs(got[i] - want) > 1e-6 * (1.0 + std::fabs(want))) ++wrong;
  }
  CHECK(wrong == 0);
  test::require_no_pending_cuda_error();
}

TEST_CASE("CUDA GradScaler with master weights: unscale_ and step cost no synchronisation",
          "[cuda][gpu][amp]") {
  Tensor w16 = to(to(randn({64}), DType::F16), gpu()).requires_grad_();  // the model's f16 weight
  Tensor b32 = randn({64}, {.device = gpu()}).requires_grad_();         // an f32 parameter stepped directly
  optim::SGD opt({w16, b32}, {.lr = 0.1, .momentum = 0.9});
  opt.use_master_weights();
  amp::GradScaler scaler({.init_scale = 256.0});
  w16.set_grad(to(to(randn({64}) * 256.0, DType::F16), gpu()));
  b32.set_grad(randn({64}, {.device = gpu()}) * 256.0);
  const Tensor w_before = to(w16.detach(), Device::cpu());
  const uint64_t before = cuda::sync_count();
  scaler.unscale_(opt);  // master grads and b32's grad: the flag and the counts stay on the device
  CHECK(cuda::sync_count() == before);
  CHECK(scaler.step(opt));
  scaler.update();
  CHECK(cuda::sync_count() == before);  // the step, the model copy and the scale update do not wait
  CHECK_FALSE(bits_equal(to(w16.detach(), Device::cpu()), w_before));
  CHECK(scaler.last_stats(opt).values == 128);  // read when asked
  CHECK(scaler.last_stats(opt).nonfinite == 0);
  test::require_no_pending_cuda_error();
}
