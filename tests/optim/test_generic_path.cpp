// The device-generic path of the optimizers, master weights, gradient clipping and unscaling
// (optim/generic_path.h), forced on the CPU and compared with the fused CPU path: every
// optimizer and option set for five seeded steps in f64 (1e-12), f32 (a few ulps), f16/bf16
// (two ulps of the dtype), O2 master weights, clip_grad_norm_ (norm value and clipped gradients,
// inf/NaN norms, max_norm edge cases), clip_grad_value_, and unscale (statistics exactly equal,
// unscaled values bitwise equal), and a GradScaler step skipped on inf that touches nothing.
#include <catch2/catch.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"
#include "amp/unscale.h"
#include "core/factory.h"
#include "path_compare.h"

using namespace mg;
using test::bits_equal;

namespace {

Tensor tensor(const std::vector<double>& v) { return from_vector(v); }

const DType kAllFloats[] = {DType::F64, DType::F32, DType::F16, DType::BF16};

// A gradient pattern [n] of `dtype`: seeded normal values times `mag`, with special values planted.
Tensor grad_values(int64_t n, DType dtype, uint64_t seed, double mag = 1.0) {
  Generator gen(seed);
  return to(randn({n}, {.dtype = DType::F64}, &gen) * mag, dtype);
}

// Sets .grad of fresh parameters to clones of `grads`.
Tensors params_with_grads(const Tensors& grads) {
  Tensors ps;
  for (const Tensor& g : grads) {
    Tensor p = zeros(g.shape(), {.dtype = g.dtype()}).requires_grad_();
    p.set_grad(clone(g));
    ps.push_back(p);
  }
  return ps;
}

}  // namespace

TEST_CASE("generic optimizer path matches the fused CPU path for every optimizer and option set",
          "[optim][generic]") {
  for (const test::OptimCase& c : test::optim_cases()) {
    for (DType dt : kAllFloats) {
      const std::string what = c.name + " " + dtype_name(dt);
      const auto fused = test::run_optim_case(c, dt, Device::cpu(), /*generic=*/false, 5);
      const auto generic = test::run_optim_case(c, dt, Device::cpu(), /*generic=*/true, 5);
      const double worst = test::compare_runs(generic, fused, dt, what);
      if (dt == DType::F64) CHECK(worst <= 1e-12);
      if (std::getenv("MG_PATH_REPORT")) std::printf("generic vs fused %-45s rel %.3g\n", what.c_str(), worst);
    }
  }
}

TEST_CASE("generic path: the parameter without a gradient keeps no state and its value", "[optim][generic]") {
  const test::OptimCase c = test::optim_cases()[5];  // Adam with weight decay
  const auto fused = test::run_optim_case(c, DType::F32, Device::cpu(), false, 2);
  const auto generic = test::run_optim_case(c, DType::F32, Device::cpu(), true, 2);
  // params (5) + 2 buffers for each of the 4 parameters with a gradient
  REQUIRE(generic.back().size() == 5 + 4 * 2);
  REQUIRE(fused.back().size() == generic.back().size());
  CHECK(bits_equal(generic.back()[test::kNoGradParam], fused.back()[test::kNoGradParam]));
}

TEST_CASE("generic path: O2 master weights (f32 masters, f16/bf16 model) match the fused path",
          "[optim][generic][amp]") {
  for (DType dt : {DType::F16, DType::BF16}) {
    // SGD momentum, nesterov, AdamW, LAMB, RMSprop centered momentum maximize, Adagrad with every option,
    // Adamax, NAdam, RAdam (7 steps: both branches), Adadelta, Adafactor with every option
    for (std::size_t k : {1u, 3u, 7u, 9u, 16u, 19u, 20u, 21u, 22u, 23u, 31u}) {
      const test::OptimCase c = test::optim_cases()[k];
      const std::string what = c.name + " masters " + dtype_name(dt);
      const auto fused = test::run_optim_case(c, dt, Device::cpu(), false, 4, /*masters=*/true);
      const auto generic = test::run_optim_case(c, dt, Device::cpu(), true, 4, /*masters=*/true);
      test::compare_runs(generic, fused, DType::F32, what);
    }
  }
}

TEST_CASE("generic path: the master copies are bitwise the fused ones", "[optim][generic][amp]") {
  for (DType dt : {DType::F16, DType::BF16}) {
    // masters -> model: round to nearest even, overflow to inf (f16), subnormals, NaN
    Tensor master = cat({grad_values(1000, DType::F32, 7, 3.0), grad_values(100, DType::F32, 8, 1e-6),
                         to(tensor({70000.0, -1e30, 3e-8, NAN, 0.0}), DType::F32)});
    Tensor model_fused = zeros(master.shape(), {.dtype = dt}), model_generic = zeros(master.shape(), {.dtype = dt});
    optim::copy_masters_to_model({{model_fused, master}});
    {
      optim::ForceGenericPathGuard force;
      optim::copy_masters_to_model({{model_generic, master}});
    }
    CHECK(bits_equal(model_generic, model_fused));
    // model grads -> master grads: exact widening
    Tensor mf = zeros(master.shape()).requires_grad_(), mgen = zeros(master.shape()).requires_grad_();
    Tensor model = zeros(master.shape(), {.dtype = dt}).requires_grad_();
    model.set_grad(to(master, dt));
    optim::copy_model_grads_to_masters({{model, mf}});
    {
      optim::ForceGenericPathGuard force;
      optim::copy_model_grads_to_masters({{model, mgen}});
    }
    REQUIRE(mgen.grad().defined());
    CHECK(bits_equal(mgen.grad(), mf.grad()));
  }
}

TEST_CASE("generic path: clip_grad_norm_ matches the fused path (norm and clipped gradients)",
          "[optim][generic][clip]") {
  const double norm_types[] = {2.0, 1.0, 3.0, INFINITY};
  const double max_norms[] = {0.0, 0.5, 1e6};
  const std::vector<std::vector<DType>> dtype_sets = {
      {DType::F32, DType::F32}, {DType::F16, DType::BF16, DType::F32}, {DType::F64, DType::F32}, {DType::F64}};
  for (const auto& dts : dtype_sets) {
    Tensors grads;
    for (std::size_t k = 0; k < dts.size(); ++k) grads.push_back(grad_values(k == 0 ? optim::kChunkSize + 5 : 37, dts[k], 11 + k));
    for (double nt : norm_types) {
      for (double mn : max_norms) {
        INFO("norm_type " << nt << ", max_norm " << mn << ", " << dts.size() << " gradients, first "
                          << dtype_name(dts[0]));
        const Tensors pf = params_with_grads(grads), pg = params_with_grads(grads);
        const Tensor nf = optim::clip_grad_norm_(pf, mn, nt);
        Tensor ng;
        {
          optim::ForceGenericPathGuard force;
          ng = optim::clip_grad_norm_(pg, mn, nt);
        }
        REQUIRE(ng.dtype() == nf.dtype());
        CHECK(ng.dim() == 0);
        const double tol = nf.dtype() == DType::F64 ? 1e-12 : 16 * 5.96e-8;
        CHECK(std::fabs(ng.item<double>() - nf.item<double>()) <= tol * std::fabs(nf.item<double>()));
        for (std::size_t k = 0; k < grads.size(); ++k) {
          const DType dt = grads[k].dtype();
          // the factor agrees to f32 ulps; the clipped values then round in their own dtype
          CHECK(test::path_rel_error(pg[k].grad(), pf[k].grad()) <= test::path_rtol(dt));
          if (mn == 1e6) CHECK(bits_equal(pg[k].grad(), grads[k]));  // factor 1: unchanged
        }
      }
    }
  }
}

TEST_CASE("generic path: clip_grad_norm_ with an inf or NaN gradient returns it and leaves the gradients",
          "[optim][generic][clip]") {
  for (double bad : {double(INFINITY), -double(INFINITY), double(NAN)}) {
    for (double nt : {2.0, double(INFINITY)}) {
      INFO("bad " << bad << ", norm_type " << nt);
      Tensor g0 = grad_values(100, DType::F32, 3), g1 = grad_values(20, DType::F16, 4);
      g1 = cat({g1, to(tensor({bad}), DType::F16)});
      const Tensors pg = params_with_grads({g0, g1}), pf = params_with_grads({g0, g1});
      const Tensor nf = optim::clip_grad_norm_(pf, 1.0, nt);
      Tensor ng;
      {
        optim::ForceGenericPathGuard force;
        ng = optim::clip_grad_norm_(pg, 1.0, nt);
        const Tensors pe = params_with_grads({g0, g1});
        const std::string err = test::error_of([&] { optim::clip_grad_norm_(pe, 1.0, nt, /*error_if_nonfinite=*/true); });
        CHECK(err.find("clip_grad_norm_: the total norm of order") == 0);
        CHECK(err.find("they were left unchanged") != std::string::npos);
      }
      CHECK(std::isnan(ng.item<double>()) == std::isnan(nf.item<double>()));
      if (!std::isnan(nf.item<double>())) CHECK(ng.item<double>() == nf.item<double>());
      CHECK(!std::isfinite(ng.item<double>()));
      CHECK(bits_equal(pg[0].grad(), g0));
      CHECK(bits_equal(pg[1].grad(), g1));
    }
  }
}

TEST_CASE("generic path: clip_grad_norm_ without gradients gives 0, and clip_grad_value_ clamps with NaN kept",
          "[optim][generic][clip]") {
  optim::ForceGenericPathGuard force;
  Tensor p = zeros({3}).requires_grad_();
  const Tensor n = optim::clip_grad_norm_({p}, 1.0);
  CHECK(n.item<double>() == 0.0);
  CHECK(n.dtype() == DType::F32);
  for (DType dt : kAllFloats) {
    const Tensor g = cat({grad_values(500, dt, 21, 2.0), to(tensor({double(NAN), INFINITY}), dt)});
    const Tensors pg = params_with_grads({g});
    optim::clip_grad_value_(pg, 0.75);
    CHECK(!bits_equal(pg[0].grad(), g));
    std::vector<double> v = test::values(pg[0].grad());
    for (std::size_t i = 0; i + 2 < v.size(); ++i) CHECK(std::fabs(v[i]) <= 0.75);
    CHECK(std::isnan(v[v.size() - 2]));
    CHECK(v.back() == 0.75);
  }
}

TEST_CASE("generic path: clip_grad_value_ equals the fused path bitwise", "[optim][generic][clip]") {
  for (DType dt : kAllFloats) {
    const Tensor g = cat({grad_values(500, dt, 21, 2.0), to(tensor({double(NAN), INFINITY, -INFINITY}), dt)});
    const Tensors pg = params_with_grads({g}), pf = params_with_grads({g});
    optim::clip_grad_value_(pf, 0.75);
    {
      optim::ForceGenericPathGuard force;
      optim::clip_grad_value_(pg, 0.75);
    }
    CHECK(bits_equal(pg[0].grad(), pf[0].grad()));
  }
}

TEST_CASE("generic path: unscale gives the fused statistics exactly and bitwise-equal values",
          "[amp][generic][unscale]") {
  const double inv = 1.0 / 65536.0, odd_inv = 1.0 / 3000.0;  // odd_inv is not a power of two
  for (double inv_scale : {inv, odd_inv}) {
    for (int special = 0; special < 3; ++special) {  // 0: finite only, 1: an inf, 2: a NaN
      Tensors grads;
      for (DType dt : kAllFloats) {
        Tensor g = grad_values(3000, dt, 31 + int(dt), 1e3);
        // zeros, subnormals of the dtype and (for f16) values that underflow
        g = cat({g, to(tensor({0.0, -0.0, 1e-6, 3e-5, 1e-39, 1e-310}), dt)});
        if (special == 1) g = cat({g, to(tensor({-INFINITY}), dt)});
        if (special == 2) g = cat({g, to(tensor({double(NAN)}), dt)});
        grads.push_back(g);
      }
      grads.push_back(Tensor());  // an undefined entry is skipped
      for (bool check_only : {false, true}) {
        INFO("inv_scale " << inv_scale << ", special " << special << ", check_only " << check_only);
        Tensors gf, gg;
        for (const Tensor& g : grads) {
          gf.push_back(g.defined() ? clone(g) : Tensor());
          gg.push_back(g.defined() ? clone(g) : Tensor());
        }
        const amp::UnscaleStats sf = amp::unscale_grads(gf, inv_scale, check_only);
        amp::UnscaleStats sg;
        {
          optim::ForceGenericPathGuard force;
          sg = amp::unscale_grads(gg, inv_scale, check_only);
        }
        CHECK(sg.values == sf.values);
        CHECK(sg.zeros == sf.zeros);
        CHECK(sg.underflowed == sf.underflowed);
        CHECK(sg.nonfinite == sf.nonfinite);
        CHECK(sg.found_inf() == (special != 0));
        CHECK(sf.underflowed > 0);
        for (std::size_t k = 0; k + 1 < grads.size(); ++k) CHECK(bits_equal(gg[k], gf[k]));
      }
    }
  }
}

TEST_CASE("generic path: unscale into f32 master gradients matches the fused pass", "[amp][generic][unscale]") {
  for (bool accumulate : {false, true}) {
    for (int special = 0; special < 2; ++special) {
      Tensors src;
      for (DType dt : {DType::F16, DType::BF16, DType::F32}) {
        Tensor g = grad_values(2000, dt, 41 + int(dt), 100.0);
        g = cat({g, to(tensor({0.0, 1e-7}), dt)});
        if (special) g = cat({g, to(tensor({INFINITY}), dt)});
        src.push_back(g);
      }
      Tensors df, dg;
      for (const Tensor& s : src) {
        const Tensor d0 = grad_values(s.numel(), DType::F32, 99);
        df.push_back(clone(d0));
        dg.push_back(clone(d0));
      }
      INFO("accumulate " << accumulate << ", special " << special);
      const amp::UnscaleStats sf = amp::unscale_grads_to(src, df, 1.0 / 1024, accumulate);
      amp::UnscaleStats sg;
      {
        optim::ForceGenericPathGuard force;
        sg = amp::unscale_grads_to(src, dg, 1.0 / 1024, accumulate);
      }
      CHECK(sg.values == sf.values);
      CHECK(sg.zeros == sf.zeros);
      CHECK(sg.underflowed == sf.underflowed);
      CHECK(sg.nonfinite == sf.nonfinite);
      // one multiply (bitwise); accumulate adds once more, as the fused loop (which may use an FMA)
      for (std::size_t k = 0; k < src.size(); ++k) {
        if (!accumulate) CHECK(bits_equal(dg[k], df[k]));
        else CHECK(test::path_rel_error(dg[k], df[k]) <= 2 * 5.96e-8);
      }
    }
  }
}

TEST_CASE("generic path: a GradScaler step skipped on inf touches no parameter and no state",
          "[amp][generic][unscale]") {
  optim::ForceGenericPathGuard force;
  Tensor w = tensor({1.0, -2.0, 3.0}).requires_grad_();
  optim::Adam opt({w}, {.lr = 0.1});
  amp::GradScaler scaler({.init_scale = 1024.0});
  // one clean step creates the state
  w.set_grad(tensor({1024.0, 2048.0, -512.0}));
  REQUIRE(scaler.step(opt));
  scaler.update();
  const Tensor w_before = clone(w.detach());
  const optim::ParamState* st = opt.state(w);
  REQUIRE(st != nullptr);
  const Tensor m_before = clone(st->buffers.at("exp_avg")), v_before = clone(st->buffers.at("exp_avg_sq"));
  // an overflow: skipped
  w.set_grad(tensor({1.0, INFINITY, 2.0}));
  CHECK_FALSE(scaler.step(opt));
  CHECK(scaler.last_stats(opt).nonfinite == 1);
  scaler.update();
  CHECK(scaler.get_scale() == 512.0);
  CHECK(bits_equal(w.detach(), w_before));
  CHECK(bits_equal(st->buffers.at("exp_avg"), m_before));
  CHECK(bits_equal(st->buffers.at("exp_avg_sq"), v_before));
  CHECK(st->step == 1);
  CHECK(opt.step_count() == 1);
}
