// bench_amp: the opt levels O0–O3 side by side (issues 15 and 16). Trains each chosen model —
// MLP, ResNet-20, BERT-mini; on a GPU also ResNet-50 and BERT-base (benchmarks/amp/workload.h) —
// at O0 (f32; on CUDA also TF32) and at O1, O2, O3 with f16 and with bf16 on a fixed synthetic
// batch from a fixed seed: a warm-up, then N separately timed training steps (zero_grad,
// forward, loss, scaled backward, unscale + inf/NaN check, optimizer step; on CUDA timed by
// events, with no host wait inside: benchmarks/amp/runner.h). For each configuration it prints
// the median step time and its spread, CPU time, samples/s, the speed-up over O0 f32, GEMM/conv
// GFLOP/s (forward and backward, beside the f32 FMA peak measured in the same run), peak memory,
// the loss after the same number of steps next to O0's, host synchronisations per step (CUDA)
// and the conv layout that ran; and it refuses (exit 3) a level that silently did nothing
// (benchmarks/amp/level_check.h). With --compare it runs nothing and puts earlier JSON lines
// beside the PyTorch peer's (benchmarks/amp/peer_compare.h).
//
//   build/benchmarks/bench_amp --threads 1 --models mlp,resnet20,bert-mini --steps 10
//   build/benchmarks/bench_amp --models mlp --dtypes bf16 --profile        # time per op type
//   build/benchmarks/bench_amp --quick --json run.jsonl --markdown /tmp/r.md # the CTest smoke run
//   build/benchmarks/bench_amp --record --note "machine shared with 2 builds"  # appends to RESULTS.md
//   build/benchmarks/bench_amp --device cuda --models resnet50 --o0 f32,tf32 --json ours.jsonl
//   build/benchmarks/bench_amp --compare ours.jsonl --peer torch.jsonl --markdown pairs.md
//
// Exit codes: 0 ok, 1 an error (e.g. DeviceError for --device cuda without a GPU), 2 a bad flag,
// 3 a level that did nothing.
#include <algorithm>
#include <cstdio>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "bench_common.h"
#include "benchmarks/amp/level_check.h"
#include "benchmarks/amp/machine.h"
#include "benchmarks/amp/peer_compare.h"
#include "benchmarks/amp/report.h"
#include "benchmarks/amp/runner.h"
#include "mg_build_commit.h"  // MG_BUILD_COMMIT: the commit this program was built from
#include "benchmarks/amp/workload.h"
#include "core/parallel.h"
#include "cuda/cuda.h"
#include "examples/common/flags.h"
#include "examples/common/training_run.h"
#include "ops/op.h"

using namespace mg;

namespace {

std::vector<std::string> split(const std::string& s) {
  std::vector<std::string> out;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) {
    if (!item.empty()) out.push_back(item);
  }
  return out;
}

std::string join_command(int argc, char** argv) { return mg::bench::shell_command(std::vector<std::string>(argv, argv + argc)); }

example::Flags make_flags() {
  example::Flags f("bench_amp", "Times training steps of the benchmark models at O0-O3 with f16 and bf16.");
  f.add_string("models", "", "comma-separated: mlp, resnet20, bert-mini, resnet50, bert-base "
               "(default: the first three; on cuda all five)", {.metavar = "LIST"});
  f.add_string("levels", "O0,O1,O2,O3", "comma-separated opt levels", {.metavar = "LIST"});
  f.add_string("dtypes", "f16,bf16", "comma-separated low-precision dtypes for O1-O3", {.metavar = "LIST"});
  f.add_string("o0", "", "O0's f32 math, comma-separated: f32 (strict), tf32 (CUDA Tensor Cores) "
               "(default: f32; on cuda f32,tf32)", {.metavar = "LIST"});
  f.add_choice("memory-format", "auto", {"auto", "contiguous", "channels-last"},
               "the layout the models train in (auto: channels-last for the ResNets on cuda, else contiguous)");
  f.add_bool("cudnn-benchmark", true, "on cuda, time cuDNN's conv algorithms once per configuration (in the warm-up)");
  f.add_int("batch", 0, "samples per step (0: each model's own)", {.min = 0});
  f.add_choice("device", "cpu", {"cpu", "cuda"}, "where to train");
  f.add_int("threads", 2, "CPU threads", {.min = 1, .max = 1024});
  f.add_int("warmup", 3, "untimed steps first (the first one is checked for the level's precision)", {.min = 1});
  f.add_int("steps", 10, "timed steps per configuration", {.min = 1});
  f.add_int("seed", 0, "seed of the initial weights, the batch and dropout", {.min = 0});
  f.add_bool("quick", false, "smoke run: tiny models, 1 warm-up and 2 timed steps unless given");
  f.add_bool("profile", false, "also print time per op type and its share of the step");
  f.add_int("profile-steps", 3, "steps measured by --profile", {.min = 1});
  f.add_int("profile-top", 12, "op types listed per configuration by --profile", {.min = 1});
  f.add_string("policy", "", "autocast policy overrides for the run, e.g. linear=fp32,matmul=fp32", {.metavar = "LIST"});
  f.add_string("json", "", "write one JSON object per configuration per line", {.metavar = "FILE"});
  f.add_string("markdown", "", "append the table in Markdown with machine, date, commit and command", {.metavar = "FILE"});
  f.add_bool("record", false, "append the Markdown to benchmarks/RESULTS.md of this source tree");
  f.add_string("note", "", "a line for the Markdown record (e.g. what else ran on the machine)", {.metavar = "TEXT"});
  f.add_string("compare", "", "run nothing: pair these bench_amp JSON lines with --peer's PyTorch lines", {.metavar = "FILE"});
  f.add_string("peer", "", "with --compare: the PyTorch peer's JSON lines (benchmarks/torch_amp_peer.py)", {.metavar = "FILE"});
  return f;
}

// --compare: our earlier measurements beside PyTorch's, ratios and targets (peer_compare.h).
int compare(const example::Flags& flags) {
  if (flags.value("peer").empty()) {
    throw example::FlagError("bench_amp: --compare needs --peer FILE (the PyTorch peer's JSON lines)");
  }
  const auto ours = mg::bench::read_measurements(flags.value("compare"));
  const auto peer = mg::bench::read_measurements(flags.value("peer"));
  // Each file must hold its own side's records (given the other way round, every row came out
  // "(missing)" with exit code 0).
  for (const auto& [file, records, want] : {std::tuple{"--compare", &ours, "mixgrad"}, std::tuple{"--peer", &peer, "pytorch"}}) {
    for (const mg::bench::Measurement& m : *records) {
      MG_CHECK(m.framework == want, Error, file, " ", flags.value(file + 2), " holds ",
               m.framework == "mixgrad" ? "bench_amp's" : "the PyTorch peer's", " records (", m.model, " ", m.config,
               "); ", file, " takes ", std::string(want) == "mixgrad" ? "bench_amp's --json lines" : "benchmarks/torch_amp_peer.py's");
    }
  }
  const auto rows = mg::bench::compare_with_peer(ours, peer);
  MG_CHECK(!rows.empty(), Error, "--compare: '", flags.value("compare"), "' holds no measurement");
  std::printf("%s", mg::bench::format_comparison(rows).c_str());
  if (!flags.value("json").empty()) mg::bench::write_comparison_json(flags.value("json"), rows);
  const std::vector<std::string> notes = {flags.value("note")};
  if (!flags.value("markdown").empty()) mg::bench::append_comparison_markdown(flags.value("markdown"), rows, notes);
  if (flags.get_bool("record")) {
    mg::bench::append_comparison_markdown(std::string(MG_SOURCE_DIR) + "/benchmarks/RESULTS.md", rows, notes);
  }
  return 0;
}

int run(int argc, char** argv) {
  example::Flags flags = make_flags();
  flags.parse(argc, argv);
  if (flags.help_requested()) {
    std::printf("%s", flags.usage().c_str());
    return 0;
  }
  if (!flags.value("compare").empty()) return compare(flags);
  if (!flags.value("peer").empty()) throw example::FlagError("bench_amp: --peer goes with --compare FILE");
  const bool quick = flags.get_bool("quick");
  const Device device = Device::parse(flags.value("device"));
  const int threads = int(flags.get_int("threads"));
  set_num_threads(threads);
  mg::bench::RunOptions ro{.device = device, .smoke = quick, .seed = uint64_t(flags.get_int("seed")),
                       .warmup = int(flags.given("warmup") || !quick ? flags.get_int("warmup") : 1),
                       .steps = int(flags.given("steps") || !quick ? flags.get_int("steps") : 2),
                       .profile_steps = flags.get_bool("profile") ? int(flags.get_int("profile-steps")) : 0,
                       .batch = flags.get_int("batch"),
                       .cudnn_benchmark = flags.get_bool("cudnn-benchmark")};
  if (flags.value("memory-format") != "auto") {
    ro.memory_format = flags.value("memory-format") == "channels-last" ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous;
  }
  const bool on_cuda = device.type == DeviceType::CUDA;
  std::vector<bool> o0_tf32;  // O0's rows: false strict f32, true TF32
  for (const std::string& m : split(flags.value("o0").empty() ? (on_cuda ? "f32,tf32" : "f32") : flags.value("o0"))) {
    if (m != "f32" && m != "tf32") throw example::FlagError("bench_amp: --o0 takes f32 and tf32, got '" + m + "'");
    if (m == "tf32" && !on_cuda) {
      throw example::FlagError("bench_amp: --o0 tf32 needs --device cuda (TF32 is a Tensor Core mode of the GPU)");
    }
    o0_tf32.push_back(m == "tf32");
  }
  // The library's parsers throw mg::Error; a bad flag value is a FlagError (exit status 2).
  const auto as_flag_error = [](const auto& parse) {
    try {
      return parse();
    } catch (const example::FlagError&) {
      throw;
    } catch (const Error& e) {
      throw example::FlagError(std::string("bench_amp: ") + e.what());
    }
  };
  std::vector<amp::OptLevel> levels;
  for (const std::string& l : split(flags.value("levels"))) {
    levels.push_back(as_flag_error([&] { return amp::parse_opt_level(l); }));
  }
  std::vector<DType> dtypes;
  for (const std::string& d : split(flags.value("dtypes"))) {
    const DType t = as_flag_error([&] { return amp::Setting(d).as_float_dtype("--dtypes"); });
    if (t != DType::F16 && t != DType::BF16) throw example::FlagError("bench_amp: --dtypes takes f16 and bf16, got '" + d + "'");
    dtypes.push_back(t);
  }
  if (levels.empty() || dtypes.empty()) throw example::FlagError("bench_amp: --levels and --dtypes need at least one entry");
  for (const std::string& p : split(flags.value("policy"))) {
    const auto eq = p.find('=');
    if (eq == std::string::npos) throw example::FlagError("bench_amp: --policy expects op=policy, got '" + p + "'");
    as_flag_error([&] {
      set_policy(p.substr(0, eq), policy_from_name(p.substr(eq + 1)));
      return 0;
    });
  }
  if (device.type == DeviceType::CUDA) cuda::check_device(device);  // DeviceError without a usable GPU
  std::vector<std::string> models = split(flags.value("models"));
  if (models.empty()) models = mg::bench::default_workloads(device);
  const std::vector<std::string> known = mg::bench::known_workloads();
  for (const std::string& m : models) {
    if (std::find(known.begin(), known.end(), m) == known.end()) {
      throw example::FlagError("bench_amp: --models: unknown model '" + m +
                               "'\n  hint: choose from mlp, resnet20, bert-mini, resnet50, bert-base");
    }
    // Refused once, up front (make_workload refuses them too, but per configuration, after the
    // header and the other models' runs).
    if ((m == "resnet50" || m == "bert-base") && !on_cuda && !quick) {
      throw example::FlagError("bench_amp: --models " + m + " runs on a GPU only (--device cuda); on the CPU a run "
                               "takes hours\n  hint: --models mlp,resnet20,bert-mini, or --quick for smoke sizes");
    }
  }

  mg::bench::Machine machine = mg::bench::describe_machine(threads, MG_SOURCE_DIR, MG_BUILD_COMMIT);
  if (on_cuda) {
    const cuda::DeviceProperties p = cuda::device_properties(device.index);
    machine.gpu = p.name;
    auto version = [](int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); };
    machine.gpu_driver = "CUDA driver " + version(p.driver_version) + ", runtime " + version(p.runtime_version);
  }
  const std::string command = join_command(argc, argv);
  ::bench::Config peak_cfg{.quick = true, .threads = threads};
  const double fma_peak = ::bench::fma_peak(peak_cfg, 3).value;
  std::printf("bench_amp: %s\n  %s, %s; load average %s; commit %s\n  warm-up %d, timed %d steps per configuration%s; "
              "f32 FMA peak on %d thread%s: %.0f GFLOP/s\n",
              command.c_str(), machine.summary().c_str(), machine.date_utc.c_str(), machine.load_average.c_str(),
              machine.commit.c_str(), ro.warmup, ro.steps, quick ? " (smoke sizes)" : "", threads, threads == 1 ? "" : "s",
              fma_peak);

  std::vector<mg::bench::RunResult> results;
  bool level_did_nothing = false, config_failed = false;  // exit 3 and exit 1
  for (const std::string& model : models) {
    struct Config {
      amp::OptLevel level;
      DType dtype;
      bool tf32;
    };
    std::vector<Config> configs;
    for (amp::OptLevel l : levels) {
      if (l != amp::OptLevel::O0) continue;
      for (bool tf32 : o0_tf32) configs.push_back({l, DType::F32, tf32});
    }
    for (DType d : dtypes) {
      for (amp::OptLevel l : levels) {
        if (l != amp::OptLevel::O0) configs.push_back({l, d, false});
      }
    }
    for (const Config& c : configs) {
      try {
        mg::bench::RunOptions o = ro;
        o.tf32 = c.tf32;
        results.push_back(mg::bench::run_level(model, c.level, c.dtype, o));
        const mg::bench::RunResult& r = results.back();
        std::printf("  %-10s %-8s %8.2f ms/step  %s\n", model.c_str(), r.label.c_str(), 1e3 * r.wall_median,
                    r.description.c_str());
      } catch (const mg::bench::LevelDidNothingError& e) {
        std::fflush(stdout);
        std::fprintf(stderr, "%s\n", e.what());
        level_did_nothing = true;
        continue;
      } catch (const Error& e) {  // one configuration failed (e.g. out of device memory): the others still run
        std::fflush(stdout);
        std::fprintf(stderr, "bench_amp: %s %s failed: %s\n", model.c_str(),
                     mg::bench::config_label(c.level, c.dtype, c.tf32).c_str(), e.what());
        config_failed = true;
        continue;
      }
      // Rewritten after every configuration, so a run cut short (a time limit) keeps what it measured.
      if (!flags.value("json").empty()) mg::bench::write_json_lines(flags.value("json"), results, machine, command);
    }
  }
  // Both kinds are reported; a broken level promise (3) outranks a failed configuration (1).
  const int status = level_did_nothing ? 3 : config_failed ? 1 : 0;
  if (results.empty()) return status;
  std::printf("\n%s", mg::bench::format_table(results).c_str());
  std::printf("GFLOP/s: the GEMM/conv flops of the forward and backward per median step (f32 FMA peak %.0f); peak RSS: the "
              "process's, reset before each model is built%s%s\n",
              fma_peak, on_cuda ? "; step ms: CUDA events around each step, one event wait after the last (syncs/step "
                                  "counts the host waits of the timed steps); tensors MiB: the caching allocator's peak"
                                : "",
              ro.smoke ? "; smoke sizes, the numbers mean nothing" : "");
  if (ro.profile_steps > 0) std::printf("%s", mg::bench::format_profiles(results, int(flags.get_int("profile-top"))).c_str());
  if (!flags.value("json").empty()) mg::bench::write_json_lines(flags.value("json"), results, machine, command);
  std::string note = flags.value("note");
  if (level_did_nothing) note += std::string(note.empty() ? "" : "; ") + "a level did nothing (exit 3): see stderr";
  if (config_failed) note += std::string(note.empty() ? "" : "; ") + "a configuration failed (exit 1): see stderr";
  if (!flags.value("markdown").empty()) mg::bench::append_markdown(flags.value("markdown"), results, machine, command, note);
  if (flags.get_bool("record")) {
    mg::bench::append_markdown(std::string(MG_SOURCE_DIR) + "/benchmarks/RESULTS.md", results, machine, command, note);
  }
  if (level_did_nothing) std::fprintf(stderr, "bench_amp: a level did nothing; its row is missing from the table (exit 3)\n");
  if (config_failed) std::fprintf(stderr, "bench_amp: a configuration failed; its row is missing from the table (exit 1)\n");
  return status;
}

}  // namespace

int main(int argc, char** argv) { return example::run_main("bench_amp", run, argc, argv); }
