// The accuracy targets of the training examples, on the full data with the default schedules
// (labelled slow: hours on a 2-core CPU; not in the default CI run — MG_TEST_SLOW=1 scripts/test
// or `ctest -L slow` runs them). Each run's wall time is printed.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <string>

#include "examples_common/examples_test_util.h"
#include "examples_smoke/smoke_util.h"

using namespace mg::test;

namespace {

// Runs train_resnet with its defaults (ResNet-20, 10 epochs, batch 128) at a level; returns the
// final test accuracy.
double resnet_accuracy(const TempDir& dir, const std::string& level, const std::string& dtype) {
  const std::string metrics = dir.file("resnet_" + level + "_" + dtype + ".jsonl");
  const auto start = std::chrono::steady_clock::now();
  const RunResult r = run_program(MG_TRAIN_RESNET, "--opt-level " + level + " --dtype " + dtype + " --metrics " + metrics);
  const double minutes = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / 60;
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  const double acc = read_metrics(metrics).evals.back().at("test_accuracy").get<double>();
  std::printf("train_resnet %s %s: test accuracy %.4f after 10 epochs, %.1f minutes\n", level.c_str(), dtype.c_str(), acc,
              minutes);
  return acc;
}

}  // namespace

TEST_CASE("train_resnet reaches 91% test accuracy within 10 epochs at O0, O1 bf16 and O1 f16, and O2 within 0.5 points of O0",
          "[examples][slow]") {
  TempDir dir;
  const double o0 = resnet_accuracy(dir, "O0", "f16");
  CHECK(o0 >= 0.91);
  CHECK(resnet_accuracy(dir, "O1", "bf16") >= 0.91);
  CHECK(resnet_accuracy(dir, "O1", "f16") >= 0.91);
  const double o2 = resnet_accuracy(dir, "O2", "f16");
  CHECK(std::abs(o2 - o0) <= 0.005);
}
