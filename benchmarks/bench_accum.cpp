// bench_accum: the accumulating kernels outside the norms and the generic reductions (softmax,
// the class losses, cumsum, scatter_add as embedding backward, adaptive average pooling,
// clip_grad_norm_), in GB/s of the bytes each call must read and write, beside memcpy of the same
// traffic measured in the same run (the host is shared and noisy: only same-run ratios and
// alternating runs of two builds mean something).
// Timing: one warm-up call, then the best of N, in process CPU time (all threads' CPU seconds per
// call: on this oversubscribed host wall time swings 10x between runs, CPU time far less; with
// --threads 1 it is the single-thread cost).
//
//   bench_accum [--quick] [--threads N] [--json FILE]
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "bench_common.h"
#include "core/parallel.h"
#include "ops/conv.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/ops.h"
#include "optim/clip_grad.h"

namespace {

using bench::g_sink;
using bench::Row;
using bench::seconds_best_of;  // memcpy's reference (wall time)

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

double op_gbps(double bytes, int reps, const std::function<mg::Tensor()>& op) {
  g_sink = double(op().numel());  // warm-up
  double best = 1e300;
  for (int r = 0; r < reps; ++r) {
    const double t0 = cpu_seconds();
    g_sink = double(op().numel());
    best = std::min(best, cpu_seconds() - t0);
  }
  return bytes / best / 1e9;
}

std::string dims(std::initializer_list<int64_t> d) {
  std::string s;
  for (int64_t v : d) {
    if (!s.empty()) s += 'x';
    s += std::to_string(v);
  }
  return s;
}

}  // namespace

int main(int argc, char** argv) {
  bench::Config cfg;
  if (const int rc = bench::parse_args(argc, argv, "bench_accum", cfg); rc >= 0) return rc;
  mg::set_num_threads(cfg.threads);
  const int reps = cfg.quick ? 2 : 10;
  const int64_t rows = cfg.quick ? 512 : 8192, classes = 1000, vocab = 8192, hidden = 256;
  const int64_t tokens = cfg.quick ? 1024 : 16384, line = cfg.quick ? (1 << 16) : (1 << 22);
  std::printf("bench_accum: %d threads, best of %d\n\n", cfg.threads, reps);
  bench::print_load_average();

  std::vector<Row> rows_out;
  try {
    const double mc = bench::memcpy_gbps(int64_t(1) << (cfg.quick ? 22 : 26), cfg.threads, reps);
    rows_out.push_back({"memcpy", "-", "", mc, "GB/s", "", 0, 0});
    auto add = [&](const std::string& name, const std::string& shape, double bytes, const std::function<mg::Tensor()>& op) {
      const double v = op_gbps(bytes, reps, op);
      rows_out.push_back({name, "f32", shape, v, "GB/s", "memcpy", mc, v / mc});
    };
    const mg::Tensor logits = mg::randn({rows, classes});
    const double lb = double(rows * classes) * 4;
    std::vector<int64_t> tv(static_cast<std::size_t>(rows));
    for (int64_t i = 0; i < rows; ++i) tv[std::size_t(i)] = (i * 37) % classes;
    const mg::Tensor target = mg::from_vector<int64_t>(tv, {rows});
    const mg::Tensor y = mg::softmax(logits, 1);
    add("softmax", dims({rows, classes}), 2 * lb, [&] { return mg::softmax(logits, 1); });
    add("log_softmax", dims({rows, classes}), 2 * lb, [&] { return mg::log_softmax(logits, 1); });
    add("softmax_backward", dims({rows, classes}), 3 * lb, [&] { return mg::softmax_backward(logits, y, 1); });
    add("cross_entropy", dims({rows, classes}), lb, [&] { return mg::cross_entropy(logits, target); });
    add("cross_entropy_backward", dims({rows, classes}), 2 * lb,
        [&] { return mg::cross_entropy_backward(mg::ones({}), logits, target); });
    const mg::Tensor long_row = mg::randn({1, line});
    add("softmax one row", dims({1, line}), 8.0 * double(line), [&] { return mg::softmax(long_row, 1); });
    add("cumsum one row", dims({line}), 8.0 * double(line), [&] { return mg::cumsum(long_row, 1); });
    add("cumsum dim 1", dims({rows, classes}), 2 * lb, [&] { return mg::cumsum(logits, 1); });
    add("cumsum dim 0", dims({rows, classes}), 2 * lb, [&] { return mg::cumsum(logits, 0); });
    // embedding backward as the autograd rule runs it: scatter_add of g [tokens, hidden] into [vocab, hidden]
    std::vector<int64_t> iv(static_cast<std::size_t>(tokens));
    for (int64_t i = 0; i < tokens; ++i) iv[std::size_t(i)] = (i * 7919) % vocab;
    const mg::Tensor idx =
        mg::contiguous(mg::expand(mg::reshape(mg::from_vector<int64_t>(iv, {tokens}), {tokens, 1}), {tokens, hidden}));
    const mg::Tensor g = mg::randn({tokens, hidden});
    add("scatter_add (embedding bw)", dims({tokens, hidden}) + ">" + std::to_string(vocab),
        double(tokens * hidden) * 16 + double(vocab * hidden) * 8,
        [&] { return mg::scatter_add(mg::zeros({vocab, hidden}), 0, idx, g); });
    const mg::Tensor img = mg::randn({cfg.quick ? 8 : 64, 64, 32, 32});
    add("adaptive_avg_pool2d 1x1", dims({img.size(0), 64, 32, 32}), double(img.numel()) * 4,
        [&] { return mg::adaptive_avg_pool2d(img, {1, 1}); });
    std::vector<mg::Tensor> params;
    for (int64_t k = 0; k < 20; ++k) {
      mg::Tensor p = mg::zeros({cfg.quick ? 16384 : 262144});
      p.set_grad(mg::randn(p.shape()));
      params.push_back(p);
    }
    add("clip_grad_norm_ (no clip)", "20x" + std::to_string(params[0].numel()), double(20 * params[0].numel()) * 4,
        [&] { return mg::optim::clip_grad_norm_(params, 1e30); });
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_accum: %s\n", e.what());
    return 1;
  }
  bench::print_table(rows_out);
  if (!cfg.json.empty() && !bench::write_json(cfg.json, rows_out)) {
    std::fprintf(stderr, "bench_accum: cannot write %s\n", cfg.json.c_str());
    return 1;
  }
  return 0;
}
