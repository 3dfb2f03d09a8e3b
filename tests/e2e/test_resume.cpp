// End to end on real data (Fashion-MNIST from the Debian package): a small CNN with batch norm and
// dropout, SGD with nesterov momentum and a warmup-cosine schedule, a shuffling, augmenting
// DataLoader — trained 10 steps straight, and trained 5 steps, checkpointed (model, optimizer,
// scheduler, loader position, RNG, step counter, and the GradScaler in the f16 variant), rebuilt
// from different random weights, restored and trained 5 more steps. The losses and final weights
// must be bit-identical: resume is exact on the CPU.
#include <catch2/catch.hpp>

#include <cstdio>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "amp/grad_scaler.h"
#include "core/factory.h"
#include "core/state_dict.h"
#include "data/fashion_mnist.h"
#include "data/loader.h"
#include "io/checkpoint.h"
#include "nn/nn.h"
#include "optim/optim.h"
#include "test_util.h"

using namespace mg;

namespace {

struct SmallCnn : nn::Module {
  SmallCnn() : Module("SmallCnn") {
    body = register_module("body", std::make_shared<nn::Sequential>(std::vector<std::shared_ptr<nn::UnaryModule>>{
        nn::make<nn::Conv2d>({.in = 1, .out = 4, .kernel = 3, .padding = 1, .bias = false}),
        nn::make<nn::BatchNorm2d>({.features = 4}), nn::make<nn::ReLU>(), nn::make<nn::MaxPool2d>({.kernel = 2}),
        nn::make<nn::Flatten>(), nn::make<nn::Dropout>({.p = 0.2}),
        nn::make<nn::Linear>({.in = 4 * 14 * 14, .out = 10})}));
  }
  std::shared_ptr<nn::Sequential> body;
};

// Everything a training run owns, built from a seed for the initial weights.
struct Run {
  explicit Run(uint64_t init_seed, bool f16)
      : f16(f16),
        model((manual_seed(init_seed), std::make_shared<SmallCnn>())),
        opt(model->parameters(), {.lr = 0.05, .momentum = 0.9, .nesterov = true, .weight_decay = 5e-4}),
        sched(opt, {.warmup_steps = 3, .total_steps = 10}),
        loader(std::make_shared<data::FashionMnist>(data::FashionMnistOptions{.augment = true}),
               {.batch_size = 32, .shuffle = true, .seed = 7}),
        scaler({.init_scale = 1024, .growth_interval = 2, .enabled = f16}) {}

  // One training step; returns the loss.
  float step() {
    std::optional<data::Batch> batch = loader.next();
    REQUIRE(batch.has_value());
    opt.zero_grad();
    Tensor loss;
    {
      amp::Autocast autocast({.dtype = DType::F16, .enabled = f16});
      loss = cross_entropy(model->body->forward(batch->at("input")), batch->at("target"));
    }
    scaler.scale(loss).backward();
    scaler.step(opt);
    scaler.update();
    sched.step();
    ++steps;
    return loss.item<float>();
  }

  io::NamedStates states() const {
    StateDict train;
    train.ints["steps"] = steps;
    return {{"optimizer", opt.state_dict()}, {"scheduler", sched.state_dict()}, {"loader", loader.state()},
            {"rng", generator_state(default_generator())}, {"amp", scaler.state_dict()}, {"train", train}};
  }
  void restore(const io::Checkpoint& ck) {
    ck.restore_model(*model);
    opt.load_state_dict(ck.state("optimizer"));
    sched.load_state_dict(ck.state("scheduler"));
    loader.load_state(ck.state("loader"));
    load_generator_state(default_generator(), ck.state("rng"));
    scaler.load_state_dict(ck.state("amp"));
    steps = ck.state("train").int_at("train", "steps");
  }

  bool f16;
  std::shared_ptr<SmallCnn> model;
  optim::SGD opt;
  optim::WarmupCosineLR sched;
  data::DataLoader loader;
  amp::GradScaler scaler;
  int64_t steps = 0;
};

}  // namespace

TEST_CASE("training resumes bit-identically from a checkpoint (f32 and f16 autocast + GradScaler)", "[e2e][io][optim][data]") {
  for (bool f16 : {false, true}) {
    DYNAMIC_SECTION((f16 ? "f16 autocast" : "f32")) {
      std::vector<float> straight;
      nn::NamedTensors final_straight;
      double scale_straight = 0;
      {
        Run r(1, f16);
        manual_seed(100);  // the dropout stream
        for (int i = 0; i < 10; ++i) straight.push_back(r.step());
        final_straight = r.model->state_dict();
        scale_straight = r.scaler.get_scale();
      }
      const std::string path =
          (std::filesystem::temp_directory_path() / ("mg-test-resume-" + std::string(f16 ? "f16" : "f32") + ".ckpt")).string();
      {
        Run r(1, f16);
        manual_seed(100);
        for (int i = 0; i < 5; ++i) REQUIRE(r.step() == straight[std::size_t(i)]);
        io::save_checkpoint(path, *r.model, r.states());
      }
      Run resumed(999, f16);  // different initial weights: everything must come from the file
      manual_seed(12345);     // and a different RNG position
      resumed.restore(io::load_checkpoint(path));
      std::remove(path.c_str());
      CHECK(resumed.steps == 5);
      for (int i = 5; i < 10; ++i) CHECK(resumed.step() == straight[std::size_t(i)]);
      const nn::NamedTensors final_resumed = resumed.model->state_dict();
      REQUIRE(final_resumed.size() == final_straight.size());
      for (std::size_t k = 0; k < final_resumed.size(); ++k) {
        INFO(final_resumed[k].first);
        CHECK(test::values(final_resumed[k].second) == test::values(final_straight[k].second));
      }
      CHECK(resumed.scaler.get_scale() == scale_straight);
      // The loss went down over the 10 steps (the run trains).
      CHECK(straight.back() < straight.front());
    }
  }
}
