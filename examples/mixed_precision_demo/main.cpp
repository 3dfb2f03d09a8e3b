// mixed_precision_demo: the first program to run. Trains a small MLP (2 -> H -> H -> 3, GELU) on
// a seeded 3-class 2-D spiral on the CPU, with mixed precision done by hand: f32 master weights,
// each step casts weights and inputs to the compute dtype (bf16 by default), and the casts are
// differentiable, so the f32 weights receive f32 gradients. For f16 a static loss scale keeps small
// gradients from flushing to zero, and a step whose gradients overflowed is skipped. The same run
// is then repeated in f32 (same seed, same batches) and the two are printed side by side.
//
//   build/examples/mixed_precision_demo                  # bf16 vs f32
//   build/examples/mixed_precision_demo --dtype f16      # f16 with loss scale 1024 vs f32
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <numbers>
#include <string>
#include <string_view>
#include <vector>

#include "autograd/engine.h"
#include "autograd/grad_mode.h"
#include "core/factory.h"
#include "core/parallel.h"
#include "ops/ops.h"

namespace {

using mg::DType;
using mg::Tensor;

struct Config {
  DType dtype = DType::BF16;
  int64_t steps = 3000;
  int64_t batch = 128;
  int64_t hidden = 64;
  double lr = 0.1;
  uint64_t seed = 1337;
  int threads = 1;
  double loss_scale = 0.0;  // 0: 1024 for f16, 1 otherwise
};

// ---- data: a 3-class spiral ----

constexpr int64_t kClasses = 3;
constexpr int64_t kTrainSize = 3000;
constexpr int64_t kTestSize = 1000;
constexpr double kTurns = 1.5;   // turns of each arm from the centre to radius 1
constexpr double kNoise = 0.15;  // std of the angle noise, in radians

struct Dataset {
  Tensor x;  // [N, 2] f32
  Tensor y;  // [N] i64
};

// A point of class k at radius r in [0, 1) sits at angle 2*pi*(k/3 + kTurns*r) + noise. Every
// number comes from `gen` (Philox), so one seed gives the same data on every machine.
Dataset make_spiral(int64_t n, mg::Generator* gen) {
  const double two_pi = 2.0 * std::numbers::pi;
  Tensor y = mg::randint(0, kClasses, {n}, {.dtype = DType::I64}, gen);  // [N]
  Tensor r = mg::rand({n}, {}, gen);                                       // [N]
  Tensor theta = y.to(DType::F32) * (two_pi / kClasses) + r * (two_pi * kTurns) +
                 mg::randn({n}, {}, gen) * kNoise;                         // [N]
  Tensor x = mg::stack({r * mg::sin(theta), r * mg::cos(theta)}, 1);      // [N, 2]
  return {x, y};
}

// ---- model: MLP 2 -> H -> H -> 3 with GELU, f32 master weights ----

struct Mlp {
  Tensor w1, b1;  // [H, 2], [H]
  Tensor w2, b2;  // [H, H], [H]
  Tensor w3, b3;  // [3, H], [3]
  std::vector<Tensor> params() const { return {w1, b1, w2, b2, w3, b3}; }
};

// U(-1/sqrt(fan_in), 1/sqrt(fan_in)): the Kaiming-uniform default of a PyTorch Linear layer.
Tensor uniform_init(const mg::Shape& shape, int64_t fan_in, mg::Generator* gen) {
  const double bound = 1.0 / std::sqrt(double(fan_in));
  Tensor w = (mg::rand(shape, {}, gen) * 2.0 - 1.0) * bound;
  return w.requires_grad_();
}

Mlp make_mlp(int64_t hidden, mg::Generator* gen) {
  Mlp m;
  m.w1 = uniform_init({hidden, 2}, 2, gen);
  m.b1 = uniform_init({hidden}, 2, gen);
  m.w2 = uniform_init({hidden, hidden}, hidden, gen);
  m.b2 = uniform_init({hidden}, hidden, gen);
  m.w3 = uniform_init({kClasses, hidden}, hidden, gen);
  m.b3 = uniform_init({kClasses}, hidden, gen);
  return m;
}

// Logits in the compute dtype `dt`: the input and every weight are cast to it first.
Tensor mlp_forward(const Mlp& m, const Tensor& x, DType dt) {
  Tensor h1 = mg::gelu(mg::linear(x.to(dt), m.w1.to(dt), m.b1.to(dt)));  // [B, H]
  Tensor h2 = mg::gelu(mg::linear(h1, m.w2.to(dt), m.b2.to(dt)));         // [B, H]
  return mg::linear(h2, m.w3.to(dt), m.b3.to(dt));                        // [B, 3]
}

// Mean cross entropy, computed in f32 whatever the dtype of the logits.
Tensor cross_entropy(const Tensor& logits, const Tensor& y) {
  Tensor z = logits.to(DType::F32);                           // [B, 3]
  Tensor logp = z - mg::logsumexp(z, {1}, /*keepdim=*/true);  // [B, 3]
  return -mg::mean(mg::gather(logp, 1, y.unsqueeze(1)));      // [] (gathered: [B, 1])
}

struct Eval {
  double loss;
  double acc;
};

Eval evaluate(const Mlp& m, const Dataset& d, DType dt) {
  mg::NoGradGuard no_grad;
  Tensor logits = mlp_forward(m, d.x, dt);                              // [N, 3]
  Tensor correct = mg::eq(mg::argmax(logits, 1), d.y).to(DType::F32);  // [N]
  return {cross_entropy(logits, d.y).item<double>(), mg::mean(correct).item<double>()};
}

// ---- training ----

struct RunResult {
  DType dtype;
  Eval train, test;    // after the last step, on the whole training / held-out set
  double seconds;      // wall time of the training steps (evaluation excluded)
  int64_t skipped;     // steps skipped because a gradient was inf/NaN
};

std::string with_commas(int64_t v) {
  const std::string digits = std::to_string(v);
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}

// One training run in compute dtype `dt`. Weights and batches come from cfg.seed alone, so runs
// in different dtypes start from the same weights and see the same batches.
RunResult train(const Config& cfg, DType dt, const Dataset& train_set, const Dataset& test_set) {
  mg::Generator init_gen(cfg.seed + 1), batch_gen(cfg.seed + 2);
  Mlp model = make_mlp(cfg.hidden, &init_gen);
  std::vector<Tensor> params = model.params();
  std::vector<Tensor> momentum;
  for (const Tensor& p : params) momentum.push_back(mg::zeros_like(p));
  const double scale = cfg.loss_scale > 0 ? cfg.loss_scale : (dt == DType::F16 ? 1024.0 : 1.0);
  const int64_t print_every = std::max<int64_t>(1, cfg.steps / 6);
  std::printf("\n%s compute, f32 master weights, loss scale %g (loss: batch, acc: held-out)\n",
              mg::dtype_name(dt), scale);

  RunResult res{.dtype = dt, .seconds = 0.0, .skipped = 0};
  for (int64_t step = 1; step <= cfg.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    // a batch, sampled with replacement
    Tensor idx = mg::randint(0, kTrainSize, {cfg.batch}, {.dtype = DType::I64}, &batch_gen);  // [B]
    Tensor x = mg::index_select(train_set.x, 0, idx);  // [B, 2]
    Tensor y = mg::index_select(train_set.y, 0, idx);  // [B]
    // forward in the compute dtype, loss in f32
    Tensor logits = mlp_forward(model, x, dt);  // [B, 3]
    Tensor loss = cross_entropy(logits, y);     // []
    // zero grads, backward of the scaled loss: the casts send f32 gradients to the f32 weights
    for (const Tensor& p : params) p.set_grad(Tensor());
    (loss * scale).backward();
    bool finite = true;
    {
      mg::NoGradGuard no_grad;
      // unscale; an inf/NaN anywhere means the scaled gradients overflowed: skip the step
      for (const Tensor& p : params) {
        Tensor g = p.grad();  // same shape as p, f32
        if (scale != 1.0) g.mul_(1.0 / scale);
        finite = finite && std::isfinite(mg::sum(g).item<float>());
      }
      // SGD, momentum 0.9, learning rate on a cosine from cfg.lr down to 0
      const double progress = double(step - 1) / double(cfg.steps);
      const double lr = cfg.lr * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
      for (size_t i = 0; finite && i < params.size(); ++i) {
        momentum[i].mul_(0.9).add_(params[i].grad());
        params[i].sub_(momentum[i], lr);
      }
    }
    res.skipped += finite ? 0 : 1;
    const double loss_value = loss.item<double>();
    res.seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

    if (step % print_every == 0 || step == cfg.steps) {
      const Eval test = evaluate(model, test_set, dt);
      std::printf("step %5lld/%lld | loss %.4f | acc %.3f | %s samples/s\n", (long long)step,
                  (long long)cfg.steps, loss_value, test.acc,
                  with_commas(int64_t(double(step * cfg.batch) / res.seconds)).c_str());
    }
  }
  res.train = evaluate(model, train_set, dt);
  res.test = evaluate(model, test_set, dt);
  return res;
}

// ---- flags ----

void print_usage(std::FILE* out) {
  std::fprintf(out,
               "usage: mixed_precision_demo [flags]   (--flag value or --flag=value)\n"
               "  --dtype bf16|f16|f32  compute dtype of the mixed-precision run (default bf16)\n"
               "  --steps N             SGD steps per run (default 3000)\n"
               "  --batch N             batch size (default 128)\n"
               "  --hidden N            width H of the 2 -> H -> H -> 3 MLP (default 64)\n"
               "  --lr X                peak learning rate of SGD with momentum 0.9 and a cosine\n"
               "                        decay to 0 (default 0.1)\n"
               "  --seed N              seed of the data, weights and batches (default 1337)\n"
               "  --threads N           worker threads (default 1: the tensors here are so small\n"
               "                        that more threads mostly add fork/join cost)\n"
               "  --loss-scale X        static loss scale (default 1024 for f16, 1 otherwise)\n"
               "  --help                print this and exit\n");
}

template <typename T>
bool parse_number(std::string_view s, T& out) {
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size();
}

// Fills `cfg` from argv. Returns an empty string on success, else the message for the user.
std::string parse_flags(int argc, char** argv, Config& cfg, bool& help) {
  for (int i = 1; i < argc; ++i) {
    std::string_view flag = argv[i], value;
    if (flag == "--help" || flag == "-h") {
      help = true;
      continue;
    }
    if (!flag.starts_with("--")) return "unexpected argument '" + std::string(flag) + "'";
    if (const size_t eq = flag.find('='); eq != std::string_view::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      return std::string(flag) + " needs a value";
    }
    const std::string bad = "bad value '" + std::string(value) + "' for " + std::string(flag);
    const std::string want_int = bad + " (expected an integer >= 1)";
    const std::string want_pos = bad + " (expected a number > 0)";
    if (flag == "--dtype") {
      if (value == "bf16") cfg.dtype = DType::BF16;
      else if (value == "f16") cfg.dtype = DType::F16;
      else if (value == "f32") cfg.dtype = DType::F32;
      else return bad + " (expected bf16, f16 or f32)";
    } else if (flag == "--steps") {
      if (!parse_number(value, cfg.steps) || cfg.steps < 1) return want_int;
    } else if (flag == "--batch") {
      if (!parse_number(value, cfg.batch) || cfg.batch < 1) return want_int;
    } else if (flag == "--hidden") {
      if (!parse_number(value, cfg.hidden) || cfg.hidden < 1) return want_int;
    } else if (flag == "--lr") {
      if (!parse_number(value, cfg.lr) || !(cfg.lr > 0) || !std::isfinite(cfg.lr)) return want_pos;
    } else if (flag == "--seed") {
      if (!parse_number(value, cfg.seed)) return bad + " (expected an integer >= 0)";
    } else if (flag == "--threads") {
      if (!parse_number(value, cfg.threads) || cfg.threads < 1 || cfg.threads > 1024)
        return bad + " (expected an integer in 1..1024)";
    } else if (flag == "--loss-scale") {
      const bool ok = parse_number(value, cfg.loss_scale) && cfg.loss_scale > 0;
      if (!ok || !std::isfinite(cfg.loss_scale)) return want_pos;
    } else {
      return "unknown flag " + std::string(flag);
    }
  }
  return "";
}

}  // namespace

int main(int argc, char** argv) {
  Config cfg;
  bool help = false;
  if (const std::string err = parse_flags(argc, argv, cfg, help); !err.empty()) {
    std::fprintf(stderr, "mixed_precision_demo: %s\n  hint: --help lists the flags\n", err.c_str());
    return 2;
  }
  if (help) {
    print_usage(stdout);
    return 0;
  }
  try {
    mg::set_num_threads(cfg.threads);
    std::printf("mixed_precision_demo: trains a 2-%lld-%lld-3 GELU MLP on a 3-class spiral with %s "
                "compute and f32 master weights, then the same run in f32 (%lld steps, batch %lld, "
                "lr %g, seed %llu, %d thread%s)\n",
                (long long)cfg.hidden, (long long)cfg.hidden, mg::dtype_name(cfg.dtype),
                (long long)cfg.steps, (long long)cfg.batch, cfg.lr, (unsigned long long)cfg.seed,
                cfg.threads, cfg.threads == 1 ? "" : "s");
    const auto t0 = std::chrono::steady_clock::now();
    mg::Generator data_gen(cfg.seed);
    const Dataset train_set = make_spiral(kTrainSize, &data_gen);  // x [3000, 2], y [3000]
    const Dataset test_set = make_spiral(kTestSize, &data_gen);    // x [1000, 2], y [1000]

    const RunResult mixed = train(cfg, cfg.dtype, train_set, test_set);
    const RunResult ref = train(cfg, DType::F32, train_set, test_set);

    std::printf("\n%-5s | %-10s | %-13s | %-12s | %-7s | %-9s | %s\n", "dtype", "train loss",
                "held-out loss", "held-out acc", "train s", "samples/s", "skipped steps");
    for (const RunResult& r : {mixed, ref}) {
      std::printf("%-5s | %-10.4f | %-13.4f | %-12.3f | %-7.2f | %-9s | %lld\n",
                  mg::dtype_name(r.dtype), r.train.loss, r.test.loss, r.test.acc, r.seconds,
                  with_commas(int64_t(double(cfg.steps * cfg.batch) / r.seconds)).c_str(),
                  (long long)r.skipped);
    }
    const double max_diff = std::max(std::abs(mixed.train.loss - ref.train.loss),
                                     std::abs(mixed.test.loss - ref.test.loss));
    std::printf("max |final loss %s - final loss f32| (train and held-out): %.2e\n",
                mg::dtype_name(cfg.dtype), max_diff);
    std::printf("total wall time %.1f s\n",
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "mixed_precision_demo: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
