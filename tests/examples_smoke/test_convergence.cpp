// The accuracy targets of the training examples, on the full data with the default schedules
// (labelled slow: measured on one core of the 2-core development machine, the ResNet case is about
// 2 3/4 hours (four 10-epoch runs of 32-50 minutes) and the BERT case about 2 hours (40-minute
// pretraining, three 25-30-minute fine-tuning runs); not in the default CI run —
// MG_TEST_SLOW=1 scripts/test or `ctest -L slow` runs them). Each run's wall time is printed.
// Run with all cores, the trajectories differ from those 1-thread runs (thread-split reductions
// add in another order); testament cleared 95% there by one verse of 3,110.
#include <catch2/catch.hpp>

#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

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

namespace {

// The held-out accuracies of a train_bert run's evaluations, in order.
std::vector<double> bert_eval_accuracy(const TempDir& dir, const std::string& name, const std::string& args) {
  const std::string metrics = dir.file(name + ".jsonl");
  const auto start = std::chrono::steady_clock::now();
  const RunResult r = run_program(MG_TRAIN_BERT, args + " --metrics " + metrics);
  const double minutes = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / 60;
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  std::vector<double> acc;
  for (const auto& e : read_metrics(metrics).evals) {
    if (e.value("kind", "") == "eval") acc.push_back(e.at("eval_accuracy").get<double>());
  }
  REQUIRE(!acc.empty());
  std::printf("train_bert %s: held-out accuracy %.4f, %.1f minutes\n", name.c_str(), acc.back(), minutes);
  return acc;
}

}  // namespace

TEST_CASE("train_bert: MLM improves steadily, testament reaches 95%, pretraining beats scratch on book",
          "[examples][slow]") {
  TempDir dir;
  const std::string ck = dir.file("mlm.ck");
  // Pretraining with the defaults (BERT-mini, 5 epochs): masked-token accuracy rises epoch over
  // epoch (a dip of at most 0.005 between consecutive evaluations is noise, not a regression).
  const std::vector<double> mlm = bert_eval_accuracy(dir, "mlm", "--task mlm --checkpoint " + ck);
  CHECK(mlm.back() > mlm.front() + 0.05);
  for (std::size_t i = 1; i < mlm.size(); ++i) CHECK(mlm[i] >= mlm[i - 1] - 0.005);
  CHECK(bert_eval_accuracy(dir, "testament", "--task testament --pretrained " + ck).back() >= 0.95);
  const double pretrained = bert_eval_accuracy(dir, "book_pretrained", "--task book --pretrained " + ck).back();
  const double scratch = bert_eval_accuracy(dir, "book_scratch", "--task book").back();
  CHECK(pretrained > scratch);
}
