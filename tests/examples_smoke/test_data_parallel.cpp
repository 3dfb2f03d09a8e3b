// Both training examples under mixgrad-run with 2 ranks (builds with the distributed layer): each
// rank trains on its DistributedSampler shard (half the global batch), a run stopped on 2 ranks
// and resumed on 2 ranks repeats the uninterrupted run exactly, and rank 0's checkpoint resumes in
// a single process at the next global step. That the ranks' shards are disjoint and that global
// step k holds one process's examples of step k is tested without processes in
// tests/examples_common/test_data_parallel.cpp (the same loader code).
#include <catch2/catch.hpp>

#include <string>

#include "examples_common/examples_test_util.h"
#include "examples_smoke/smoke_util.h"

using namespace mg::test;

#ifdef MG_HAVE_DISTRIBUTED

namespace {

std::string two_ranks(const std::string& program) {
  return std::string(MG_RUN) + " --nproc-per-node 2 --master-port 0 " + program;
}

// ResNet-8, a global batch of 32 (16 per rank), 10 steps, O0 f32.
const std::string kTinyDdp =
    " --depth 8 --epochs 1 --batch-size 32 --train-examples 320 --eval-examples 100 --log-every 1 --threads 1 "
    "--opt-level O0";

}  // namespace

TEST_CASE("train_resnet under mixgrad-run: sharded, stopped and resumed on 2 ranks and on 1", "[examples][smoke]") {
  TempDir dir;
  const RunResult straight = run_program(two_ranks(MG_TRAIN_RESNET), kTinyDdp + " --metrics " + dir.file("a.jsonl"));
  INFO(straight.output);
  REQUIRE(straight.exit_code == 0);
  CHECK_THAT(straight.output, Catch::Matchers::Contains("data parallel: 2 ranks, each on 16 images per step from its "
                                                        "DistributedSampler shard of the epoch's shuffle (30000 images), "
                                                        "global batch 32"));
  CHECK_THAT(straight.output, Catch::Matchers::Contains("[rank 1] rank 1/2: epoch 1:"));
  const Metrics a = read_metrics(dir.file("a.jsonl"));
  REQUIRE(a.steps.size() == 10);

  const std::string ck = " --checkpoint " + dir.file("c.ck");
  const RunResult first = run_program(two_ranks(MG_TRAIN_RESNET),
                                      kTinyDdp + ck + " --stop-after 6 --metrics " + dir.file("b.jsonl"));
  INFO(first.output);
  REQUIRE(first.exit_code == 0);
  CHECK_THAT(first.output, Catch::Matchers::Contains("stopped (--stop-after) at step 6"));
  std::filesystem::copy_file(dir.file("c.ck"), dir.file("c1.ck"));

  // On 2 ranks again: every record equals the uninterrupted run's.
  const RunResult second = run_program(two_ranks(MG_TRAIN_RESNET),
                                       kTinyDdp + ck + " --resume " + dir.file("c.ck") + " --metrics " + dir.file("b.jsonl"));
  INFO(second.output);
  REQUIRE(second.exit_code == 0);
  CHECK_THAT(second.output, Catch::Matchers::Contains("resumed from"));
  CHECK(without_timing(read_metrics(dir.file("b.jsonl")).all) == without_timing(a.all));

  // On 1 process: the same global batch of 32, from global step 7 on.
  const RunResult alone = run_program(MG_TRAIN_RESNET, kTinyDdp + " --resume " + dir.file("c1.ck") + " --metrics " +
                                                           dir.file("d.jsonl"));
  INFO(alone.output);
  REQUIRE(alone.exit_code == 0);
  CHECK_THAT(alone.output, Catch::Matchers::Contains("at step 6 (epoch 1)"));
  const Metrics d = read_metrics(dir.file("d.jsonl"));
  REQUIRE(d.steps.size() == 4);
  for (std::size_t i = 0; i < d.steps.size(); ++i) CHECK(d.steps[i].at("step").get<int64_t>() == int64_t(7 + i));

  // A global batch that does not split over the ranks is refused before anything trains.
  const RunResult odd = run_program(two_ranks(MG_TRAIN_RESNET), kTinyDdp + " --batch-size 33");
  CHECK(odd.exit_code != 0);
  CHECK_THAT(odd.output, Catch::Matchers::Contains("--batch-size 33 (the global batch) does not split evenly over 2 ranks"));
}

TEST_CASE("train_bert under mixgrad-run: each rank trains on its shard", "[examples][smoke]") {
  TempDir dir;
  const RunResult r = run_program(two_ranks(MG_TRAIN_BERT),
                                  " --task mlm --model tiny --epochs 1 --train-examples 128 --eval-examples 64 "
                                  "--batch-size 16 --seq-len 32 --log-every 1 --threads 1 --metrics " + dir.file("m.jsonl"));
  INFO(r.output);
  REQUIRE(r.exit_code == 0);
  CHECK_THAT(r.output, Catch::Matchers::Contains("data parallel: 2 ranks, each on 8 verses per micro-batch from its "
                                                 "DistributedSampler shard"));
  CHECK(read_metrics(dir.file("m.jsonl")).steps.size() == 8);
}

#endif  // MG_HAVE_DISTRIBUTED
