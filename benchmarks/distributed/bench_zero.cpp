// What ZeroRedundantOptimizer saves and costs: an MLP (--layers linear layers of --hidden
// features, about layers x hidden^2 parameters) trained with DistributedDataParallel, AdamW at O2
// bf16 (f32 masters, two f32 moments: 12 bytes of optimizer state per parameter), first with the
// unsharded optimizer on every rank, then with ZeRO, in alternating rounds. Run under the launcher:
//   build/launcher/mixgrad-run --nproc-per-node 2 --master-port 0 build/benchmarks/bench_zero [--quick]
//       [--hidden H] [--layers L] [--batch B] [--steps S] [--rounds R]
// Prints per rank the optimizer state it holds (buffers and masters, exact bytes) and the median
// step time of each mode (zero_grad, forward, scaled backward with DDP's all-reduce, unscale,
// step; ZeRO adds one broadcast per rank per dtype after the step), and checks that both modes
// trained to the same weights (bitwise; ZeRO is exact).
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

#include "amp/initialize.h"
#include "benchmarks/distributed/number_arg.h"
#include "core/factory.h"
#include "core/generator.h"
#include "core/parallel.h"
#include "distributed/ddp.h"
#include "distributed/init.h"
#include "distributed/zero.h"
#include "nn/activation.h"
#include "nn/container.h"
#include "nn/linear.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "optim/optim.h"

using namespace mg;
using Clock = std::chrono::steady_clock;

namespace {

constexpr const char* kUsage =
    "usage: mixgrad-run --nproc-per-node N bench_zero [--quick] [--hidden H] [--layers L] [--batch B] [--steps S] "
    "[--rounds R]\n";

struct Args {
  int64_t hidden = 2048, layers = 4, batch = 32;
  int steps = 5, rounds = 3;
};

std::shared_ptr<nn::Sequential> make_mlp(const Args& a) {
  manual_seed(1);
  std::vector<std::shared_ptr<nn::UnaryModule>> layers;
  for (int64_t l = 0; l < a.layers; ++l) {
    layers.push_back(nn::make<nn::Linear>({.in = a.hidden, .out = a.hidden}));
    if (l + 1 < a.layers) layers.push_back(nn::make<nn::ReLU>());
  }
  return std::make_shared<nn::Sequential>(layers);
}

struct Result {
  std::vector<double> step_ms;
  int64_t state_bytes = 0;
  Tensors weights;
};

Result run(const Args& a, const std::shared_ptr<distributed::ProcessGroup>& pg, bool zero) {
  auto model = make_mlp(a);
  const optim::AdamWOptions opts{.lr = 1e-4, .weight_decay = 0.01};
  std::unique_ptr<optim::Optimizer> plain;
  std::unique_ptr<distributed::ZeroRedundantOptimizer> z;
  if (zero) {
    z = std::make_unique<distributed::ZeroRedundantOptimizer>(
        model->parameters(), pg, [&](const auto& shard) { return std::make_unique<optim::AdamW>(shard, opts); });
  } else {
    plain = std::make_unique<optim::AdamW>(model->parameters(), opts);
  }
  optim::Optimizer& opt = zero ? z->local() : *plain;
  amp::initialize_models({model}, {&opt}, {.opt_level = "O2", .dtype = "bf16", .verbosity = 0});
  distributed::DdpOptions o;
  if (!zero) o.optimizers = {&opt};
  distributed::DistributedDataParallel ddp(model, pg, o);
  Result r;
  for (int s = 0; s < a.steps + 1; ++s) {  // step 0 creates the state: not timed
    manual_seed(100 + uint64_t(s) * 7 + uint64_t(pg->rank()));
    const Tensor x = randn({a.batch, a.hidden}), y = randn({a.batch, a.hidden});
    const auto t0 = Clock::now();
    opt.zero_grad();
    amp::scale_loss(mse_loss(amp::forward(*model, x), y), opt).backward();
    opt.step();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    if (s > 0) r.step_ms.push_back(ms);
  }
  r.state_bytes = zero ? z->local().state_bytes() : opt.state_bytes();
  for (const Tensor& p : model->parameters()) r.weights.push_back(p.clone());
  amp::reset();
  return r;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  Args a;
  try {
    for (int i = 1; i < argc; ++i) {
      const std::string f = argv[i];
      const auto next = [&]() -> const char* {
        if (i + 1 >= argc) throw std::invalid_argument(f + ": expected a value");
        return argv[++i];
      };
      if (f == "--quick") {
        a.hidden = 256, a.layers = 3, a.batch = 8, a.steps = 2, a.rounds = 1;
      } else if (f == "--hidden") {
        a.hidden = int64_t(bench::number_arg("--hidden", next(), 1, 65536));
      } else if (f == "--layers") {
        a.layers = int64_t(bench::number_arg("--layers", next(), 1, 1000));
      } else if (f == "--batch") {
        a.batch = int64_t(bench::number_arg("--batch", next(), 1, 1 << 20));
      } else if (f == "--steps") {
        a.steps = int(bench::number_arg("--steps", next(), 1, 100000));
      } else if (f == "--rounds") {
        a.rounds = int(bench::number_arg("--rounds", next(), 1, 1000));
      } else {
        throw std::invalid_argument("unknown flag " + f);
      }
    }
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "bench_zero: %s\n%s", e.what(), kUsage);
    return 2;
  }
  try {
    auto pg = distributed::init_process_group();
    const int rank = pg->rank(), world = pg->world_size();
    const int64_t params = a.layers * (a.hidden * a.hidden + a.hidden);
    if (rank == 0) {
      std::printf("bench_zero: %d ranks x %d threads; MLP %lld x %lld features (%lld parameters), batch %lld per rank, "
                  "AdamW at O2 bf16 with DDP; %d rounds of %d timed steps per mode, alternating\n",
                  world, num_threads(), (long long)a.layers, (long long)a.hidden, (long long)params, (long long)a.batch,
                  a.rounds, a.steps);
    }
    std::vector<double> plain_ms, zero_ms;
    Result p, z;
    for (int round = 0; round < a.rounds; ++round) {
      p = run(a, pg, false);
      z = run(a, pg, true);
      plain_ms.insert(plain_ms.end(), p.step_ms.begin(), p.step_ms.end());
      zero_ms.insert(zero_ms.end(), z.step_ms.begin(), z.step_ms.end());
    }
    bool same = true;
    for (std::size_t i = 0; i < p.weights.size(); ++i) {
      const Tensor& x = p.weights[i];
      same = same && std::memcmp(x.data_ptr(), z.weights[i].data_ptr(), std::size_t(x.numel()) * x.element_size()) == 0;
    }
    std::printf("rank %d: optimizer state: unsharded %.1f MiB, ZeRO %.1f MiB (%.2f); step: unsharded %.1f ms, ZeRO %.1f ms "
                "(%.2fx, medians); weights after both runs %s\n",
                rank, double(p.state_bytes) / (1 << 20), double(z.state_bytes) / (1 << 20),
                double(z.state_bytes) / double(p.state_bytes), median(plain_ms), median(zero_ms),
                median(zero_ms) / median(plain_ms), same ? "bitwise equal" : "DIFFERENT");
    pg->shutdown();
    return same ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_zero: %s\n", e.what());
    return 1;
  }
}
