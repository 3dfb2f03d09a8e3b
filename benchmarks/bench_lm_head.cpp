// bench_lm_head: a language-model head's loss and gradients — linear_cross_entropy
// (ops/linear_cross_entropy.h, chunked) beside the unfused cross_entropy(linear(x, W, b), t) — in
// the same run: BERT-mini's MLM head over every position of a batch (32 x 128 rows, hidden 256,
// the BERT WordPiece vocabulary of 30522; quick: 64 rows, hidden 16, 500 classes), f32 and bf16
// autocast, forward + backward (the gradients of x, W and b). It prints the time (best of N, with
// the GFLOP/s of the three GEMMs, 6·N·in·V) and the peak of CPU memory allocated during the step
// above what was allocated before it (the logits and their gradient are what the fused op saves).
//
//   bench_lm_head [--quick] [--threads N] [--json FILE] [--chunk-rows N]   (0: the op's default)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "amp/autocast.h"
#include "autograd/engine.h"
#include "bench_common.h"
#include "core/factory.h"
#include "core/parallel.h"
#include "core/storage.h"
#include "ops/linear_cross_entropy.h"
#include "ops/loss.h"
#include "ops/ops.h"

namespace {

using bench::Row;
using namespace mg;

struct Measured {
  double seconds = 0;
  double peak_mib = 0;
};

// The step's best time of `reps`, and its peak allocation above the bytes allocated before it.
Measured measure(int reps, const std::function<void()>& step) {
  step();  // warm-up: weight casts, the allocator's cache
  Measured m;
  m.seconds = bench::seconds_best_of(reps, step);
  empty_cpu_cache();
  const std::size_t before = cpu_memory_stats().allocated;
  reset_cpu_peak_memory();
  step();
  m.peak_mib = double(cpu_memory_stats().peak_allocated - before) / (1 << 20);
  return m;
}

}  // namespace

int main(int argc, char** argv) {
  // --chunk-rows is this program's own flag; the rest are bench_common's.
  int64_t chunk_rows = 0;
  std::vector<char*> args{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--chunk-rows") == 0 && i + 1 < argc) {
      chunk_rows = std::atoll(argv[++i]);
      if (chunk_rows < 0) {
        std::fprintf(stderr, "bench_lm_head: --chunk-rows expects a count >= 0, got %s\n", argv[i]);
        return 2;
      }
    } else {
      args.push_back(argv[i]);
    }
  }
  bench::Config cfg;
  if (const int rc = bench::parse_args(int(args.size()), args.data(), "bench_lm_head", cfg); rc >= 0) return rc;
  set_num_threads(cfg.threads);
  const int reps = cfg.quick ? 1 : 3;
  const int64_t rows = cfg.quick ? 64 : 32 * 128, hidden = cfg.quick ? 16 : 256, vocab = cfg.quick ? 500 : 30522;
  std::printf("bench_lm_head: cpu, %d threads, best of %d, rows %lld, hidden %lld, vocab %lld, chunk rows %lld%s\n",
              cfg.threads, reps, (long long)rows, (long long)hidden, (long long)vocab, (long long)chunk_rows,
              chunk_rows == 0 ? " (the op's default)" : "");
  bench::print_load_average();
  const double flop = 6.0 * double(rows) * double(hidden) * double(vocab);
  const std::string shape = std::to_string(rows) + "x" + std::to_string(hidden) + "->" + std::to_string(vocab);
  std::vector<Row> rows_out;
  try {
    manual_seed(1);
    const Tensor x = randn({rows, hidden}).requires_grad_();
    const Tensor w = (randn({vocab, hidden}) * 0.05).requires_grad_();
    const Tensor b = zeros({vocab}).requires_grad_();
    const Tensor t = randint(0, vocab, {rows});
    for (const bool autocast : {false, true}) {
      auto run = [&](bool fused) {
        return [&, fused] {
          Tensor loss;
          {
            amp::Autocast ac({.enabled = autocast});
            loss = fused ? linear_cross_entropy(x, w, t, {.bias = b, .chunk_rows = chunk_rows}) : cross_entropy(linear(x, w, b), t);
          }
          const Tensors g = autograd::grad({loss}, {x, w, b});
          bench::g_sink = double(g[0].numel());
        };
      };
      const Measured f = measure(reps, run(true)), u = measure(reps, run(false));
      const std::string dt = autocast ? "bf16 autocast" : "f32";
      rows_out.push_back({"lm head forward+backward", dt, shape, flop / f.seconds / 1e9, "GFLOP/s", "unfused",
                          flop / u.seconds / 1e9, u.seconds / f.seconds});
      rows_out.push_back({"lm head peak memory", dt, shape, f.peak_mib, "MiB", "unfused", u.peak_mib,
                          u.peak_mib > 0 ? f.peak_mib / u.peak_mib : 0.0});
      std::printf("  %-13s fused %8.1f ms, peak %8.1f MiB | unfused %8.1f ms, peak %8.1f MiB\n", dt.c_str(),
                  f.seconds * 1e3, f.peak_mib, u.seconds * 1e3, u.peak_mib);
    }
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "bench_lm_head: %s\n", ex.what());
    return 1;
  }
  bench::print_table(rows_out);
  if (!cfg.json.empty() && !bench::write_json(cfg.json, rows_out)) {
    std::fprintf(stderr, "bench_lm_head: cannot write %s\n", cfg.json.c_str());
    return 1;
  }
  return 0;
}
