// CUDA graph refusals that need no GPU, on every machine: the graph participants (optimizer,
// GradScaler) say why they cannot be captured, the capture API without a device, and
// CapturedStep's checks of its options.
#include <catch2/catch.hpp>

#include "amp/grad_scaler.h"
#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "cuda/cuda.h"
#include "cuda/graph.h"
#include "cuda/host/captured_step.h"
#include "optim/lamb.h"
#include "optim/sgd.h"
#include "test_util.h"

using namespace mg;

namespace {
// A user's own optimizer: plain gradient descent through public ops, no fused device step.
class PlainDescent final : public optim::Optimizer {
 public:
  explicit PlainDescent(const Tensors& params) : Optimizer("PlainDescent", {{"lr", 0.1}}) { init_groups({{params}}); }

 protected:
  void check_options(const optim::OptionMap&) const override {}
  void step_group(optim::ParamGroup& group) override {
    NoGradGuard no_grad;
    for (const Work& w : collect(group)) Tensor(w.param).sub_(w.grad * group.lr());
  }
  std::vector<std::string> buffer_names() const override { return {}; }
};
}  // namespace

TEST_CASE("graph participants: an optimizer that cannot be captured says why", "[cuda][graph]") {
  const Tensor w = zeros({3}).requires_grad_();
  optim::SGD sgd({w}, {.lr = 0.1});
  sgd.set_step_gate([](optim::Optimizer&) { return true; });
  MG_REQUIRE_ERROR(sgd.graph_capture_begin(), "SGD: cannot be captured into a CUDA graph while it has a step gate");
  sgd.set_step_gate(nullptr);
  MG_REQUIRE_ERROR(sgd.graph_capture_begin(),
                   "every parameter of a group must be on one CUDA device");
  optim::LAMB lamb({w});  // capturable on a device; its CPU parameter is what it refuses here
  MG_REQUIRE_ERROR(lamb.graph_capture_begin(), "LAMB: cannot be captured into a CUDA graph: parameter 0 of group 0");
  PlainDescent plain({w});
  MG_REQUIRE_ERROR(plain.graph_capture_begin(), "PlainDescent: has no fused device step");
  MG_REQUIRE_ERROR(sgd.graph_replay_check(), "replaying a CUDA graph this optimizer was not captured into");
  // An abandoned capture changes nothing the host can see.
  sgd.graph_capture_end(false);
  CHECK(sgd.step_count() == 0);
}

TEST_CASE("graph participants: a GradScaler that cannot be captured says why", "[cuda][graph]") {
  amp::GradScaler scaler;
  MG_REQUIRE_ERROR(scaler.graph_capture_begin(), "GradScaler: cannot be captured into a CUDA graph before its state is on the device");
  MG_REQUIRE_ERROR(scaler.graph_replay_check(), "replaying a CUDA graph this scaler was not captured into");
  // Disabled (bf16, O0): a pass-through with nothing to capture.
  amp::GradScaler off({.enabled = false});
  off.graph_capture_begin();
  off.graph_capture_end(true);
  off.graph_replay_check();
  off.graph_replay_prepare();
}

TEST_CASE("CUDA graph API without a usable device: clear errors", "[cuda][graph]") {
  if (cuda::is_available()) return;  // the [gpu] cases of test_cuda_graph.cpp cover the device
  cuda::Graph graph;
  CHECK_FALSE(graph.ready());
  CHECK_FALSE(cuda::is_capturing());
  MG_REQUIRE_ERROR(graph.replay(), "");
  MG_REQUIRE_ERROR(([&] { cuda::GraphCapture capture(graph); }()), "");
  CHECK_FALSE(cuda::is_capturing());
  const auto step = [](const Tensors& in) { return in; };
  MG_REQUIRE_ERROR(cuda::CapturedStep(step, {}, {.device = Device::cpu()}),
                   "CapturedStep: CUDA graphs need a CUDA device, got cpu");
  MG_REQUIRE_ERROR(cuda::CapturedStep(step, {}, {.device = Device::cuda(0)}), "cuda:0");
}
