// nn layers built from public ops, on CUDA against the CPU (they have no kernels of their own, so
// these check that every op they use runs on the device with the CPU's results): unfold/fold with
// their gradients, embedding_bag in every mode, the 3-D convolution and pools, and a Transformer step in f32 and under f16 autocast. Skipped without a GPU.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cmath>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "core/factory.h"
#include "cuda_test_util.h"
#include "nn/embedding_bag.h"
#include "nn/fold.h"
#include "nn/instance_norm.h"
#include "nn/normalization.h"
#include "nn/transformer_model.h"
#include "ops/activation_composites.h"
#include "ops/adaptive_max_pool.h"
#include "ops/conv3d.h"
#include "ops/ctc_loss.h"
#include "ops/loss.h"
#include "ops/interpolate.h"
#include "ops/layer_composites.h"
#include "ops/linear_cross_entropy.h"
#include "ops/norm.h"
#include "ops/ops.h"

using namespace mg;
using namespace mg::test;

TEST_CASE("CUDA unfold and fold equal the CPU's, gradients included", "[cuda][gpu][nn]") {
  manual_seed(7);
  const nn::UnfoldOptions u{.kernel = {3, 2}, .dilation = {1, 2}, .padding = {1, 1}, .stride = {2, 1}};
  const nn::FoldOptions f{.output_size = {9, 8}, .kernel = u.kernel, .dilation = u.dilation, .padding = u.padding,
                          .stride = u.stride};
  for (DType dt : {DType::F32, DType::BF16}) {
    const Tensor x = randn({2, 3, 9, 8}).to(dt);
    check_same_on_gpu("unfold", {x}, [&](const std::vector<Tensor>& in) { return nn::unfold(in[0], u); });
    const Tensor cols = nn::unfold(x, u);
    check_same_on_gpu("fold", {cols}, [&](const std::vector<Tensor>& in) { return nn::fold(in[0], f); });
    // Gradients: the backward passes are strided copies and adds in a fixed order on both devices.
    auto grad_of = [&](const Tensor& at) {
      const Tensor leaf = at.detach().requires_grad_();
      const Tensor y = nn::fold(nn::unfold(leaf, u), f);
      return autograd::grad({sum(y * y)}, {leaf})[0];
    };
    const std::vector<double> want = values(grad_of(x)), got = values(grad_of(x.to(gpu())).to(Device::cpu()));
    REQUIRE(got.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) CHECK(got[i] == Approx(want[i]).epsilon(1e-5).margin(1e-5));
  }
  require_no_pending_cuda_error();
}

TEST_CASE("CUDA Transformer forward and backward equal the CPU's in f32 and stay close under f16 autocast",
          "[cuda][gpu][nn]") {
  manual_seed(8);
  nn::Transformer cpu({.d_model = 32, .nhead = 4, .num_encoder_layers = 2, .num_decoder_layers = 2,
                       .dim_feedforward = 64, .dropout = 0.0});
  nn::Transformer gpu_model({.d_model = 32, .nhead = 4, .num_encoder_layers = 2, .num_decoder_layers = 2,
                             .dim_feedforward = 64, .dropout = 0.0});
  gpu_model.load_state_dict(cpu.state_dict());
  gpu_model.to(gpu());
  const Tensor src = randn({3, 7, 32}), tgt = randn({3, 5, 32});
  const Tensor pad = gt(arange(0, 7).unsqueeze(0), from_vector<int64_t>({6, 5, 3}, {3, 1}));
  auto masks_on = [&](Device d) {
    return nn::TransformerMasks{.tgt_mask = nn::generate_square_subsequent_mask(5, {.device = d}),
                                .src_key_padding_mask = pad.to(d),
                                .memory_key_padding_mask = pad.to(d)};
  };
  const Tensor want = cpu.forward(src, tgt, masks_on(Device::cpu()));
  const Tensor got = gpu_model.forward(src.to(gpu()), tgt.to(gpu()), masks_on(gpu()));
  REQUIRE(got.device() == gpu());
  const std::vector<double> w = values(want), g = values(got.to(Device::cpu()));
  REQUIRE(g.size() == w.size());
  for (std::size_t i = 0; i < w.size(); ++i) CHECK(g[i] == Approx(w[i]).epsilon(1e-4).margin(1e-4));
  sum(want * want).backward();
  sum(got * got).backward();
  const auto cpu_params = cpu.named_parameters(), gpu_params = gpu_model.named_parameters();
  for (std::size_t p = 0; p < cpu_params.size(); ++p) {
    INFO(cpu_params[p].first);
    const std::vector<double> wg = values(cpu_params[p].second.grad()),
                              gg = values(gpu_params[p].second.grad().to(Device::cpu()));
    REQUIRE(gg.size() == wg.size());
    for (std::size_t i = 0; i < wg.size(); ++i) CHECK(gg[i] == Approx(wg[i]).epsilon(1e-3).margin(1e-3));
  }
  {
    amp::Autocast autocast({.device = DeviceType::CUDA});  // f16 on CUDA
    const Tensor low = gpu_model.forward(src.to(gpu()), tgt.to(gpu()), masks_on(gpu()));
    CHECK(low.dtype() == DType::F32);  // the final layer norm is an fp32 op
    const Tensor diff = (low.to(Device::cpu()) - want).abs().max();
    CHECK(diff.item<double>() < 0.05);
  }
  require_no_pending_cuda_error();
}

TEST_CASE("CUDA embedding_bag equals the CPU's in every mode, with offsets, padding and per-sample weights",
          "[cuda][gpu][nn]") {
  manual_seed(10);
  const Tensor weight = randn({12, 5});
  struct Form {
    Tensor input, offsets, psw;
    bool include_last;
  };
  const std::vector<Form> forms = {
      {from_vector<int64_t>({3, 0, 7, 7, 11, 2, 0, 5, 9}, {9}), from_vector<int64_t>({0, 2, 2, 6}, {4}), Tensor(), false},
      {from_vector<int64_t>({3, 0, 7, 7, 11, 2, 0, 5, 9}, {9}), from_vector<int64_t>({0, 4, 9}, {3}), randn({9}), true},
      {from_vector<int64_t>({1, 7, 4, 4, 10, 0}, {2, 3}), Tensor(), randn({2, 3}), false}};
  for (const Form& f : forms) {
    for (nn::BagMode mode : {nn::BagMode::Sum, nn::BagMode::Mean, nn::BagMode::Max}) {
      if (f.psw.defined() && mode != nn::BagMode::Sum) continue;
      INFO("mode " << int(mode) << ", input " << f.input.dim() << "-D");
      auto run = [&](Device d) {
        const Tensor w = weight.to(d).detach().requires_grad_();
        const Tensor psw = f.psw.defined() ? f.psw.to(d).detach().requires_grad_() : Tensor();
        const Tensor y = nn::embedding_bag(w, f.input.to(d),
                                           {.offsets = f.offsets.defined() ? f.offsets.to(d) : Tensor(),
                                            .per_sample_weights = psw,
                                            .mode = mode,
                                            .include_last_offset = f.include_last,
                                            .padding_idx = 7});
        Tensors wrt = {w};
        if (psw.defined()) wrt.push_back(psw);
        const Tensors g = autograd::grad({sum(y * y)}, wrt);
        std::vector<std::vector<double>> out = {values(y.to(Device::cpu()))};
        for (const Tensor& t : g) out.push_back(values(t.to(Device::cpu())));
        return out;
      };
      const auto want = run(Device::cpu()), got = run(gpu());
      REQUIRE(got.size() == want.size());
      for (std::size_t k = 0; k < want.size(); ++k) {
        REQUIRE(got[k].size() == want[k].size());
        for (std::size_t i = 0; i < want[k].size(); ++i) CHECK(got[k][i] == Approx(want[k][i]).epsilon(1e-5).margin(1e-5));
      }
    }
  }
  // Operands on two devices are refused by name.
  MG_REQUIRE_ERROR(nn::embedding_bag(weight.to(gpu()), forms[0].input.to(gpu()), {.offsets = forms[0].offsets}),
                   "must be on one device");
  require_no_pending_cuda_error();
}

TEST_CASE("CUDA conv3d, conv_transpose3d and the 3-D pools equal the CPU's, gradients included", "[cuda][gpu][nn]") {
  manual_seed(11);
  const Tensor x = randn({2, 4, 5, 6, 7}), w = randn({6, 2, 3, 2, 3}) * 0.3, b = randn({6});
  auto run = [&](Device d) {
    const Tensor xl = x.to(d).detach().requires_grad_(), wl = w.to(d).detach().requires_grad_();
    const Tensor c = conv3d(xl, wl, b.to(d), {.stride = {2, 1, 1}, .padding = {1, 1, 0}, .groups = 2});
    const Tensor y = sum(max_pool3d(c, {2, 2, 2}, {1, 2, 1}, {1, 1, 0})) + sum(avg_pool3d(c, {2, 3, 2}, {0, 0, 0}, {1, 1, 1}, false, true)) +
                     sum(adaptive_avg_pool3d(c, {2, 3, 2}) * adaptive_avg_pool3d(c, {2, 3, 2}));
    const Tensor up = conv_transpose3d(c, wl.narrow(1, 0, 1), Tensor(),
                                       {.stride = {2, 1, 2}, .padding = {1, 0, 1}, .groups = 2}, {1, 0, 0});
    const Tensors g = autograd::grad({y + sum(up * up)}, {xl, wl});
    return std::vector<std::vector<double>>{values(c.to(Device::cpu())), values(up.to(Device::cpu())),
                                            values(g[0].to(Device::cpu())), values(g[1].to(Device::cpu()))};
  };
  const auto want = run(Device::cpu()), got = run(gpu());
  for (std::size_t k = 0; k < want.size(); ++k) {
    REQUIRE(got[k].size() == want[k].size());
    // f32 sums of terms up to ~1e3 in another order (cuDNN's) cancel to small results: the
    // slack scales with the largest value of the output (seen: 1.5e-4 on a weight gradient of
    // entries up to 5.8e3 under the CUDA emulator).
    double scale = 0;
    for (const double v : want[k]) scale = std::max(scale, std::abs(v));
    for (std::size_t i = 0; i < want[k].size(); ++i) {
      CHECK(got[k][i] == Approx(want[k][i]).epsilon(1e-4).margin(1e-4 + 2e-6 * scale));
    }
  }
  require_no_pending_cuda_error();
}

TEST_CASE("CUDA bilinear, local_response_norm, rrelu, alpha_dropout, 3-D norms, 5-D area, antialiased resizing, "
          "linear_cross_entropy and scale_grad_by_freq equal the CPU's",
          "[cuda][gpu][nn]") {
  manual_seed(12);
  const Tensor x5 = randn({2, 3, 4, 5, 6}), a = randn({4, 3}), b = randn({4, 5}), w = randn({2, 3, 5}) * 0.3;
  // Each function of CPU f32 leaves, run on both devices: value and the gradient of sum(y * y).
  using Fn = std::function<Tensor(const Tensors&)>;
  const std::vector<std::pair<const char*, std::pair<Tensors, Fn>>> cases = {
      {"bilinear", {{a, b, w}, [](const Tensors& t) { return bilinear(t[0], t[1], t[2]); }}},
      {"local_response_norm", {{x5}, [](const Tensors& t) { return local_response_norm(t[0], 3, 0.5, 0.75, 1.0); }}},
      {"rrelu eval", {{x5}, [](const Tensors& t) { return rrelu(t[0], 0.1, 0.3, false); }}},
      {"area 5-D", {{x5}, [](const Tensors& t) {
         return interpolate(t[0], {.size = {3, 2, 4}, .mode = InterpolateMode::Area});
       }}},
      {"batch_norm 5-D", {{x5}, [](const Tensors& t) { return batch_norm(t[0], Tensor(), Tensor(), Tensor(), Tensor(), true); }}},
      {"adaptive_max_pool3d", {{x5}, [](const Tensors& t) { return adaptive_max_pool3d(t[0], {3, 2, 4}); }}},
      {"adaptive_max_pool2d", {{a.reshape({1, 1, 4, 3})}, [](const Tensors& t) { return adaptive_max_pool2d(t[0], {3, 2}); }}},
      {"avg_pool3d bf16", {{x5}, [](const Tensors& t) {
         return avg_pool3d(t[0].to(DType::BF16), {2, 3, 2}, {1, 1, 1}, {1, 1, 1}, false, true).to(DType::F32);
       }}},
      {"avg_pool3d divisor_override", {{x5}, [](const Tensors& t) {
         return avg_pool3d(t[0], {2, 3, 2}, {1, 2, 1}, {1, 1, 0}, true, true, 5);
       }}},
      {"bicubic antialias", {{x5.reshape({2, 3, 20, 6})}, [](const Tensors& t) {
         return interpolate(t[0], {.size = {7, 4}, .mode = InterpolateMode::Bicubic, .antialias = true});
       }}},
      {"lanczos", {{x5.reshape({2, 3, 20, 6})}, [](const Tensors& t) {
         return interpolate(t[0], {.size = {6, 9}, .mode = InterpolateMode::Lanczos, .antialias = true});
       }}},
      {"linear_cross_entropy", {{randn({6, 5}), randn({7, 5}), randn({7})}, [](const Tensors& t) {
         const Tensor target = from_vector<int64_t>({0, 6, 2, 2, 5, 1}, {6}).to(t[0].device());
         return linear_cross_entropy(t[0], t[1], target, {.bias = t[2], .label_smoothing = 0.1, .chunk_rows = 4});
       }}},
      {"embedding scale_grad_by_freq", {{a}, [](const Tensors& t) {
         const Tensor idx = from_vector<int64_t>({0, 2, 2, 3, 0, 2}, {2, 3}).to(t[0].device());
         return embedding(t[0], idx, 3, /*scale_grad_by_freq=*/true);
       }}},
  };
  for (const auto& entry : cases) {
    const auto& c = entry.second;  // (a plain reference: clang 14 cannot capture a structured binding)
    INFO(entry.first);
    auto run = [&](Device d) {
      Tensors leaves;
      for (const Tensor& t : c.first) leaves.push_back(t.to(d).detach().requires_grad_());
      const Tensor y = c.second(leaves);
      const Tensors g = autograd::grad({sum(y * y)}, leaves);
      std::vector<std::vector<double>> out = {values(y.to(Device::cpu()))};
      for (const Tensor& t : g) out.push_back(values(t.to(Device::cpu())));
      return out;
    };
    const auto want = run(Device::cpu()), got = run(gpu());
    REQUIRE(got.size() == want.size());
    for (std::size_t k = 0; k < want.size(); ++k) {
      REQUIRE(got[k].size() == want[k].size());
      for (std::size_t i = 0; i < want[k].size(); ++i) CHECK(got[k][i] == Approx(want[k][i]).epsilon(1e-4).margin(1e-4));
    }
  }
  // Random ones: the same Philox stream gives the same masks and slopes on both devices.
  Generator g_cpu(5), g_gpu(5);
  const std::vector<double> drop_cpu = values(nn::alpha_dropout(x5, 0.3, true, true, &g_cpu));
  const std::vector<double> drop_gpu = values(nn::alpha_dropout(x5.to(gpu()), 0.3, true, true, &g_gpu).to(Device::cpu()));
  REQUIRE(drop_gpu.size() == drop_cpu.size());
  for (std::size_t i = 0; i < drop_cpu.size(); ++i) CHECK(drop_gpu[i] == Approx(drop_cpu[i]).epsilon(1e-6).margin(1e-6));
  // InstanceNorm3d with running statistics: a training step then eval, the buffers on the GPU.
  nn::InstanceNorm3d cpu_norm({.num_features = 3, .affine = true, .track_running_stats = true});
  nn::InstanceNorm3d gpu_norm({.num_features = 3, .affine = true, .track_running_stats = true});
  gpu_norm.to(gpu());
  cpu_norm.forward(x5);
  gpu_norm.forward(x5.to(gpu()));
  cpu_norm.eval();
  gpu_norm.eval();
  const std::vector<double> ev_cpu = values(cpu_norm.forward(x5)), ev_gpu = values(gpu_norm.forward(x5.to(gpu())).to(Device::cpu()));
  REQUIRE(ev_gpu.size() == ev_cpu.size());
  for (std::size_t i = 0; i < ev_cpu.size(); ++i) CHECK(ev_gpu[i] == Approx(ev_cpu[i]).epsilon(1e-5).margin(1e-5));
  require_no_pending_cuda_error();
}

TEST_CASE("CUDA ctc_loss equals the CPU's, gradient included", "[cuda][gpu][nn]") {
  manual_seed(13);
  const Tensor logits = randn({20, 3, 6});
  const Tensor targets = from_vector<int64_t>({1, 2, 2, 3, 5, 4, 1, 1, 3, 2, 0, 0}, {3, 4});
  auto run = [&](Device d) {
    const Tensor x = logits.to(d).detach().requires_grad_();
    const Tensor loss = ctc_loss(log_softmax(x, 2), targets.to(d), std::vector<int64_t>{20, 17, 9},
                                 std::vector<int64_t>{4, 4, 2}, 0, Reduction::Mean);
    const Tensor g = autograd::grad({loss}, {x})[0];
    return std::pair{loss.to(Device::cpu()).item<double>(), values(g.to(Device::cpu()))};
  };
  const auto [want, want_g] = run(Device::cpu());
  const auto [got, got_g] = run(gpu());
  CHECK(got == Approx(want).epsilon(1e-5));
  REQUIRE(got_g.size() == want_g.size());
  for (std::size_t i = 0; i < want_g.size(); ++i) CHECK(got_g[i] == Approx(want_g[i]).epsilon(1e-4).margin(1e-5));
  require_no_pending_cuda_error();
}
