// Checkpoints across devices ([gpu]; each case skips without a device). A checkpoint written from
// CUDA tensors — an f16 model with f32 master weights and SGD momentum, as amp's O2 keeps them —
// reads back on the CPU with the saved bits, restores into a CPU model and optimizer, and restores
// into a CUDA model and optimizer whose further steps equal the uninterrupted run's bit for bit
// (the examples' --resume on --device cuda).
#include <catch2/catch.hpp>

#include <memory>
#include <string>
#include <vector>

#include "core/factory.h"
#include "cuda/cuda_test_util.h"
#include "io/checkpoint.h"
#include "io_test_util.h"
#include "nn/activation.h"
#include "nn/container.h"
#include "nn/linear.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace mg;
using namespace mg::test;

namespace {

struct Run {
  std::shared_ptr<nn::Sequential> model;
  std::unique_ptr<optim::SGD> opt;
};

// The same initial weights on every call: an f16 MLP on `device` with SGD keeping f32 masters.
Run make_run(Device device) {
  manual_seed(11);
  std::vector<std::shared_ptr<nn::UnaryModule>> layers{nn::make<nn::Linear>({.in = 8, .out = 16}), nn::make<nn::ReLU>(),
                                                       nn::make<nn::Linear>({.in = 16, .out = 4})};
  Run r;
  r.model = std::make_shared<nn::Sequential>(layers);
  r.model->to(DType::F16);
  r.model->to(device);
  r.opt = std::make_unique<optim::SGD>(r.model->parameters(), optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
  r.opt->use_master_weights();
  return r;
}

// Training step k on a batch that depends on k only (made on the CPU, moved to `device`).
void step(Run& r, Device device, int k) {
  Generator g(1000 + uint64_t(k));
  const Tensor x = randn({16, 8}, {}, &g).to(DType::F16).to(device);
  std::vector<int64_t> labels(16);
  for (int i = 0; i < 16; ++i) labels[std::size_t(i)] = (i + k) % 4;
  const Tensor y = from_vector(labels, {16}, {.device = device});
  r.opt->zero_grad();
  cross_entropy(r.model->forward(x).to(DType::F32), y).backward();
  r.opt->step();
}

// Every value the run's next steps depend on: model weights, f32 masters, momentum buffers.
std::vector<double> everything(const Run& r) {
  std::vector<double> out;
  auto add = [&](const Tensor& t) {
    const std::vector<double> v = values(t);
    out.insert(out.end(), v.begin(), v.end());
  };
  for (const auto& [name, t] : r.model->state_dict()) add(t);
  for (const Tensor& p : r.opt->parameters()) {
    add(p);  // the masters
    if (const optim::ParamState* s = r.opt->state(p)) add(s->buffers.at("momentum_buffer"));
  }
  return out;
}

}  // namespace

TEST_CASE("review: a checkpoint of an O2 model and optimizer on CUDA restores on the CPU and resumes on CUDA bit for bit",
          "[io][checkpoint][gpu]") {
  const Device cpu = Device::cpu();
  TempDir dir;
  Run a = make_run(gpu());
  for (int k = 0; k < 3; ++k) step(a, gpu(), k);
  const std::vector<double> at_save = everything(a);
  io::save_checkpoint(dir.file("c.ck"), *a.model, {{"optimizer", a.opt->state_dict()}});
  for (int k = 3; k < 5; ++k) step(a, gpu(), k);

  const io::Checkpoint ck = io::load_checkpoint(dir.file("c.ck"));
  for (const auto& [name, t] : ck.model_state()) CHECK(t.device() == cpu);

  // On the CPU: the saved bits, masters and momentum included.
  Run c = make_run(cpu);
  ck.restore_model(*c.model);
  c.opt->load_state_dict(ck.state("optimizer"));
  CHECK(everything(c) == at_save);
  for (const Tensor& p : c.opt->parameters()) CHECK(p.device() == cpu);

  // Back on the GPU (the optimizer's state goes to its parameters' device, its masters too), and
  // the resumed steps are the uninterrupted run's.
  Run b = make_run(gpu());
  ck.restore_model(*b.model);
  b.opt->load_state_dict(ck.state("optimizer"));
  CHECK(everything(b) == at_save);
  for (const Tensor& p : b.opt->parameters()) {
    CHECK(p.device() == gpu());
    if (const optim::ParamState* s = b.opt->state(p)) CHECK(s->buffers.at("momentum_buffer").device() == gpu());
  }
  for (int k = 3; k < 5; ++k) step(b, gpu(), k);
  CHECK(everything(b) == everything(a));
  CHECK(cuda::take_pending_error().empty());
}
