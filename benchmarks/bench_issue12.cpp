// bench_issue12: the four kernels that the summation rule and the accurate GELU of issue 12 made
// slower, in process CPU time per call (the median of N calls; all threads' CPU seconds, so with
// --threads 1 it is the single-thread cost; run with OMP_WAIT_POLICY=PASSIVE at 2 threads, or the
// idle worker's spinning is counted too):
//   column sums: sum over dim 0 of [4096, 1024] f32 and bf16 (a bias gradient), ms;
//   gelu, erf form: 8,192 cache-resident f32 values (compute bound), ns per element;
//   scatter_add as embedding backward: [16384, 256] rows into [8192, 256], ms;
//   log_softmax (and softmax) of [8192, 1000] f32, GB/s of read + written bytes;
//   scatter_add in general (index rows with many targets, some frequent), beside the
//   pre-issue-12 loop run on the same arrays in this process;
// and issue 16's slow rows on BERT-mini MLM shapes (seq 128, batch 32: 4096 tokens, O1 bf16):
//   gelu_backward [4096, 1024] bf16, softmax and softmax_backward [32, 4, 128, 128] f32,
//   log_softmax_backward [8192, 1000] f32, cross_entropy and its backward on [4096, 8192] f32
//   logits with 15% of the rows labelled (the rest ignore_index), and relu forward and backward
//   on ResNet-20's [128, 16, 32, 32] bf16, and batch norm (training, f32 weights) forward and
//   forward + backward (autograd::grad) on it, in ms and GB/s.
// For before/after numbers run two builds' binaries alternately and take the median of the runs.
// It uses only the public API, so the same file builds against an older tree to compare: e.g.
//   g++ -O3 -march=native -std=c++20 -fopenmp -I<this tree>/benchmarks -I<old tree>
//       bench_issue12.cpp <old tree>/build/libmixgrad.a -lgomp -ldnnl -lz
// and runs alternate with this build's binary (the host is shared and noisy).
//
//   bench_issue12 [--quick] [--threads N] [--json FILE]
#include <omp.h>

#include <algorithm>
#include <cstdio>
#include <ctime>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "bench_common.h"
#include "core/parallel.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/ops.h"

namespace {

using bench::g_sink;
using bench::Row;

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Median CPU seconds of one call of op over `reps` calls, after one warm-up call.
double median_cpu_seconds(int reps, const std::function<mg::Tensor()>& op) {
  g_sink = double(op().numel());
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    const double t0 = cpu_seconds();
    g_sink = double(op().numel());
    t.push_back(cpu_seconds() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// The pre-issue-12 scatter_add loop (d7c2637, f32, dim 0, contiguous, one thread): per column j,
// out[index[i][j]][j] += src[i][j] in row order, each index checked. A running total per element,
// not the summation rule: the speed the rule's bookkeeping is compared with.
void plain_scatter_columns(float* out, const int64_t* index, const float* src, int64_t n, int64_t d, int64_t size) {
  for (int64_t j = 0; j < d; ++j) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t v = index[i * d + j];
      if (v < 0 || v >= size) throw std::out_of_range("plain_scatter_columns: index out of range");
      out[v * d + j] += src[i * d + j];
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  bench::Config cfg;
  if (const int rc = bench::parse_args(argc, argv, "bench_issue12", cfg); rc >= 0) return rc;
  mg::set_num_threads(cfg.threads);
  const int reps = cfg.quick ? 3 : 41;
  std::printf("bench_issue12: %d threads, median of %d calls, process CPU time\n\n", cfg.threads, reps);
  bench::print_load_average();

  std::vector<Row> rows;
  try {
    const int64_t n_rows = cfg.quick ? 512 : 4096, n_cols = 1024;
    const mg::Tensor m = mg::randn({n_rows, n_cols});
    const mg::Tensor mb = mg::to(m, mg::DType::BF16);
    const std::string ms = std::to_string(n_rows) + "x" + std::to_string(n_cols);
    rows.push_back({"sum dim 0 (columns)", "f32", ms, 1e3 * median_cpu_seconds(reps, [&] { return mg::sum(m, {0}); }), "ms"});
    rows.push_back({"sum dim 0 (columns)", "bf16", ms, 1e3 * median_cpu_seconds(reps, [&] { return mg::sum(mb, {0}); }), "ms"});

    // gelu: 200 calls on 8,192 values per timed call (the tensor stays in L1/L2)
    const mg::Tensor g = mg::randn({8192});
    const int calls = cfg.quick ? 10 : 200;
    const double gelu = median_cpu_seconds(reps, [&] {
      mg::Tensor y;
      for (int k = 0; k < calls; ++k) y = mg::gelu(g);
      return y;
    });
    rows.push_back({"gelu (erf), cache-resident", "f32", "8192", 1e9 * gelu / (calls * 8192.0), "ns/elem"});

    const int64_t tokens = cfg.quick ? 1024 : 16384, vocab = 8192, hidden = 256;
    std::vector<int64_t> iv(static_cast<std::size_t>(tokens));
    for (int64_t i = 0; i < tokens; ++i) iv[std::size_t(i)] = (i * 7919) % vocab;
    const mg::Tensor idx =
        mg::contiguous(mg::expand(mg::reshape(mg::from_vector<int64_t>(iv, {tokens}), {tokens, 1}), {tokens, hidden}));
    const mg::Tensor src = mg::randn({tokens, hidden});
    rows.push_back({"scatter_add (embedding bw)", "f32", std::to_string(tokens) + "x256>8192",
                    1e3 * median_cpu_seconds(reps, [&] { return mg::scatter_add(mg::zeros({vocab, hidden}), 0, idx, src); }),
                    "ms"});

    const int64_t lines = cfg.quick ? 512 : 8192, classes = 1000;
    const mg::Tensor logits = mg::randn({lines, classes});
    const double bytes = 2.0 * double(lines * classes) * 4;
    const std::string ls = std::to_string(lines) + "x1000";
    rows.push_back({"log_softmax", "f32", ls, bytes / median_cpu_seconds(reps, [&] { return mg::log_softmax(logits, 1); }) / 1e9,
                    "GB/s"});
    rows.push_back({"softmax", "f32", ls, bytes / median_cpu_seconds(reps, [&] { return mg::softmax(logits, 1); }) / 1e9,
                    "GB/s"});

    // scatter_add, general case: the same shapes, but the targets of an index row differ from
    // column to column, and a quarter of the rows send column j to the frequent target j mod 8
    // (4096 terms: 32 leaves of the rule for that element). The peer is the pre-issue-12 loop
    // (d7c2637: per column, a plain in-order scatter with the range check), on the same arrays.
    {
      std::vector<int64_t> gv(static_cast<std::size_t>(tokens * hidden));
      for (int64_t i = 0; i < tokens; ++i) {
        for (int64_t j = 0; j < hidden; ++j) {
          gv[std::size_t(i * hidden + j)] = i % 4 == 0 ? j % 8 : (i * 7919 + j * 13) % vocab;
        }
      }
      const mg::Tensor gidx = mg::from_vector<int64_t>(gv, {tokens, hidden});
      const std::string gs = std::to_string(tokens) + "x256>8192";
      rows.push_back({"scatter_add (general)", "f32", gs,
                      1e3 * median_cpu_seconds(reps, [&] { return mg::scatter_add(mg::zeros({vocab, hidden}), 0, gidx, src); }),
                      "ms"});
      rows.push_back({"scatter_add (general) peer", "f32", gs, 1e3 * median_cpu_seconds(reps, [&] {
                        mg::Tensor out = mg::zeros({vocab, hidden});
                        plain_scatter_columns(out.data<float>(), gidx.data<int64_t>(), src.data<float>(), tokens, hidden, vocab);
                        return out;
                      }),
                      "ms"});
    }

    // issue 16's rows (BERT-mini MLM, seq 128, batch 32, O1 bf16): ms per call and GB/s of the
    // bytes each call must read and write.
    {
      const int64_t bt = cfg.quick ? 512 : 4096;  // tokens
      const mg::Tensor hx = mg::to(mg::randn({bt, 1024}), mg::DType::BF16);
      const mg::Tensor hg = mg::to(mg::randn({bt, 1024}), mg::DType::BF16);
      const std::string hs = std::to_string(bt) + "x1024";
      const double hb = 3.0 * double(bt * 1024) * 2;
      const double gb = median_cpu_seconds(reps, [&] { return mg::gelu_backward(hg, hx); });
      rows.push_back({"gelu_backward (erf)", "bf16", hs, 1e3 * gb, "ms"});
      rows.push_back({"gelu_backward (erf)", "bf16", hs, hb / gb / 1e9, "GB/s"});
      const double gt = median_cpu_seconds(reps, [&] { return mg::gelu_backward(hg, hx, mg::GeluApprox::Tanh); });
      rows.push_back({"gelu_backward (tanh)", "bf16", hs, hb / gt / 1e9, "GB/s"});

      const int64_t batch = cfg.quick ? 4 : 32;
      const mg::Tensor scores = mg::randn({batch, 4, 128, 128});
      const mg::Tensor sg = mg::randn({batch, 4, 128, 128});
      const std::string ss = std::to_string(batch) + "x4x128x128";
      const double sb = double(scores.numel()) * 4;
      const mg::Tensor probs = mg::softmax(scores, 3);
      const double sf = median_cpu_seconds(reps, [&] { return mg::softmax(scores, 3); });
      rows.push_back({"softmax", "f32", ss, 1e3 * sf, "ms"});
      rows.push_back({"softmax", "f32", ss, 2 * sb / sf / 1e9, "GB/s"});
      const double sbw = median_cpu_seconds(reps, [&] { return mg::softmax_backward(sg, probs, 3); });
      rows.push_back({"softmax_backward", "f32", ss, 1e3 * sbw, "ms"});
      rows.push_back({"softmax_backward", "f32", ss, 3 * sb / sbw / 1e9, "GB/s"});
      const mg::Tensor lp = mg::log_softmax(logits, 1);
      const mg::Tensor lg = mg::randn({lines, classes});
      rows.push_back({"log_softmax_backward", "f32", ls,
                      3.0 * double(lines * classes) * 4 / median_cpu_seconds(reps, [&] { return mg::log_softmax_backward(lg, lp, 1); }) / 1e9,
                      "GB/s"});

      // MLM loss: [tokens, 8192] f32 logits, 15% of the rows labelled, the rest ignore_index.
      const int64_t cv = 8192;
      const mg::Tensor cl = mg::randn({bt, cv});
      std::vector<int64_t> tv(static_cast<std::size_t>(bt));
      for (int64_t i = 0; i < bt; ++i) tv[std::size_t(i)] = (i * 2654435761) % 100 < 15 ? (i * 7919) % cv : -100;
      const mg::Tensor ct = mg::from_vector<int64_t>(tv, {bt});
      const std::string cs = std::to_string(bt) + "x8192";
      const double cf = median_cpu_seconds(reps, [&] { return mg::cross_entropy(cl, ct); });
      rows.push_back({"cross_entropy (15% rows)", "f32", cs, 1e3 * cf, "ms"});
      const mg::Tensor one = mg::ones({});
      const double cb = median_cpu_seconds(reps, [&] { return mg::cross_entropy_backward(one, cl, ct); });
      rows.push_back({"cross_entropy_bw (15% rows)", "f32", cs, 1e3 * cb, "ms"});
      rows.push_back({"cross_entropy_bw (15% rows)", "f32", cs, 2.0 * double(bt * cv) * 4 / cb / 1e9, "GB/s"});

      // ReLU on ResNet-20's first stage under O1 ([128, 16, 32, 32] bf16): forward, and the
      // backward rule's ops, where(y > 0, g, 0).
      const int64_t rn = cfg.quick ? 16 : 128;
      const mg::Tensor ra = mg::to(mg::randn({rn, 16, 32, 32}), mg::DType::BF16);
      const mg::Tensor rg = mg::to(mg::randn({rn, 16, 32, 32}), mg::DType::BF16);
      const mg::Tensor ry = mg::relu(ra);
      const std::string rs = std::to_string(rn) + "x16x32x32";
      const double rf = median_cpu_seconds(reps, [&] { return mg::relu(ra); });
      rows.push_back({"relu", "bf16", rs, 2.0 * double(ra.numel()) * 2 / rf / 1e9, "GB/s"});
      const mg::Tensor rz = mg::zeros({}, {.dtype = mg::DType::BF16});
      const double rb = median_cpu_seconds(reps, [&] { return mg::where(mg::gt(ry, rz), rg, rz); });
      rows.push_back({"relu backward (where(y>0,g,0))", "bf16", rs, 1e3 * rb, "ms"});
      rows.push_back({"relu backward (where(y>0,g,0))", "bf16", rs, 3.0 * double(ra.numel()) * 2 / rb / 1e9, "GB/s"});

      // Batch norm (training) on the same shape, bf16 input with f32 weights and running stats as
      // under O1: the forward alone, and forward + backward through autograd (dx, dweight, dbias).
      const mg::Tensor bw = mg::ones({16}).requires_grad_(), bb = mg::zeros({16}).requires_grad_();
      const mg::Tensor rm = mg::zeros({16}), rv = mg::ones({16});
      rows.push_back({"batch_norm forward (train)", "bf16", rs,
                      1e3 * median_cpu_seconds(reps, [&] { return mg::batch_norm(ra, bw, bb, rm, rv, true); }), "ms"});
      const mg::Tensor bx = ra.clone().requires_grad_();
      rows.push_back({"batch_norm forward+backward", "bf16", rs, 1e3 * median_cpu_seconds(reps, [&] {
                        return mg::autograd::grad({mg::batch_norm(bx, bw, bb, rm, rv, true)}, {bx, bw, bb}, {rg})[0];
                      }),
                      "ms"});
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_issue12: %s\n", e.what());
    return 1;
  }
  // bench::print_table shows one decimal; these values need three.
  std::printf("%-28s %-6s %-14s %12s %s\n", "name", "dtype", "shape", "value", "unit");
  for (const Row& r : rows) {
    std::printf("%-28s %-6s %-14s %12.3f %s\n", r.name.c_str(), r.dtype.c_str(), r.shape.c_str(), r.value, r.unit.c_str());
  }
  if (!cfg.json.empty() && !bench::write_json(cfg.json, rows)) {
    std::fprintf(stderr, "bench_issue12: cannot write %s\n", cfg.json.c_str());
    return 1;
  }
  return 0;
}
