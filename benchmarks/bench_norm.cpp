// bench_norm: the norm kernels at the shapes the examples train, forward and fused backward, in
// GB/s next to a same-size tensor copy measured in the same run (the peer: a norm reads and writes
// at least what a copy does, so the ratio says how close it gets to memory speed):
//   batch_norm (training) [128, 16, 28, 28] and [128, 64, 7, 7] (ResNet-20's first and last stage
//   at batch 128), layer_norm and rms_norm [4096, 256] (BERT-mini's 32 x 128 tokens, hidden 256),
//   group_norm [32, 64, 28, 28] in 8 groups; f32 and bf16.
// Bytes: forward reads x and writes y (2 x numel elements); backward reads g and x and writes dx
// (3 x numel; the statistics and per-channel parameters are negligible).
// Timing: one warm-up call, then the best of N (std::chrono::steady_clock).
//
//   bench_norm [--quick] [--threads N] [--json FILE]
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "bench_common.h"
#include "core/factory.h"
#include "core/parallel.h"
#include "ops/norm.h"
#include "ops/ops.h"

namespace {

using bench::Row;

std::string shape_str(const mg::Shape& s) {
  std::string out;
  for (std::size_t i = 0; i < s.size(); ++i) out += (i ? "x" : "") + std::to_string(s[i]);
  return out;
}

// forward(x) -> y; backward(g, x) prepares the statistics (untimed) and returns the timed call.
struct Case {
  std::string name;
  mg::Shape shape;
  std::function<mg::Tensor(const mg::Tensor& x)> forward;
  std::function<std::function<mg::Tensor()>(const mg::Tensor& g, const mg::Tensor& x)> backward;
};

}  // namespace

int main(int argc, char** argv) {
  bench::Config cfg;
  if (const int rc = bench::parse_args(argc, argv, "bench_norm", cfg); rc >= 0) return rc;
  mg::set_num_threads(cfg.threads);
  const int reps = cfg.quick ? 1 : 20;
  const int64_t batch = cfg.quick ? 8 : 128, tokens = cfg.quick ? 256 : 4096;
  std::printf("bench_norm: %d threads, best of %d\n", cfg.threads, reps);
  bench::print_load_average();
  mg::NoGradGuard no_grad;

  const mg::Tensor w16 = mg::ones({16}), w64 = mg::ones({64}), w256 = mg::ones({256});
  std::vector<Case> cases;
  for (auto [c, hw] : {std::pair<int64_t, int64_t>{16, 28}, {64, 7}}) {
    const mg::Tensor w = c == 16 ? w16 : w64;
    cases.push_back({"batch_norm", {batch, c, hw, hw},
                     [w](const mg::Tensor& x) { return mg::batch_norm(x, w, w, {}, {}, true); },
                     [w](const mg::Tensor& g, const mg::Tensor& x) -> std::function<mg::Tensor()> {
                       const mg::Tensor xf = mg::to(x, mg::DType::F32);
                       const mg::Tensor mean = mg::mean(xf, {0, 2, 3});
                       const mg::Tensor invstd = mg::rsqrt(mg::var(xf, {0, 2, 3}, 0.0) + 1e-5);
                       return [=] { return mg::batch_norm_backward(g, x, mean, invstd, w, true).dx; };
                     }});
  }
  cases.push_back({"layer_norm", {tokens, 256}, [&](const mg::Tensor& x) { return mg::layer_norm(x, {256}, w256, w256); },
                   [&](const mg::Tensor& g, const mg::Tensor& x) -> std::function<mg::Tensor()> {
                     const mg::Tensor xf = mg::to(x, mg::DType::F32);
                     const mg::Tensor mean = mg::mean(xf, {1}, true);
                     const mg::Tensor rstd = mg::rsqrt(mg::var(xf, {1}, 0.0, true) + 1e-5);
                     return [=] { return mg::layer_norm_backward(g, x, mean, rstd, {256}, w256, true).dx; };
                   }});
  cases.push_back({"rms_norm", {tokens, 256}, [&](const mg::Tensor& x) { return mg::rms_norm(x, {256}, w256); }, nullptr});
  cases.push_back({"group_norm", {cfg.quick ? 4 : 32, 64, 28, 28},
                   [&](const mg::Tensor& x) { return mg::group_norm(x, 8, w64, w64); },
                   [&](const mg::Tensor& g, const mg::Tensor& x) -> std::function<mg::Tensor()> {
                     const int64_t n = x.shape()[0];
                     const mg::Tensor xg = mg::reshape(mg::to(x, mg::DType::F32), {n, 8, -1});
                     const mg::Tensor mean = mg::mean(xg, {2});
                     const mg::Tensor rstd = mg::rsqrt(mg::var(xg, {2}, 0.0) + 1e-5);
                     return [=] { return mg::group_norm_backward(g, x, mean, rstd, 8, w64, true).dx; };
                   }});

  std::vector<Row> rows;
  try {
    for (const Case& c : cases) {
      for (mg::DType dt : {mg::DType::F32, mg::DType::BF16}) {
        const mg::Tensor x = (mg::randn(c.shape) * 2.0 + 3.0).to(dt);
        const mg::Tensor g = mg::randn(c.shape).to(dt);
        const double bytes = double(x.numel()) * double(x.element_size());
        const double copy = bytes * 2 / bench::seconds_best_of(reps, [&] { bench::g_sink = double(mg::clone(x).numel()); }) / 1e9;
        const std::string dts = dt == mg::DType::F32 ? "f32" : "bf16", shape = shape_str(c.shape);
        const double fwd = bytes * 2 / bench::seconds_best_of(reps, [&] { bench::g_sink = double(c.forward(x).numel()); }) / 1e9;
        rows.push_back({c.name, dts, shape, fwd, "GB/s", "copy", copy, fwd / copy});
        if (c.backward) {
          const std::function<mg::Tensor()> call = c.backward(g, x);
          const double t = bench::seconds_best_of(reps, [&] { bench::g_sink = double(call().numel()); });
          const double bwd = bytes * 3 / t / 1e9;
          rows.push_back({c.name + "_backward", dts, shape, bwd, "GB/s", "copy", copy, bwd / copy});
        }
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_norm: %s\n", e.what());
    return 1;
  }
  bench::print_table(rows);
  if (!cfg.json.empty() && !bench::write_json(cfg.json, rows)) {
    std::fprintf(stderr, "bench_norm: cannot write %s\n", cfg.json.c_str());
    return 1;
  }
  return 0;
}
