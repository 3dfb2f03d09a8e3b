// Smoke runs of the train_resnet example with a tiny configuration (ResNet-8, 10 steps per epoch):
// it trains (the loss falls), writes a metrics file that parses and a well-formed SVG plot,
// --stop-after + --resume continues bit-identically, and bad input gives a clear message and a
// non-zero exit. Built only with examples (the binary's path comes from CMake).
#include <catch2/catch.hpp>

#include <string>

#include "examples_common/examples_test_util.h"
#include "examples_smoke/smoke_util.h"
#include "cuda/cuda.h"

using namespace mg;
using namespace mg::test;

namespace {
const std::string kTiny =
    " --depth 8 --epochs 2 --batch-size 32 --train-examples 320 --eval-examples 500 --log-every 1 --threads 2";
}

TEST_CASE("train_resnet: a tiny run trains and writes metrics and a plot", "[examples][smoke]") {
  TempDir dir;
  const RunResult r = run_program(MG_TRAIN_RESNET, kTiny + " --metrics " + dir.file("m.jsonl") + " --plot " +
                                                       dir.file("p.svg") + " --precision-plan");
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Matchers::Contains("precision plan: ResNet at O1"));
  CHECK_THAT(r.output, Catch::Matchers::Contains("final test accuracy"));
  const Metrics m = read_metrics(dir.file("m.jsonl"));
  REQUIRE(m.steps.size() == 20);
  REQUIRE(m.evals.size() == 2);
  // The loss falls: mean of the last 5 steps below the first 5 (measured 2.35 -> 2.0 at O1 bf16).
  CHECK(mean_of(m.steps, "loss", 15, 20) < mean_of(m.steps, "loss", 0, 5) - 0.1);
  CHECK(m.evals.back().at("test_accuracy").get<double>() > 0.15);  // 10 classes: chance is 0.1
  for (const auto& s : m.steps) {
    CHECK(s["loss_scale"].get<double>() == 1.0);  // bf16: no loss scaling by default
    CHECK(s.contains("samples_per_s"));
    CHECK(s["peak_rss"].get<int64_t>() > 0);
  }
  const XmlDoc svg = parse_xml(read_file(dir.file("p.svg")));
  INFO(svg.error);
  REQUIRE(svg.error.empty());
  CHECK(svg.elements.at(0).name == "svg");
}

TEST_CASE("train_resnet: --stop-after then --resume continues bit-identically (O2 f16)", "[examples][smoke]") {
  TempDir dir;
  const std::string flags = kTiny + " --opt-level O2 --dtype f16";
  const RunResult straight = run_program(MG_TRAIN_RESNET, flags + " --metrics " + dir.file("a.jsonl"));
  REQUIRE(straight.exit_code == 0);
  // Mid-epoch, and on an epoch's last step (the epoch's evaluation is done before stopping).
  for (int stop_at : {13, 10}) {
    INFO("stop after " << stop_at);
    const std::string b = dir.file("b" + std::to_string(stop_at) + ".jsonl");
    const std::string ck = " --checkpoint " + dir.file("c.ck") + " --metrics " + b;
    const RunResult first = run_program(MG_TRAIN_RESNET, flags + ck + " --stop-after " + std::to_string(stop_at));
    INFO(first.output);
    REQUIRE(first.exit_code == 0);
    CHECK_THAT(first.output, Catch::Matchers::Contains("stopped (--stop-after) at step " + std::to_string(stop_at)));
    const RunResult second = run_program(MG_TRAIN_RESNET, flags + ck + " --resume " + dir.file("c.ck"));
    INFO(second.output);
    REQUIRE(second.exit_code == 0);
    CHECK_THAT(second.output, Catch::Matchers::Contains("resumed from"));
    // Every record except wall-clock fields must match exactly, loss scale and skip counts included.
    CHECK(without_timing(read_metrics(b).all) == without_timing(read_metrics(dir.file("a.jsonl")).all));
  }
  // No temporary checkpoint files are left behind.
  for (const std::string& e : dir.entries()) CHECK(e.find(".tmp") == std::string::npos);
}

TEST_CASE("train_resnet: bad input gives a clear message and a non-zero exit", "[examples][smoke]") {
  TempDir dir;
  RunResult r = run_program(MG_TRAIN_RESNET, "--epoch 3");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Matchers::Contains("did you mean --epochs?"));
  r = run_program(MG_TRAIN_RESNET, "--opt-level 00");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Matchers::Contains("expected one of O0, O1, O2, O3"));
  r = run_program(MG_TRAIN_RESNET, "--batch-size many");
  CHECK(r.exit_code == 2);
  r = run_program(MG_TRAIN_RESNET, kTiny + " --loss-scale lots");
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Catch::Matchers::Contains("loss_scale must be a finite number"));
  // A device that cannot be used is refused before any data is read, with the reason.
  r = run_program(MG_TRAIN_RESNET, kTiny + " --device cuda:7");
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Catch::Matchers::Contains("cuda:7"));
  if (!cuda::is_available()) {
    r = run_program(MG_TRAIN_RESNET, kTiny + " --device cuda");
    CHECK(r.exit_code != 0);
    CHECK_THAT(r.output, Catch::Matchers::Contains(cuda::unavailable_reason()));
  }
  r = run_program(MG_TRAIN_RESNET, kTiny + " --device gpu");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Matchers::Contains("hint: use cpu, cuda or cuda:N"));
  r = run_program(MG_TRAIN_RESNET, kTiny, "MG_FASHION_MNIST_DIR=" + dir.file("missing"));
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Catch::Matchers::Contains("apt-get install dataset-fashion-mnist"));
  write_text(dir.file("garbage.ck"), "not a checkpoint");
  r = run_program(MG_TRAIN_RESNET, kTiny + " --resume " + dir.file("garbage.ck"));
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Catch::Matchers::Contains("garbage.ck"));
  // A checkpoint of another configuration is refused with the flags it was saved with.
  REQUIRE(run_program(MG_TRAIN_RESNET, kTiny + " --stop-after 1 --checkpoint " + dir.file("o1.ck")).exit_code == 0);
  r = run_program(MG_TRAIN_RESNET, kTiny + " --opt-level O2 --resume " + dir.file("o1.ck"));
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Catch::Matchers::Contains("was saved by a run with ResNet-8 O1 bf16"));
  // A batch that cannot fit is refused before training, with a batch size that fits.
  // (MG_AVAILABLE_MEMORY pretends the machine has 100 MB, so the test does not depend on its RAM.)
  // (--stop-after 1 bounds the run should the check ever let it through.)
  r = run_program(MG_TRAIN_RESNET, "--depth 8 --batch-size 8192 --stop-after 1 --eval-examples 100 --threads 2",
                  "MG_AVAILABLE_MEMORY=100000000");
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Catch::Matchers::Contains("--batch-size"));
  CHECK_THAT(r.output, Catch::Matchers::Contains("or less"));
}

TEST_CASE("train_resnet: --trace-overflow names the op of every skipped step", "[examples][smoke]") {
  TempDir dir;
  // A static loss scale of 1e9 overflows f16 gradients on every step: every step is skipped.
  const RunResult r = run_program(MG_TRAIN_RESNET, "--depth 8 --epochs 1 --batch-size 32 --train-examples 128 "
                                                   "--eval-examples 100 --threads 2 --opt-level O1 --dtype f16 "
                                                   "--loss-scale 1e9 --trace-overflow --metrics " + dir.file("m.jsonl"));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Matchers::Contains("first inf/NaN produced by"));  // the full report, once
  CHECK_THAT(r.output, Catch::Matchers::Contains("step 4 skipped: inf/NaN first produced by"));
  const Metrics m = read_metrics(dir.file("m.jsonl"));
  REQUIRE(m.steps.size() == 4);
  for (const auto& s : m.steps) CHECK(s.at("skipped").get<bool>());
  CHECK(m.evals.back().at("skipped_steps").get<int64_t>() == 4);
}
