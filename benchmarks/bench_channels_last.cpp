// bench_channels_last: one ResNet-20 training step (CIFAR style, 1x28x28, 10 classes, SGD) with
// NCHW activations, with channels-last (NHWC) activations, and with NHWC activations and NHWC
// weights (Module::to(MemoryFormat), what amp::initialize's memory_format does), in f32 and in
// bf16 (the model and input cast to bf16, O3-style), rotating the three layouts run by run in one
// process so that all see the same machine load. Reports the median process CPU time per step (what the step
// costs, less sensitive to a busy shared host than wall time) and the median wall time, each over
// the alternating runs, and their NHWC / NCHW ratios.
//
//   bench_channels_last [--quick] [--threads N] [--json FILE]
#include <time.h>

#include <algorithm>
#include <memory>
#include <cstdio>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "bench_common.h"
#include "core/factory.h"
#include "core/parallel.h"
#include "nn/models/resnet.h"
#include "ops/loss.h"
#include "ops/ops.h"

namespace {

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}
double wall_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Setup {
  std::unique_ptr<mg::nn::models::ResNet> net;
  mg::Tensor x, y;  // x [B, 1, 28, 28] in the layout measured, y [B] i64
};

void step(Setup& s) {
  mg::Tensor loss = mg::cross_entropy((*s.net)(s.x), s.y);
  loss.backward();
  mg::NoGradGuard no_grad;
  for (mg::Tensor& p : s.net->parameters()) {
    if (p.grad().defined()) p.sub_(p.grad(), 0.01);
  }
  s.net->zero_grad();
}

}  // namespace

int main(int argc, char** argv) {
  bench::Config cfg;
  if (const int rc = bench::parse_args(argc, argv, "bench_channels_last", cfg); rc >= 0) return rc;
  mg::set_num_threads(cfg.threads);
  const int64_t batch = cfg.quick ? 8 : 128;
  const int rounds = cfg.quick ? 1 : 7, steps = cfg.quick ? 1 : 3;
  std::printf("bench_channels_last: ResNet-20 step, batch %lld 1x28x28, %d threads; %d rounds rotating NCHW, NHWC "
              "and NHWC with NHWC weights, each round %d steps after a warm-up step; medians of the per-step times\n",
              (long long)batch, cfg.threads, rounds, steps);
  bench::print_load_average();
  std::vector<bench::Row> rows;
  for (mg::DType dt : {mg::DType::F32, mg::DType::BF16}) {
    constexpr int kLayouts = 3;  // NCHW; NHWC activations; NHWC activations and weights
    Setup layouts[kLayouts];
    for (int l = 0; l < kLayouts; ++l) {
      mg::manual_seed(0);
      layouts[l].net = std::make_unique<mg::nn::models::ResNet>(mg::nn::models::ResNetConfig::cifar(20, 1, 10));
      layouts[l].net->to(dt);
      if (l == 2) layouts[l].net->to(mg::MemoryFormat::ChannelsLast);
      const mg::Tensor x = mg::randn({batch, 1, 28, 28}).to(dt);
      layouts[l].x = l == 0 ? x : x.to(mg::MemoryFormat::ChannelsLast);
      layouts[l].y = mg::randint(0, 10, {batch});
      step(layouts[l]);  // warm-up: primitive creation, allocator
    }
    std::vector<double> cpu[kLayouts], wall[kLayouts];
    for (int r = 0; r < rounds; ++r) {
      for (int l = 0; l < kLayouts; ++l) {
        const int li = (l + r) % kLayouts;  // rotate which layout goes first
        const double c0 = cpu_seconds(), w0 = wall_seconds();
        for (int k = 0; k < steps; ++k) step(layouts[li]);
        cpu[li].push_back((cpu_seconds() - c0) / steps);
        wall[li].push_back((wall_seconds() - w0) / steps);
      }
    }
    const std::string name = mg::dtype_name(dt);
    const std::string shape = "b" + std::to_string(batch) + " 1x28x28";
    static const char* const kRow[kLayouts] = {"resnet20_step_nchw", "resnet20_step_nhwc", "resnet20_step_nhwc_w_nhwc"};
    static const char* const kLabel[kLayouts] = {"NCHW", "NHWC", "NHWC + NHWC weights"};
    const double c_nchw = median(cpu[0]) * 1e3, w_nchw = median(wall[0]) * 1e3;
    for (const bool is_cpu : {true, false}) {
      const double base = is_cpu ? c_nchw : w_nchw;
      for (int l = 0; l < kLayouts; ++l) {
        const double v = median(is_cpu ? cpu[l] : wall[l]) * 1e3;
        rows.push_back({kRow[l], name, shape, v, is_cpu ? "cpu ms/step" : "wall ms/step", l ? "nchw" : "", l ? base : 0,
                        l ? v / base : 0});
      }
    }
    for (int l = 0; l < kLayouts; ++l) {
      std::printf("%s per-round cpu ms/step %s:", name.c_str(), kLabel[l]);
      for (double v : cpu[l]) std::printf(" %.1f", v * 1e3);
      std::printf("\n");
    }
  }
  bench::print_table(rows);
  if (!cfg.json.empty() && !bench::write_json(cfg.json, rows)) return 1;
  return 0;
}
