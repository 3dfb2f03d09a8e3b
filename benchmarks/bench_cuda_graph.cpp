// bench_cuda_graph: what capturing a whole training step into a CUDA graph buys (docs/cuda.md,
// "CUDA graphs"). Small models are where the host's launch overhead shows: ResNet-20 on 28x28
// images (batch 128) and BERT-mini sequence classification (batch 32, 64 tokens), both O2 f16 with
// dynamic loss scaling through amp::GradScaler. Each model runs the same step eagerly and as
// replays of cuda::CapturedStep on synthetic batches already on the GPU; the time per step is the
// wall time of N steps ended by a device synchronisation. Reports the graph's ms/step against the
// eager ms/step (ratio < 1: the graph is faster). Without a GPU it exits with 77 (skipped).
#include <chrono>
#include <cstdio>
#include <exception>
#include <memory>

#include "amp/grad_scaler.h"
#include "amp/initialize.h"
#include "bench_common.h"
#include "core/factory.h"
#include "cuda/cuda.h"
#include "cuda/host/captured_step.h"
#include "nn/models/bert.h"
#include "nn/models/resnet.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "optim/adam.h"
#include "optim/sgd.h"

using namespace mg;
using bench::Row;

namespace {

// Milliseconds per step over `steps` calls of `step`, after the device has finished.
double ms_per_step(int steps, const std::function<void()>& step) {
  cuda::synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  cuda::synchronize();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / steps;
}

// One model: the eager step timed, then the same step captured and its replays timed.
// step(in) runs one training step on the inputs and returns {loss}.
Row compare(const std::string& name, const std::string& shape, const Tensors& batch, int steps,
            const std::function<Tensors(const Tensors&)>& step, std::vector<GraphParticipant*> participants) {
  for (int i = 0; i < 3; ++i) step(batch);  // state, cuDNN autotuning, the allocator's cache
  const double eager = ms_per_step(steps, [&] { step(batch); });
  cuda::CapturedStep captured(step, std::move(participants), {.device = Device::cuda(0), .warmup_steps = 1});
  for (int i = 0; i < 3; ++i) captured.run(batch);  // a warm-up step, the capture, a replay
  const double graph = ms_per_step(steps, [&] { captured.run(batch); });
  const double loss = captured.run(batch)[0].item<double>();
  std::printf("cuda graph: %s (%s): eager %.3f ms/step, graph %.3f ms/step (%.2fx faster), %zu graph nodes, "
              "last loss %.4f\n",
              name.c_str(), shape.c_str(), eager, graph, eager / graph, captured.graph().num_nodes(), loss);
  Row r{name + " step", "f16", shape};
  r.value = graph;
  r.unit = "ms/step (graph)";
  r.reference = "eager ms/step";
  r.reference_value = eager;
  r.ratio = graph / eager;
  return r;
}

Row resnet(int steps) {
  manual_seed(1);
  auto model = std::make_shared<nn::models::ResNet>(nn::models::ResNetConfig::cifar(20, 1, 10));
  model->to(Device::cuda(0));
  optim::SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9, .nesterov = true, .weight_decay = 5e-4});
  amp::initialize(model, opt, {.opt_level = "O2", .dtype = "f16", .verbosity = 0, .device = Device::cuda(0)});
  opt.set_step_gate(nullptr);  // amp::GradScaler decides on the device
  amp::GradScaler scaler;
  const Tensors batch = {randn({128, 1, 28, 28}).to(Device::cuda(0)), randint(0, 10, {128}).to(Device::cuda(0))};
  auto step = [&](const Tensors& in) {
    opt.zero_grad();
    const Tensor loss = cross_entropy(amp::forward(*model, in[0]), in[1]);
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    return Tensors{loss};
  };
  const Row r = compare("ResNet-20 O2", "batch 128 x 1x28x28", batch, steps, step, {&opt, &scaler});
  amp::reset();
  return r;
}

Row bert(int steps) {
  manual_seed(2);
  auto model = std::make_shared<nn::models::BertForSequenceClassification>(nn::models::BertConfig::mini(8192), 2);
  model->to(Device::cuda(0));
  optim::AdamW opt(model->parameters(), {.lr = 3e-4, .weight_decay = 0.01});
  amp::initialize(model, opt, {.opt_level = "O2", .dtype = "f16", .verbosity = 0, .device = Device::cuda(0)});
  opt.set_step_gate(nullptr);
  amp::GradScaler scaler;
  const Tensors batch = {randint(0, 8192, {32, 64}).to(Device::cuda(0)), randint(0, 2, {32}).to(Device::cuda(0))};
  auto step = [&](const Tensors& in) {
    opt.zero_grad();
    const Tensor loss = cross_entropy(amp::forward(*model, in[0]), in[1]);  // dropout inside: graph-safe
    scaler.scale(loss).backward();
    scaler.unscale_(opt);
    scaler.step(opt);
    scaler.update();
    return Tensors{loss};
  };
  const Row r = compare("BERT-mini O2", "batch 32 x 64 tokens", batch, steps, step, {&opt, &scaler});
  amp::reset();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Config cfg;
  if (const int rc = bench::parse_args(argc, argv, "bench_cuda_graph", cfg); rc >= 0) return rc;
  if (!cuda::is_available()) {
    std::printf("bench_cuda_graph: no GPU (%s): skipped\n", cuda::unavailable_reason().c_str());
    return 77;
  }
  bench::print_load_average();
  const int steps = cfg.quick ? 10 : 200;
  std::vector<Row> rows;
  bool failed = false;
  for (Row (*model)(int) : {resnet, bert}) {
    try {  // one model failing (a refused capture, say) leaves the other measured
      rows.push_back(model(steps));
    } catch (const std::exception& e) {
      std::fflush(stdout);
      std::fprintf(stderr, "bench_cuda_graph: %s\n", e.what());
      amp::reset();
      failed = true;
    }
  }
  bench::print_table(rows);
  if (!cfg.json.empty() && !bench::write_json(cfg.json, rows)) {
    std::fprintf(stderr, "bench_cuda_graph: cannot write %s\n", cfg.json.c_str());
    return 1;
  }
  return failed ? 1 : 0;
}
