// The examples' device paths that a CPU can check: --cuda-graph's GradScaler travels in the
// checkpoint as amp's loss scaler 0 (amp_checkpoint_state), so a resumed run goes on from its loss
// scale and skip counts with or without --cuda-graph; and ([gpu], [gpu2]) --device makes the
// training device current, which a CUDA graph's capture and replay rely on.
#include <catch2/catch.hpp>

#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "amp/grad_scaler.h"
#include "amp/initialize.h"
#include "core/factory.h"
#include "cuda/cuda.h"
#include "data/loader.h"
#include "data/tensor_dataset.h"
#include "examples/common/cuda_graph.h"
#include "examples/common/flags.h"
#include "examples/common/run_history.h"
#include "examples/common/training_run.h"
#include "examples_common/examples_test_util.h"
#include "io/checkpoint.h"
#include "nn/linear.h"
#include "optim/lr_scheduler.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace mg;
using namespace mg::example;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// amp initialized at O1 on a small model (f16: dynamic scaling; bf16: a static scale of 1), reset
// at the end of the test.
struct AmpRun {
  explicit AmpRun(const std::string& dtype, Device device = Device::cpu()) {
    manual_seed(3);
    model = std::make_shared<nn::Linear>(nn::LinearOptions{.in = 4, .out = 2});
    model->to(device);
    opt = std::make_unique<optim::SGD>(model->parameters(), optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
    amp::initialize(model, *opt, {.opt_level = "O1", .dtype = dtype, .verbosity = 0, .device = device});
  }
  ~AmpRun() { amp::reset(); }
  std::shared_ptr<nn::Linear> model;
  std::unique_ptr<optim::SGD> opt;
};

// One iteration of `scaler` on a parameter of its own whose (scaled) gradient is `g`.
void iterate(amp::GradScaler& scaler, Device device, float g) {
  Tensor w = ones({2}, {.device = device}).requires_grad_();
  optim::SGD opt(Tensors{w}, {.lr = 0.1});
  (void)scaler.scale(ones({}, {.device = device}));  // on CUDA: the scaler's state moves to the device
  w.set_grad(full({2}, double(g), {.device = device}));
  scaler.step(opt);
  scaler.update();
}

void check_same(const StateDict& a, const StateDict& b) {
  CHECK(a.ints == b.ints);
  CHECK(a.floats == b.floats);
}

void check_round_trip(Device device) {
  AmpRun run("f16", device);
  amp::GradScaler scaler = cuda_graph_scaler();
  REQUIRE(scaler.is_enabled());
  iterate(scaler, device, kInf);  // skipped: 65536 -> 32768
  iterate(scaler, device, 1.0f);
  REQUIRE(scaler.get_scale() == 32768.0);
  REQUIRE(scaler.skipped_iterations() == 1);

  const StateDict eager = amp::state_dict();  // amp's own scaler, untouched by the graph step
  const StateDict s = amp_checkpoint_state(&scaler);
  CHECK(s.strings.at("opt_level") == "O1");
  CHECK(s.floats.at("loss_scaler.0.scale") == 32768.0);
  CHECK(s.ints.at("loss_scaler.0.skipped") == 1);
  CHECK(s.ints.at("loss_scaler.0.iterations") == 2);
  check_same(amp_checkpoint_state(nullptr), eager);  // without --cuda-graph: amp's state as it is

  // A --cuda-graph run resumes with the saved scale and counters ...
  amp::GradScaler resumed = cuda_graph_scaler();
  restore_amp_checkpoint_state(s, &resumed);
  check_same(resumed.state_dict(), scaler.state_dict());
  iterate(resumed, device, kInf);  // and goes on from them
  CHECK(resumed.get_scale() == 16384.0);
  CHECK(resumed.skipped_iterations() == 2);
  // ... and so does an eager run (amp's scaler 0 takes the graph scaler's state).
  CHECK(amp::loss_scale() == 32768.0);
  CHECK(amp::loss_scaler().skipped_iterations() == 1);

  // An eager run's checkpoint gives a --cuda-graph run amp's scale.
  amp::GradScaler from_eager = cuda_graph_scaler();
  restore_amp_checkpoint_state(eager, &from_eager);
  CHECK(from_eager.get_scale() == 65536.0);
  CHECK(from_eager.skipped_iterations() == 0);
}

}  // namespace

TEST_CASE("review: the --cuda-graph scaler is saved as amp's loss scaler 0 and restored from it", "[examples][checkpoint]") {
  check_round_trip(Device::cpu());
}

TEST_CASE("review: a disabled --cuda-graph scaler (bf16's static scale 1) leaves amp's state alone", "[examples][checkpoint]") {
  AmpRun run("bf16");
  amp::GradScaler scaler = cuda_graph_scaler();
  REQUIRE(!scaler.is_enabled());
  const StateDict s = amp_checkpoint_state(&scaler);
  check_same(s, amp::state_dict());
  restore_amp_checkpoint_state(s, &scaler);
  CHECK(!scaler.is_enabled());
  CHECK(amp::loss_scale() == 1.0);
}

TEST_CASE("review: TrainingState writes and restores the --cuda-graph scaler through a checkpoint file", "[examples][checkpoint]") {
  test::TempDir dir;
  AmpRun run("f16");
  auto data = std::make_shared<data::TensorDataset>(
      std::vector<std::pair<std::string, Tensor>>{{"input", zeros({8, 4})}, {"target", zeros({8}, {.dtype = DType::I64})}});
  data::DataLoader loader(data, {.batch_size = 2});
  optim::WarmupCosineLR sched(*run.opt, {.warmup_steps = 1, .total_steps = 4});
  RunHistory history;
  amp::GradScaler scaler = cuda_graph_scaler();
  iterate(scaler, Device::cpu(), kInf);
  TrainingState{*run.model, *run.opt, sched, loader, history, &scaler}.save(dir.file("c.ck"), {});

  amp::GradScaler resumed = cuda_graph_scaler();
  TrainingState{*run.model, *run.opt, sched, loader, history, &resumed}.restore(io::load_checkpoint(dir.file("c.ck")));
  CHECK(resumed.get_scale() == 32768.0);
  CHECK(resumed.skipped_iterations() == 1);
  check_same(resumed.state_dict(), scaler.state_dict());
}

TEST_CASE("review: the --cuda-graph scaler's device state is saved and restored", "[examples][checkpoint][gpu]") {
  check_round_trip(Device::cuda(0));
}

TEST_CASE("review: --device cuda makes cuda:0 the current device", "[examples][gpu]") {
  Flags f("prog", "test");
  add_amp_flags(f);
  const char* argv[] = {"prog", "--device", "cuda"};
  f.parse(3, argv);
  CHECK(training_device(f) == Device::cuda(0));
  CHECK(cuda::current_device() == 0);
}

// CapturedStep captures on a stream of the current device: with cuda:1 current device 0, the
// step's kernels (on cuda:1) would not be captured at all.
TEST_CASE("review: --device cuda:1 makes cuda:1 the current device", "[examples][gpu2]") {
  Flags f("prog", "test");
  add_amp_flags(f);
  const char* argv[] = {"prog", "--device", "cuda:1"};
  f.parse(3, argv);
  cuda::set_device(0);
  CHECK(training_device(f) == Device::cuda(1));
  CHECK(cuda::current_device() == 1);
  cuda::set_device(0);
}

TEST_CASE("review: --device cuda under mixgrad-run is cuda:LOCAL_RANK, and cuda:N and cpu stay as given",
          "[examples][flags]") {
  // No GPU needed: the parsing half of training_device (the other half checks the device).
  CHECK(parse_training_device("p", "cuda", nullptr) == Device::cuda(0));
  CHECK(parse_training_device("p", "cuda", "") == Device::cuda(0));
  CHECK(parse_training_device("p", "cuda", "3") == Device::cuda(3));    // rank 3 of a node: its own GPU
  CHECK(parse_training_device("p", "cuda:1", "3") == Device::cuda(1));  // explicit: kept
  CHECK(parse_training_device("p", "cpu", "3") == Device::cpu());
  MG_REQUIRE_ERROR(parse_training_device("p", "cuda", "x1"), "LOCAL_RANK is 'x1', not a device index");
  MG_REQUIRE_ERROR(parse_training_device("p", "cuda", "-1"), "not a device index");
  MG_REQUIRE_ERROR(parse_training_device("p", "tpu", nullptr), "hint: use cpu, cuda or cuda:N");
}
