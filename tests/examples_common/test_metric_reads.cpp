// When the training examples read a step's results back (--read-metrics): the policy of
// metrics_read_at_log_points for each device and flag combination, its refusals, and the
// DeviceTally that holds the sums in between (on the CPU; the same ops run on a GPU). The
// examples' whole runs in both modes are compared in tests/examples_smoke.
#include <catch2/catch.hpp>

#include <string>
#include <vector>

#include "core/factory.h"
#include "examples/common/cuda_graph.h"
#include "examples/common/device_tally.h"
#include "examples/common/training_run.h"
#include "test_util.h"

using namespace mg;
using namespace mg::example;

namespace {

Flags parsed(std::vector<std::string> args) {
  Flags f("train_resnet", "test");
  add_run_flags(f, 10, "records", "curves");
  add_cuda_graph_flag(f);
  std::vector<const char*> argv{"train_resnet"};
  for (const std::string& a : args) argv.push_back(a.c_str());
  f.parse(int(argv.size()), argv.data());
  return f;
}

}  // namespace

TEST_CASE("metric reads: auto reads every step on the CPU and at logging points on CUDA", "[examples][metrics]") {
  const Device cpu = Device::cpu(), gpu = Device::cuda(0);
  CHECK_FALSE(metrics_read_at_log_points(parsed({}), cpu));
  CHECK(metrics_read_at_log_points(parsed({}), gpu));
  // Tracing overflows needs each step's skip decision: auto reads every step then.
  CHECK_FALSE(metrics_read_at_log_points(parsed({"--trace-overflow"}), gpu));
  // Explicit choices win on either device.
  CHECK(metrics_read_at_log_points(parsed({"--read-metrics", "log"}), cpu));
  CHECK_FALSE(metrics_read_at_log_points(parsed({"--read-metrics", "step"}), gpu));
  // A replayed CUDA graph reads nothing per step.
  CHECK(metrics_read_at_log_points(parsed({"--cuda-graph"}), gpu));
}

TEST_CASE("metric reads: combinations that cannot work are refused with a hint", "[examples][metrics]") {
  MG_REQUIRE_ERROR(metrics_read_at_log_points(parsed({"--read-metrics", "log", "--trace-overflow"}), Device::cpu()),
                   "--read-metrics log cannot be combined with --trace-overflow");
  MG_REQUIRE_ERROR(metrics_read_at_log_points(parsed({"--read-metrics", "log", "--trace-overflow"}), Device::cpu()),
                   "hint:");
  MG_REQUIRE_ERROR(metrics_read_at_log_points(parsed({"--read-metrics", "step", "--cuda-graph"}), Device::cuda(0)),
                   "--read-metrics step cannot be combined with --cuda-graph");
  CHECK_THROWS(parsed({"--read-metrics", "never"}));
}

TEST_CASE("DeviceTally keeps running sums of loss x examples in f64 and right predictions", "[examples][metrics]") {
  DeviceTally tally(Device::cpu());
  tally.reset(0, 0);
  const std::vector<float> losses{2.5f, 0.1f, 1.0f / 3.0f};
  const std::vector<int64_t> right{3, 0, 7}, sizes{8, 8, 5};
  double want = 0;
  for (std::size_t i = 0; i < losses.size(); ++i) {
    tally.add(full({}, losses[i]), full({}, double(right[i]), {.dtype = DType::I64}), sizes[i]);
    want += double(losses[i]) * double(sizes[i]);  // each product exact in f64, summed in step order
  }
  DeviceTally::Totals t = tally.read();
  CHECK(t.loss_sum == want);
  CHECK(t.correct == 10);
  CHECK(t.last_loss == double(1.0f / 3.0f));  // the f32 loss widened exactly
  CHECK(t.steps == 3);
  CHECK(t.predictions == 21);  // one per example when not given
  // A read does not restart the sums (so logging points do not change how they add up), only the
  // count of steps since the previous read.
  tally.add(full({}, 0.75f), full({}, 1.0, {.dtype = DType::I64}), 8);
  want += 0.75 * 8;
  t = tally.read();
  CHECK(t.loss_sum == want);
  CHECK(t.correct == 11);
  CHECK(t.steps == 1);
  CHECK(t.predictions == 8);
  // A reset sets them (a resumed epoch's saved sums); a [1]-shaped f64 loss and an i32 count are
  // accepted too.
  tally.reset(want, 11);
  tally.add(full({1}, 0.1, {.dtype = DType::F64}), full({1}, 2.0, {.dtype = DType::I32}), 4, /*predictions=*/3);
  t = tally.read();
  CHECK(t.loss_sum == want + 0.1 * 4);
  CHECK(t.correct == 13);
  CHECK(t.last_loss == 0.1);
  CHECK(t.steps == 1);
  CHECK(t.predictions == 3);
  tally.reset(0, 0);
  t = tally.read();
  CHECK(t.loss_sum == 0);
  CHECK(t.correct == 0);
  CHECK(t.steps == 0);
  CHECK(t.predictions == 0);
}
