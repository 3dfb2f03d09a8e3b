// One rank of bench_dist: ResNet-20 training steps on synthetic Fashion-MNIST-shaped data
// (x [B, 1, 28, 28] f32, y [B] i64), alone or under DistributedDataParallel, timed per phase and
// written as one JSON object to a file for the driver (bench_dist.cpp) to read.
// Decision: every rank writes its own file (`<result>.rank<R>.json`) instead of gathering its
// numbers to rank 0 over the group, so a measured step contains no collective but DDP's own.
//
//   RankSpec spec{.threads = 1, .batch = 64, .steps = 10, .bucket_kib = 128, .result = "/tmp/r"};
//   return run_rank(spec);   // WORLD_SIZE > 1 in the environment: joins the group, wraps in DDP
#pragma once
#include <cstdint>
#include <string>

namespace bench_dist {

struct RankSpec {
  int threads = 1;          // mg::set_num_threads
  int64_t batch = 64;       // examples per rank and step
  int steps = 10;           // measured steps
  int warmup = 2;           // unmeasured steps first (allocations, connections)
  int64_t bucket_kib = 25 * 1024;  // DdpOptions::bucket_cap_bytes / 1024
  std::string result;       // file prefix; this rank writes <result>.rank<R>.json
};

// Runs the steps and writes the result; returns the process exit code.
int run_rank(const RankSpec& spec);

}  // namespace bench_dist
