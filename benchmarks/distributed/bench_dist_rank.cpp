// One rank of bench_dist (bench_dist_rank.h): forward, backward (which, under DDP, ends with every
// bucket averaged) and the SGD step timed apart on the steady clock, the process CPU time of the
// whole step (every thread of the process: OpenMP workers, DDP's communication thread, Gloo's
// I/O) beside it, and DDP's per-bucket timeline of every measured step.
#include "bench_dist_rank.h"

#include <time.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/factory.h"
#include "core/generator.h"
#include "core/parallel.h"
#include "distributed/ddp.h"
#include "distributed/init.h"
#include "nn/models/resnet.h"
#include "ops/loss.h"
#include "optim/sgd.h"

namespace bench_dist {
namespace {

using Clock = std::chrono::steady_clock;

double seconds(Clock::time_point a, Clock::time_point b) { return std::chrono::duration<double>(b - a).count(); }

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::atoi(v) : fallback;
}

// DDP's timeline of one backward in ms since its first gradient hook, plus where that hook fell
// after the call to backward() (backward's wall time minus the timeline's reduced_s).
nlohmann::json timeline_json(const mg::distributed::BackwardTimeline& t, double backward_s) {
  nlohmann::json buckets = nlohmann::json::array();
  for (const auto& b : t.buckets) {
    buckets.push_back({{"bytes", b.bytes}, {"params", b.num_params}, {"ready_ms", 1e3 * b.ready_s},
                       {"start_ms", 1e3 * b.started_s}, {"end_ms", 1e3 * b.finished_s},
                       {"in_backward", b.launched_in_backward}});
  }
  return {{"buckets", buckets},
          {"first_hook_ms", 1e3 * (backward_s - t.reduced_s)},
          {"backward_end_ms", 1e3 * t.backward_end_s},
          {"reduced_ms", 1e3 * t.reduced_s},
          {"comm_ms", 1e3 * t.total_comm_s()},
          {"hidden_ms", 1e3 * t.hidden_comm_s()}};
}

}  // namespace

int run_rank(const RankSpec& spec) {
  namespace dist = mg::distributed;
  mg::set_num_threads(spec.threads);
  const int world = env_int("WORLD_SIZE", 1);
  std::shared_ptr<dist::ProcessGroup> pg;
  if (world > 1) pg = dist::init_process_group({.timeout = std::chrono::seconds(600)});
  const int rank = pg ? pg->rank() : 0;

  mg::manual_seed(0);  // the same initial weights everywhere (DDP broadcasts rank 0's anyway)
  auto model = std::make_shared<mg::nn::models::ResNet>(mg::nn::models::ResNetConfig::cifar(20, 1, 10));
  mg::optim::SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  if (pg) {
    ddp = std::make_unique<dist::DistributedDataParallel>(
        model, pg, dist::DdpOptions{.bucket_cap_bytes = spec.bucket_kib * 1024, .optimizers = {&opt}});
  }
  // Synthetic data, a different shard per rank: the cost of a step does not depend on the values.
  mg::Generator gen(1000 + uint64_t(rank));
  const mg::Tensor x = mg::randn({spec.batch, 1, 28, 28}, {}, &gen);                        // [B, 1, 28, 28] f32
  const mg::Tensor y = mg::randint(0, 10, {spec.batch}, {.dtype = mg::DType::I64}, &gen);  // [B] i64

  nlohmann::json fwd = nlohmann::json::array(), bwd = fwd, upd = fwd, step = fwd, cpu = fwd, timelines = fwd;
  double wall_total = 0, cpu_total = 0;
  for (int i = 0; i < spec.warmup + spec.steps; ++i) {
    const double c0 = process_cpu_seconds();
    const Clock::time_point t0 = Clock::now();
    opt.zero_grad();
    const mg::Tensor loss = mg::cross_entropy((*model)(x), y);
    const Clock::time_point t1 = Clock::now();
    loss.backward();  // under DDP: returns with the gradients averaged over ranks
    const Clock::time_point t2 = Clock::now();
    opt.step();
    const Clock::time_point t3 = Clock::now();
    const double c1 = process_cpu_seconds();
    if (i < spec.warmup) continue;
    fwd.push_back(1e3 * seconds(t0, t1));
    bwd.push_back(1e3 * seconds(t1, t2));
    upd.push_back(1e3 * seconds(t2, t3));
    step.push_back(1e3 * seconds(t0, t3));
    cpu.push_back(1e3 * (c1 - c0));
    wall_total += seconds(t0, t3);
    cpu_total += c1 - c0;
    if (ddp) timelines.push_back(timeline_json(ddp->last_timeline(), seconds(t1, t2)));
  }
  const nlohmann::json out = {{"rank", rank},         {"world", world},       {"threads", spec.threads},
                              {"batch", spec.batch},  {"steps", spec.steps},  {"bucket_kib", spec.bucket_kib},
                              {"buckets", ddp ? int(ddp->bucket_names().size()) : 0},
                              {"wall_s", wall_total}, {"cpu_s", cpu_total},   {"forward_ms", fwd},
                              {"backward_ms", bwd},   {"optimizer_ms", upd},  {"step_ms", step},
                              {"cpu_ms", cpu},        {"timelines", timelines}};
  const std::string path = spec.result + ".rank" + std::to_string(rank) + ".json";
  std::ofstream f(path);
  f << out.dump() << "\n";
  if (!f) {
    std::fprintf(stderr, "bench_dist: rank %d cannot write %s\n", rank, path.c_str());
    return 1;
  }
  f.close();
  ddp.reset();
  if (pg) pg->shutdown();
  return 0;
}

}  // namespace bench_dist
