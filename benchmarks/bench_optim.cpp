// bench_optim: one optimizer step over a real model's parameters (BERT-mini MLM, 11.2M f32
// parameters; --quick: BERT-tiny with a 1,024-token vocabulary) for every optimizer of optim/, in
// ms per step, beside AdamW's time measured in the same run, and the state each keeps (MiB, after
// the step). Adafactor runs twice: its fused CPU step and its generic path of public ops (what it
// runs on other devices), so the fusion's gain is measured. Muon, for 2-D hidden-layer weights
// only, steps the encoder's and the MLM head's matrices (not the embeddings: the "muon parameters"
// row), with its Newton–Schulz iteration in bf16 (its default) and in f32.
// Timing: the gradients are set once; one warm-up step (it makes the state), then the best of N
// steps in wall time and, as a second row, in process CPU time (all threads' CPU seconds).
// benchmarks/torch_optim_peer.py runs PyTorch's optimizers on the same shapes (it reads the
// "parameters" row of --json) and prints the ratios.
//
//   bench_optim [--quick] [--threads N] [--json FILE]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench_common.h"
#include "core/factory.h"
#include "core/generator.h"
#include "core/parallel.h"
#include "nn/models/bert.h"
#include "ops/ops.h"
#include "optim/generic_path.h"
#include "optim/optim.h"

namespace {

using bench::Row;

double cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

struct Timing {
  double wall_ms = 1e300, cpu_ms = 1e300;
};

// One warm-up step, then the best of `reps` (wall and CPU time separately).
Timing time_steps(mg::optim::Optimizer& opt, int reps) {
  opt.step();
  Timing t;
  for (int r = 0; r < reps; ++r) {
    const double c0 = cpu_seconds();
    const auto w0 = std::chrono::steady_clock::now();
    opt.step();
    const auto w1 = std::chrono::steady_clock::now();
    t.cpu_ms = std::min(t.cpu_ms, 1e3 * (cpu_seconds() - c0));
    t.wall_ms = std::min(t.wall_ms, std::chrono::duration<double, std::milli>(w1 - w0).count());
  }
  return t;
}

struct Case {
  std::string name;
  std::function<std::unique_ptr<mg::optim::Optimizer>(const mg::Tensors&)> make;
  bool generic = false;  // through the generic path (ForceGenericPathGuard)
  bool hidden_matrices = false;  // only the hidden layers' 2-D weights (Muon)
};

// The 2-D weights of the hidden layers: the attention and feed-forward matrices and the MLM head's
// transform, not the embeddings (BERT-tiny's [512, 128] position table has a hidden layer's shape).
bool is_hidden_matrix(const std::string& name, const mg::Tensor& p) {
  return p.dim() == 2 && name.find("embeddings") == std::string::npos;
}

std::vector<Case> cases() {
  using namespace mg::optim;
  return {
      {"SGD momentum", [](const mg::Tensors& ps) { return std::make_unique<SGD>(ps, SGDOptions{.lr = 0.1, .momentum = 0.9}); }},
      {"Adam", [](const mg::Tensors& ps) { return std::make_unique<Adam>(ps, AdamOptions{.lr = 1e-3}); }},
      {"AdamW", [](const mg::Tensors& ps) { return std::make_unique<AdamW>(ps, AdamWOptions{.lr = 1e-3}); }},
      {"LAMB", [](const mg::Tensors& ps) { return std::make_unique<LAMB>(ps, LAMBOptions{.lr = 1e-3}); }},
      {"RMSprop", [](const mg::Tensors& ps) { return std::make_unique<RMSprop>(ps, RMSpropOptions{.lr = 1e-2}); }},
      {"Adagrad", [](const mg::Tensors& ps) { return std::make_unique<Adagrad>(ps, AdagradOptions{.lr = 1e-2}); }},
      {"Adamax", [](const mg::Tensors& ps) { return std::make_unique<Adamax>(ps, AdamaxOptions{.lr = 2e-3}); }},
      {"NAdam", [](const mg::Tensors& ps) { return std::make_unique<NAdam>(ps, NAdamOptions{.lr = 2e-3}); }},
      {"RAdam", [](const mg::Tensors& ps) { return std::make_unique<RAdam>(ps, RAdamOptions{.lr = 1e-3}); }},
      {"Adadelta", [](const mg::Tensors& ps) { return std::make_unique<Adadelta>(ps, AdadeltaOptions{.lr = 1.0}); }},
      {"Rprop", [](const mg::Tensors& ps) { return std::make_unique<Rprop>(ps, RpropOptions{.lr = 1e-2}); }},
      {"ASGD", [](const mg::Tensors& ps) { return std::make_unique<ASGD>(ps, ASGDOptions{.lr = 1e-2}); }},
      {"Adafactor", [](const mg::Tensors& ps) { return std::make_unique<Adafactor>(ps, AdafactorOptions{.lr = 1e-2}); }},
      {"Adafactor (generic path)",
       [](const mg::Tensors& ps) { return std::make_unique<Adafactor>(ps, AdafactorOptions{.lr = 1e-2}); }, true},
      {"Muon (hidden matrices)", [](const mg::Tensors& ps) { return std::make_unique<Muon>(ps, MuonOptions{.lr = 0.02}); },
       false, true},
      {"Muon (hidden matrices, f32 iteration)",
       [](const mg::Tensors& ps) { return std::make_unique<Muon>(ps, MuonOptions{.lr = 0.02, .ns_bf16 = false}); },
       false, true},
  };
}

}  // namespace

int main(int argc, char** argv) {
  bench::Config cfg;
  if (const int rc = bench::parse_args(argc, argv, "bench_optim", cfg); rc >= 0) return rc;
  mg::set_num_threads(cfg.threads);
  const int reps = cfg.quick ? 2 : 10;
  std::vector<Row> rows;
  try {
    const mg::nn::models::BertConfig config =
        cfg.quick ? mg::nn::models::BertConfig::tiny(1024) : mg::nn::models::BertConfig::mini();
    mg::manual_seed(0);
    mg::nn::models::BertForMaskedLM model(config);
    const mg::Tensors params = model.parameters();
    std::vector<bool> hidden;
    for (const auto& [name, p] : model.named_parameters()) hidden.push_back(is_hidden_matrix(name, p));
    MG_CHECK(hidden.size() == params.size(), InternalError, "bench_optim: named_parameters() and parameters() differ");
    int64_t numel = 0, hidden_numel = 0;
    std::string shapes, hidden_shapes;
    for (std::size_t k = 0; k < params.size(); ++k) {
      const mg::Tensor& p = params[k];
      numel += p.numel();
      std::string s;
      for (int64_t d : p.shape()) s += (s.empty() ? "" : "x") + std::to_string(d);
      shapes += (shapes.empty() ? "" : ",") + (s.empty() ? std::string("scalar") : s);
      if (hidden[k]) {
        hidden_numel += p.numel();
        hidden_shapes += (hidden_shapes.empty() ? "" : ",") + s;
      }
    }
    std::printf("bench_optim: BERT-%s MLM, %zu parameters, %lld values (f32), %d threads, best of %d\n",
                cfg.quick ? "tiny (vocab 1024)" : "mini", params.size(), static_cast<long long>(numel), cfg.threads,
                reps);
    bench::print_load_average();
    rows.push_back({"parameters", "f32", shapes, double(numel), "values", "", 0, 0});
    rows.push_back({"muon parameters", "f32", hidden_shapes, double(hidden_numel), "values", "", 0, 0});
    std::vector<std::pair<Case, Timing>> measured;
    std::vector<double> state_mib;
    for (const Case& c : cases()) {
      // Fresh copies of the model's values for each optimizer, with fixed gradients.
      mg::Tensors ps;
      mg::Generator gen(1);
      for (std::size_t k = 0; k < params.size(); ++k) {
        if (c.hidden_matrices && !hidden[k]) continue;
        mg::Tensor q = mg::clone(params[k].detach()).requires_grad_();
        q.set_grad(mg::randn(q.shape(), {}, &gen) * 1e-2);
        ps.push_back(q);
      }
      std::unique_ptr<mg::optim::Optimizer> opt = c.make(ps);
      std::unique_ptr<mg::optim::ForceGenericPathGuard> force;
      if (c.generic) force = std::make_unique<mg::optim::ForceGenericPathGuard>();
      measured.emplace_back(c, time_steps(*opt, reps));
      state_mib.push_back(double(opt->state_bytes()) / (1 << 20));
    }
    double adamw_wall = 0, adamw_cpu = 0;
    for (const auto& [c, t] : measured) {
      if (c.name == "AdamW") adamw_wall = t.wall_ms, adamw_cpu = t.cpu_ms;
    }
    for (std::size_t k = 0; k < measured.size(); ++k) {
      const auto& [c, t] = measured[k];
      rows.push_back({c.name + " wall", "f32", "", t.wall_ms, "ms", "AdamW wall", adamw_wall, t.wall_ms / adamw_wall});
      rows.push_back({c.name + " cpu", "f32", "", t.cpu_ms, "ms", "AdamW cpu", adamw_cpu, t.cpu_ms / adamw_cpu});
      rows.push_back({c.name + " state", "f32", "", state_mib[k], "MiB", "", 0, 0});
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_optim: %s\n", e.what());
    return 1;
  }
  std::vector<Row> table(rows.begin() + 2, rows.end());  // the shapes rows are for the peer script
  bench::print_table(table);
  if (!cfg.json.empty() && !bench::write_json(cfg.json, rows)) {
    std::fprintf(stderr, "bench_optim: cannot write %s\n", cfg.json.c_str());
    return 1;
  }
  return 0;
}
