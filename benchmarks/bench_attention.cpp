// bench_attention: scaled_dot_product_attention's fused op (ops/attention_fused.h) beside the
// composite it replaced (matmul, scale, masked_fill, softmax, dropout, matmul as public ops), in the
// same run: BERT-mini's self-attention [32, 4, 128, 64] and BERT-base's [64, 12, 128, 64] (quick:
// [2, 2, 16, 8]) in training form (a key-padding mask, dropout 0.1), f32 and bf16 (and f16 on
// CUDA), forward alone and forward + backward (the gradients of q, k and v of sum(y * c)).
// GFLOP/s counts the products the composite makes: 4·B·H·L²·E for the forward, three times that
// for forward + backward (the fused backward also recomputes the scores: one product more, not
// counted). The ratio is fused / composite (above 1: the fused op is faster). CPU by default,
// timed best of N with std::chrono; `--device cuda` on a GPU with CUDA events after a
// synchronisation (exits 77, skipped, without one).
//
//   bench_attention [--quick] [--threads N] [--json FILE] [--device cpu|cuda]
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "bench_common.h"
#include "bench_cuda_timing.h"
#include "core/factory.h"
#include "core/parallel.h"
#include "cuda/cuda.h"
#include "ops/attention.h"
#include "ops/loss.h"
#include "ops/norm.h"
#include "ops/ops.h"

namespace {

using bench::Row;
using namespace mg;

// Seconds per call on `device`: the best of `reps` (CUDA: bench_cuda_timing.h).
double seconds_per_call(const Device& device, int reps, const std::function<void()>& fn) {
  return device.is_cuda() ? bench::cuda_ms_per_call(reps, fn) * 1e-3 : bench::seconds_best_of(reps, fn);
}

// The composite the fused op replaced (ops/attention.cpp before it): the same masks and dropout.
Tensor composite(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& keep, double p, Generator& g) {
  const double s = 1.0 / std::sqrt(double(q.size(-1)));
  Tensor scores = matmul(q, transpose(k, -1, -2)) * s;
  scores = masked_fill(scores, eq(keep, scalar_tensor(0.0, {.dtype = DType::Bool, .device = keep.device()})), -INFINITY);
  return matmul(dropout(softmax(scores, -1), p, true, &g), v);
}

}  // namespace

int main(int argc, char** argv) {
  // --device is this program's own flag; the rest are bench_common's.
  Device device = Device::cpu();
  std::vector<char*> args{argv[0]};
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--device") == 0 && i + 1 < argc) {
      const std::string d = argv[++i];
      if (d != "cpu" && d != "cuda") {
        std::fprintf(stderr, "bench_attention: --device expects cpu or cuda, got '%s'\n", d.c_str());
        return 2;
      }
      device = d == "cuda" ? Device::cuda(0) : Device::cpu();
    } else {
      args.push_back(argv[i]);
    }
  }
  bench::Config cfg;
  if (const int rc = bench::parse_args(int(args.size()), args.data(), "bench_attention", cfg); rc >= 0) return rc;
  if (device.is_cuda() && !cuda::is_available()) {
    std::printf("bench_attention: skipped: no CUDA device (%s)\n", cuda::unavailable_reason().c_str());
    return 77;
  }
  set_num_threads(cfg.threads);
  const int reps = cfg.quick ? 1 : 5;
  std::printf("bench_attention: %s, %d threads, best of %d\n", device.str().c_str(), cfg.threads, reps);
  bench::print_load_average();
  const std::vector<Shape> shapes = cfg.quick ? std::vector<Shape>{{2, 2, 16, 8}}
                                              : std::vector<Shape>{{32, 4, 128, 64}, {64, 12, 128, 64}};
  std::vector<DType> dtypes{DType::F32, DType::BF16};
  if (device.is_cuda()) dtypes.push_back(DType::F16);
  const double p = 0.1;
  std::vector<Row> rows;
  try {
    for (const Shape& s : shapes) {
      const int64_t b = s[0], h = s[1], l = s[2], e = s[3];
      const double fwd_flop = 4.0 * double(b * h) * double(l) * double(l) * double(e);
      // Key padding: sample i keeps its first l - (i % 4) * l / 8 keys.
      std::vector<double> pad(std::size_t(b * l));
      for (int64_t i = 0; i < b; ++i) {
        for (int64_t j = 0; j < l; ++j) pad[std::size_t(i * l + j)] = j < l - (i % 4) * l / 8 ? 1.0 : 0.0;
      }
      const Tensor keep = from_vector(pad, {b, 1, 1, l}).to(DType::Bool).to(device);
      const std::string shape = std::to_string(b) + "x" + std::to_string(h) + "x" + std::to_string(l) + "x" +
                                std::to_string(e);
      for (DType dt : dtypes) {
        const TensorOptions o{.dtype = dt, .device = device};
        const Tensor q = randn(s).to(o.dtype).to(device).requires_grad_();
        const Tensor k = randn(s).to(o.dtype).to(device).requires_grad_();
        const Tensor v = randn(s).to(o.dtype).to(device).requires_grad_();
        const Tensor c = randn(s).to(o.dtype).to(device);
        Generator g(1);
        auto fused = [&] { return scaled_dot_product_attention(q, k, v, keep, p, false, std::nullopt, &g); };
        auto comp = [&] { return composite(q, k, v, keep, p, g); };
        auto fwd = [&](const std::function<Tensor()>& f) {
          return seconds_per_call(device, reps, [&] {
            NoGradGuard no_grad;
            bench::g_sink = double(f().numel());
          });
        };
        auto both = [&](const std::function<Tensor()>& f) {
          return seconds_per_call(device, reps, [&] {
            const Tensors gr = autograd::grad({sum(f() * c)}, {q, k, v});
            bench::g_sink = double(gr[0].numel());
          });
        };
        const double ff = fwd(fused), fc = fwd(comp), bf = both(fused), bc = both(comp);
        const std::string dts = dtype_name(dt);
        rows.push_back({"attention forward", dts, shape, fwd_flop / ff / 1e9, "GFLOP/s", "composite",
                        fwd_flop / fc / 1e9, fc / ff});
        rows.push_back({"attention forward+backward", dts, shape, 3 * fwd_flop / bf / 1e9, "GFLOP/s", "composite",
                        3 * fwd_flop / bc / 1e9, bc / bf});
        std::printf("  %-5s %-16s forward %8.2f ms (composite %8.2f), forward+backward %8.2f ms (composite %8.2f)\n",
                    dts.c_str(), shape.c_str(), ff * 1e3, fc * 1e3, bf * 1e3, bc * 1e3);
      }
    }
  } catch (const std::exception& ex) {
    std::fprintf(stderr, "bench_attention: %s\n", ex.what());
    return 1;
  }
  bench::print_table(rows);
  if (!cfg.json.empty() && !bench::write_json(cfg.json, rows)) {
    std::fprintf(stderr, "bench_attention: cannot write %s\n", cfg.json.c_str());
    return 1;
  }
  return 0;
}
