// bench_nn: the layers and models the examples train, measured against the machine's FMA peak in
// the same run (the host is shared and noisy, so only same-run ratios mean something):
//   1. FMA peak (the reference of every GFLOP/s row);
//   2. conv2d forward, input gradient and weight gradient for each distinct conv shape of a
//      CIFAR-style ResNet-20 on 1x28x28 images at batch 128, in f32 and bf16 (bf16 rows are
//      compared with f32 of the same shape): 2 N Cout Ho Wo Cin kH kW flops each;
//   3. one training step of ResNet-20 (1x28x28, batch 128, 10 classes) and of BERT-mini with the
//      MLM head (4 layers, hidden 256, 4 heads, FFN 1024, vocab 8192, sequence 128, batch 32) in
//      f32: ms/step, where a step is forward + cross-entropy + backward + an SGD update of every
//      parameter (p -= lr * grad; the optimizers come with the optim issue) + zero_grad. The
//      GFLOP/s of a step counts 3x the forward GEMM/conv flops (forward, input and weight
//      gradients) and ignores the elementwise work.
// Timing: one warm-up call, then the best of N (std::chrono::steady_clock).
//
//   bench_nn [--quick] [--threads N] [--json FILE]
#include <cstdio>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "bench_common.h"
#include "core/factory.h"
#include "core/parallel.h"
#include "nn/models/bert.h"
#include "nn/models/resnet.h"
#include "ops/conv.h"
#include "ops/loss.h"
#include "ops/ops.h"

namespace {

using bench::Row;

struct ConvShape {
  std::string where;
  int64_t cin, cout, hw, stride;  // input H = W = hw
};

// The distinct conv shapes of ResNet-20 on 28x28 inputs with one channel.
const std::vector<ConvShape> kResNet20Convs = {
    {"stem", 1, 16, 28, 1},       {"layer1", 16, 16, 28, 1}, {"layer2.0", 16, 32, 28, 2},
    {"layer2", 32, 32, 14, 1},    {"layer3.0", 32, 64, 14, 2}, {"layer3", 64, 64, 7, 1},
};

// GFLOP/s of conv2d forward, backward-input and backward-weight for one shape.
std::vector<double> conv_gflops(const ConvShape& s, int64_t n, mg::DType dtype, int reps) {
  const mg::Conv2dOptions opt{.stride = {s.stride, s.stride}, .padding = {1, 1}};
  const int64_t ho = (s.hw + 2 - 3) / s.stride + 1;
  const mg::Tensor x = mg::randn({n, s.cin, s.hw, s.hw}).to(dtype);
  const mg::Tensor w = mg::randn({s.cout, s.cin, 3, 3}).to(dtype);
  const mg::Tensor g = mg::randn({n, s.cout, ho, ho}).to(dtype);
  const double flops = 2.0 * double(n * s.cout * ho * ho * s.cin * 9);
  std::vector<double> out;
  for (const auto& fn : std::vector<std::function<mg::Tensor()>>{
           [&] { return mg::conv2d(x, w, {}, opt); },
           [&] { return mg::conv2d_backward_input(g, w, {s.hw, s.hw}, opt); },
           [&] { return mg::conv2d_backward_weight(x, g, {3, 3}, opt); }}) {
    out.push_back(flops / bench::seconds_best_of(reps, [&] { bench::g_sink = double(fn().numel()); }) / 1e9);
  }
  return out;
}

// p -= lr * grad for every parameter, then zero_grad: the update half of a training step.
void sgd_update(mg::nn::Module& m, double lr) {
  mg::NoGradGuard no_grad;
  for (mg::Tensor& p : m.parameters()) {
    if (p.grad().defined()) p.sub_(p.grad(), lr);
  }
  m.zero_grad();
}

// Forward flops of ResNet-20 (CIFAR style, 28x28, one channel) per image: the convs and the fc.
double resnet20_forward_flops() {
  double f = 0;
  auto conv = [&](int64_t cin, int64_t cout, int64_t hout) { f += 2.0 * double(cin * cout * 9 * hout * hout); };
  conv(1, 16, 28);
  for (int i = 0; i < 6; ++i) conv(16, 16, 28);
  conv(16, 32, 14);
  for (int i = 0; i < 5; ++i) conv(32, 32, 14);
  conv(32, 64, 7);
  for (int i = 0; i < 5; ++i) conv(64, 64, 7);
  return f + 2.0 * 64 * 10;
}

// Forward flops of BERT-mini MLM per token at sequence length l: per layer the four H x H
// projections, the two FFN GEMMs and the two attention products; then the MLM transform and the
// tied decoder.
double bert_forward_flops(int64_t h, int64_t i, int64_t layers, int64_t v, int64_t l) {
  const double per_layer = 2.0 * (4 * h * h + 2 * h * i) + 2.0 * 2 * l * h;
  return double(layers) * per_layer + 2.0 * h * h + 2.0 * h * v;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Config cfg;
  if (const int rc = bench::parse_args(argc, argv, "bench_nn", cfg); rc >= 0) return rc;
  mg::set_num_threads(cfg.threads);
  const int64_t conv_batch = cfg.quick ? 16 : 128;
  const int64_t resnet_batch = cfg.quick ? 16 : 128;
  const int64_t bert_batch = cfg.quick ? 4 : 32, bert_seq = cfg.quick ? 32 : 128;
  const int conv_reps = cfg.quick ? 1 : 3, step_reps = cfg.quick ? 1 : 3;
  std::printf("bench_nn: %d threads; conv batch %lld (best of %d); ResNet-20 step batch %lld, BERT-mini step "
              "batch %lld x seq %lld (best of %d)\n",
              cfg.threads, (long long)conv_batch, conv_reps, (long long)resnet_batch, (long long)bert_batch,
              (long long)bert_seq, step_reps);
  bench::print_load_average();

  std::vector<Row> rows;
  try {
    const Row peak = bench::fma_peak(cfg, cfg.quick ? 3 : 5);
    rows.push_back(peak);

    // 2. conv shapes of ResNet-20
    const char* dir_names[3] = {"conv2d", "conv2d_bw_input", "conv2d_bw_weight"};
    for (const ConvShape& s : kResNet20Convs) {
      const std::vector<double> f32 = conv_gflops(s, conv_batch, mg::DType::F32, conv_reps);
      const std::vector<double> b16 = conv_gflops(s, conv_batch, mg::DType::BF16, conv_reps);
      const std::string shape = std::to_string(s.cin) + ">" + std::to_string(s.cout) + " " + std::to_string(s.hw) +
                                "^2 s" + std::to_string(s.stride);
      for (int d = 0; d < 3; ++d) {
        const std::string name = std::string(dir_names[d]) + " " + s.where;
        rows.push_back({name, "f32", shape, f32[d], "GFLOP/s", "fma_peak", peak.value, f32[d] / peak.value});
        rows.push_back({name, "bf16", shape, b16[d], "GFLOP/s", "same f32", f32[d], b16[d] / f32[d]});
      }
    }

    // 3a. ResNet-20 training step
    {
      mg::manual_seed(0);
      mg::nn::models::ResNet net(mg::nn::models::ResNetConfig::cifar(20, 1, 10));
      const mg::Tensor x = mg::randn({resnet_batch, 1, 28, 28});
      const mg::Tensor y = mg::randint(0, 10, {resnet_batch});
      const double t = bench::seconds_best_of(step_reps, [&] {
        mg::Tensor loss = mg::cross_entropy(net(x), y);
        loss.backward();
        sgd_update(net, 0.01);
      });
      const double flops = 3.0 * resnet20_forward_flops() * double(resnet_batch);
      const std::string shape = "b" + std::to_string(resnet_batch) + " 1x28x28";
      rows.push_back({"resnet20_step", "f32", shape, t * 1e3, "ms/step", "", 0, 0});
      rows.push_back({"resnet20_step", "f32", shape, double(resnet_batch) / t, "img/s", "", 0, 0});
      rows.push_back({"resnet20_step", "f32", shape, flops / t / 1e9, "GFLOP/s", "fma_peak", peak.value,
                      flops / t / 1e9 / peak.value});
    }

    // 3b. BERT-mini MLM training step
    {
      mg::manual_seed(0);
      const int64_t vocab = 8192;
      auto config = mg::nn::models::BertConfig::mini(vocab);
      mg::nn::models::BertForMaskedLM mlm(config);
      const mg::Tensor ids = mg::randint(0, vocab, {bert_batch, bert_seq});
      const mg::Tensor target = mg::randint(0, vocab, {bert_batch * bert_seq});
      const double t = bench::seconds_best_of(step_reps, [&] {
        mg::Tensor logits = mlm.forward(ids);  // [B, L, V]
        mg::Tensor loss = mg::cross_entropy(logits.reshape({bert_batch * bert_seq, vocab}), target);
        loss.backward();
        sgd_update(mlm, 1e-4);
      });
      const double tokens = double(bert_batch * bert_seq);
      const double flops = 3.0 * tokens * bert_forward_flops(config.hidden, config.intermediate, config.layers, vocab, bert_seq);
      const std::string shape = "b" + std::to_string(bert_batch) + " L" + std::to_string(bert_seq) + " V8192";
      rows.push_back({"bert_mini_mlm_step", "f32", shape, t * 1e3, "ms/step", "", 0, 0});
      rows.push_back({"bert_mini_mlm_step", "f32", shape, tokens / t, "tok/s", "", 0, 0});
      rows.push_back({"bert_mini_mlm_step", "f32", shape, flops / t / 1e9, "GFLOP/s", "fma_peak", peak.value,
                      flops / t / 1e9 / peak.value});
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_nn: %s\n", e.what());
    return 1;
  }

  bench::print_table(rows);
  if (!cfg.json.empty() && !bench::write_json(cfg.json, rows)) {
    std::fprintf(stderr, "bench_nn: cannot write %s\n", cfg.json.c_str());
    return 1;
  }
  return 0;
}
