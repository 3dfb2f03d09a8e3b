#include "examples/common/training_run.h"

#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <iostream>
#include <optional>

#include "amp/initialize.h"
#include "core/error.h"
#include "core/parallel.h"
#include "cuda/cuda.h"
#include "examples/common/data_parallel.h"
#include "examples/common/process_memory.h"

namespace mg::example {

int run_main(const char* program, int (*run)(int, char**), int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    return run(argc, argv);
  } catch (const FlagError& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

void add_amp_flags(Flags& f) {
  f.add_choice("opt-level", "O1", {"O0", "O1", "O2", "O3"},
               "O0 f32, O1 autocast, O2 low-precision model + f32 master weights, O3 pure low precision");
  f.add_choice("dtype", "bf16", {"f16", "bf16"}, "the low-precision dtype");
  f.add_string("loss-scale", "", "\"dynamic\" or a number (default: the opt level's: dynamic for f16, 1 for bf16)",
               {.metavar = "S"});
  f.add_string("device", "cpu", "where to train: cpu, cuda or cuda:N (under mixgrad-run, cuda is cuda:LOCAL_RANK)",
               {.metavar = "DEV"});
  f.add_bool("zero", false,
             "under mixgrad-run: shard the optimizer state and O2 master weights over the ranks (ZeRO stage 1; the "
             "same weights, less memory per rank)");
}

void add_run_flags(Flags& f, int64_t log_every, const std::string& records, const std::string& curves) {
  f.add_int("threads", 0, "CPU threads (0: all cores; at most 1024)", {.min = 0, .max = 1024});
  f.add_int("log-every", log_every, "steps between metrics records", {.min = 1});
  f.add_choice("read-metrics", "auto", {"auto", "step", "log"},
               "when the host reads the step's loss and accuracy: every step, or at logging points only (a GPU "
               "then never waits for the host between them); auto: log on CUDA, step on the CPU");
  f.add_int("checkpoint-every", 0, "steps between checkpoints (0: at the end of every epoch only)", {.min = 0});
  f.add_string("checkpoint", "", "write checkpoints to FILE", {.metavar = "FILE"});
  f.add_string("resume", "", "continue the run saved in FILE (bit-identical on the CPU)", {.metavar = "FILE"});
  f.add_int("stop-after", 0, "stop after N steps of this invocation, saving the checkpoint (continue with --resume)",
            {.min = 0});
  f.add_string("metrics", "", "write JSON lines (" + records + ") to FILE (a resumed run appends)", {.metavar = "FILE"});
  f.add_string("plot", "", "write an SVG plot of " + curves + " to FILE", {.metavar = "FILE.svg"});
  f.add_bool("precision-plan", false, "print which dtype each layer stores and runs in, and the memory it takes");
  f.add_bool("trace-overflow", false, "report the op (and module) that produced inf/NaN on every skipped step");
}

bool metrics_read_at_log_points(const Flags& flags, Device device) {
  const std::string& mode = flags.value("read-metrics");
  const bool graphed = flags.get_bool("cuda-graph");
  const bool tracing = flags.get_bool("trace-overflow");
  MG_CHECK(!(mode == "log" && tracing), Error, "--read-metrics log cannot be combined with --trace-overflow, which "
           "reports each skipped step as it happens\n  hint: drop --read-metrics (auto reads every step when tracing)");
  MG_CHECK(!(mode == "step" && graphed), Error, "--read-metrics step cannot be combined with --cuda-graph: a replayed "
           "step reads nothing back\n  hint: drop --read-metrics (--cuda-graph reads at logging points)");
  if (graphed || mode == "log") return true;
  return mode == "auto" && device.is_cuda() && !tracing;
}

std::string schedule_text(const std::vector<std::pair<std::string, double>>& settings) {
  std::string out;
  for (const auto& [name, value] : settings) {
    char buf[64];
    const auto res = std::to_chars(buf, buf + sizeof buf, value);  // the shortest text that reads back exactly
    out += (out.empty() ? "" : ", ") + name + " " + std::string(buf, res.ptr);
  }
  return out;
}

std::string resume_settings(const Flags& flags) {
  std::string out = "--seed " + flags.value("seed");
  if (flags.declared("keep-batchnorm-fp32")) {
    const std::string& keep = flags.value("keep-batchnorm-fp32");
    out += ", --keep-batchnorm-fp32 " + (keep.empty() ? std::string("(the level's)") : keep);
  }
  // The layout changes the CPU's results; the evaluation set is what the history's accuracies mean.
  if (flags.declared("channels-last")) out += std::string(", --channels-last ") + (flags.get_bool("channels-last") ? "true" : "false");
  if (flags.declared("eval-examples")) out += ", --eval-examples " + flags.value("eval-examples");
  // Restoring another optimizer's state is refused deep in the restore, naming no flag.
  if (flags.declared("optimizer")) out += ", --optimizer " + flags.value("optimizer");
  return out;
}

namespace {

// "--seed 42, --channels-last false" as (flag, value) pairs in order.
std::vector<std::pair<std::string, std::string>> settings_items(const std::string& s) {
  std::vector<std::pair<std::string, std::string>> out;
  std::size_t at = 0;
  while (at < s.size()) {
    std::size_t end = s.find(", --", at);
    if (end == std::string::npos) end = s.size();
    const std::string item = s.substr(at, end - at);
    const std::size_t space = item.find(' ');
    out.emplace_back(item.substr(0, space), space == std::string::npos ? "" : item.substr(space + 1));
    at = end == s.size() ? end : end + 2;
  }
  return out;
}

}  // namespace

void check_resumed_settings(const StateDict& train, const std::string& path, const std::string& settings) {
  const auto it = train.strings.find("settings");
  if (it == train.strings.end()) return;  // saved before the settings were recorded
  // Setting by setting: one a checkpoint predates (recorded by a later version) is not compared;
  // the error names the settings that differ.
  const auto saved = settings_items(it->second);
  std::string saved_shown, now_shown;
  for (const auto& item : settings_items(settings)) {
    const std::string& flag = item.first;  // not a structured binding: clang 14 cannot capture one
    const std::string& value = item.second;
    const auto s = std::find_if(saved.begin(), saved.end(), [&](const auto& kv) { return kv.first == flag; });
    if (s == saved.end() || s->second == value) continue;
    saved_shown += (saved_shown.empty() ? "" : ", ") + flag + " " + s->second;
    now_shown += (now_shown.empty() ? "" : ", ") + flag + " " + value;
  }
  MG_CHECK(saved_shown.empty(), Error, path, " was saved by a run with ", saved_shown, ", not ", now_shown,
           "\n  hint: resume with the flags of the saved run");
}

void check_resumed_schedule(const StateDict& train, const std::string& path, const std::string& schedule) {
  const auto it = train.strings.find("schedule");
  if (it == train.strings.end()) return;  // saved before the schedule was recorded
  MG_CHECK(it->second == schedule, Error, path, " was saved by a run with ", it->second, ", not ", schedule,
           "\n  hint: resume with the saved run's learning-rate, warmup, weight-decay and clipping flags; a new schedule "
           "needs a new run");
}

void check_output_path(const std::string& program, const std::string& flag, const std::string& path) {
  if (path.empty()) return;
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
    throw FlagError(program + ": --" + flag + " " + path + " is a directory\n  hint: give a file path in it");
  }
  const std::size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (::stat(dir.c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    throw FlagError(program + ": --" + flag + " " + path + ": the directory " + dir + " does not exist\n  hint: create it first");
  }
  if (::access(dir.c_str(), W_OK) != 0) {
    throw FlagError(program + ": --" + flag + " " + path + ": the directory " + dir + " is not writable");
  }
}

bool parse_flags(Flags& flags, int argc, char** argv) {
  flags.parse(argc, argv);
  if (flags.help_requested()) {
    std::cout << flags.usage();
    return false;
  }
  // A file flag given an empty name (an unset shell variable: --resume "$CKPT") would silently mean
  // "none": a fresh run that overwrites the checkpoint it was meant to continue.
  // Likewise the starting weights (--pretrained "" fine-tuned from scratch) and the amp settings
  // (an empty one meant the level's default).
  for (const char* name : {"checkpoint", "resume", "metrics", "plot", "pretrained", "hf"}) {
    if (flags.declared(name) && flags.given(name) && flags.value(name).empty()) {
      throw FlagError(flags.program() + ": --" + name + " was given an empty file name\n  hint: is the shell " +
                      "variable in --" + name + " \"$VAR\" unset? leave the flag out for none");
    }
  }
  for (const char* name : {"loss-scale", "keep-batchnorm-fp32"}) {
    if (flags.declared(name) && flags.given(name) && flags.value(name).empty()) {
      throw FlagError(flags.program() + ": --" + name + " was given an empty value\n  hint: is the shell " +
                      "variable in --" + name + " \"$VAR\" unset? leave the flag out for the opt level's default");
    }
  }
  // Flags that would be accepted and then do nothing.
  if (flags.get_int("checkpoint-every") > 0 && flags.value("checkpoint").empty()) {
    throw FlagError(flags.program() + ": --checkpoint-every needs --checkpoint FILE to write to");
  }
  if (flags.declared("checkpoint-form") && flags.given("checkpoint-form") && !flags.get_bool("checkpoint-activations")) {
    throw FlagError(flags.program() + ": --checkpoint-form chooses the form of --checkpoint-activations, which is off" +
                    "\n  hint: add --checkpoint-activations");
  }
  // Where the run writes at its end or after an epoch: checked now, not after the training.
  check_output_path(flags.program(), "checkpoint", flags.value("checkpoint"));
  check_output_path(flags.program(), "plot", flags.value("plot"));
  (void)training_device(flags);  // a bad --device fails before any data is read
  (void)amp_options(flags);      // so do a bad --loss-scale and --dtype at O0
  if (flags.get_int("threads") > 0) set_num_threads(int(flags.get_int("threads")));
  return true;
}

amp::InitializeOptions amp_options(const Flags& flags) {
  auto setting = [&](const char* name) {
    return !flags.declared(name) || flags.value(name).empty() ? amp::Setting() : amp::Setting(flags.value(name));
  };
  amp::InitializeOptions o{.opt_level = flags.value("opt-level"), .dtype = flags.value("dtype"),
                           .keep_batchnorm_fp32 = setting("keep-batchnorm-fp32"), .loss_scale = setting("loss-scale"),
                           .verbosity = 0, .device = training_device(flags)};
  if (flags.declared("channels-last") && flags.get_bool("channels-last")) o.memory_format = MemoryFormat::ChannelsLast;
  if (o.opt_level == "O0" && flags.given("dtype")) {
    throw FlagError(flags.program() + ": --dtype " + flags.value("dtype") +
                    " has no effect at --opt-level O0, which trains in f32 throughout\n  hint: drop --dtype, or "
                    "pick O1, O2 or O3");
  }
  try {
    (void)amp::resolve_properties(o);
  } catch (const Error& e) {
    std::string given;  // the amp flags as given, since amp's message names its own options
    for (const char* name : {"opt-level", "dtype", "loss-scale", "keep-batchnorm-fp32"}) {
      if (flags.declared(name) && flags.given(name)) given += std::string(" --") + name + " " + flags.value(name);
    }
    throw FlagError(flags.program() + ":" + given + ": " + e.what());
  }
  return o;
}

Device parse_training_device(const std::string& program, const std::string& text, const char* local_rank) {
  Device device;
  try {
    device = Device::parse(text);
  } catch (const Error& e) {
    throw FlagError(program + ": --device " + text + ": " + e.what() + "\n  hint: use cpu, cuda or cuda:N");
  }
  if (text == "cuda" && local_rank != nullptr && *local_rank != '\0') {
    // One GPU per process under mixgrad-run: "cuda" is this process's, cuda:LOCAL_RANK (NCCL
    // refuses two ranks on one device); an explicit cuda:N stays N.
    char* end = nullptr;
    const long r = std::strtol(local_rank, &end, 10);
    if (*end != '\0' || r < 0 || r > 1023) {
      throw FlagError(program + ": --device cuda: LOCAL_RANK is '" + local_rank + "', not a device index");
    }
    device = Device::cuda(int(r));
  }
  return device;
}

Device training_device(const Flags& flags) {
  const Device device = parse_training_device(flags.program(), flags.value("device"), std::getenv("LOCAL_RANK"));
  if (device.is_cuda()) {
    cuda::check_device(device);  // DeviceError: no backend, no driver, no such GPU
    cuda::set_device(device.index);
  }
  return device;
}

data::Batch to_device(data::Batch batch, Device device) {
  for (auto& [name, t] : batch.tensors) {
    // From pinned memory (DataLoader pin_memory) the copy is asynchronous: it runs on the current
    // stream ahead of the step's kernels, and the pinned block is not reused before it is done.
    if (t.device() != device) t = t.to(device, /*non_blocking=*/t.is_pinned());
  }
  return batch;
}

int64_t peak_memory_bytes(Device device) {
  if (device.is_cuda()) return int64_t(cuda::memory_stats(device.index).peak_allocated);
  return peak_rss_bytes();
}

std::string precision_label(const std::string& opt_level, const std::string& dtype) {
  return opt_level + " " + (opt_level == "O0" ? std::string("f32") : dtype);
}

std::string skipped_step_trace(const amp::OverflowTracer& tracer, int64_t step, bool first) {
  const std::optional<amp::OverflowReport> report = tracer.first();  // a copy: first() returns by value
  if (first || !report) return tracer.report();
  const amp::OverflowReport& r = *report;
  std::string line = "step " + std::to_string(step) + " skipped: inf/NaN " +
                     (r.inputs_finite ? "first produced by " : "first seen in ") + r.op +
                     (r.backward ? " (backward)" : " (forward)") + " in " +
                     (r.module_path.empty() ? std::string("<top level>") : r.module_path);
  if (!r.inputs.empty()) line += ", input 0 " + r.inputs[0].str();
  return line;
}

StateDict amp_checkpoint_state(const amp::GradScaler* scaler) {
  StateDict s = amp::state_dict();
  if (!scaler || !scaler->is_enabled()) return s;
  // Replaces loss scaler 0's keys (the same options); reads the device state: one synchronisation.
  add_prefixed(s, amp::loss_scaler_state_prefix(0), scaler->state_dict());
  return s;
}

void restore_amp_checkpoint_state(const StateDict& state, amp::GradScaler* scaler) {
  amp::load_state_dict(state);
  if (!scaler || !scaler->is_enabled()) return;
  scaler->load_state_dict(prefixed_part(state, amp::loss_scaler_state_prefix(0)));
}

void TrainingState::save(const std::string& path, const io::NamedStates& extra) const {
  io::NamedStates states{{"optimizer", optimizer_state ? *optimizer_state : optimizer.state_dict()},
                         {"scheduler", scheduler.state_dict()},
                         {"loader", loader.state()},           {"rng", generator_state(default_generator())},
                         {"amp", amp_checkpoint_state(scaler)}, {"history", history.state()}};
  states.insert(states.end(), extra.begin(), extra.end());
  io::save_checkpoint(path, model, states);
}

void TrainingState::restore(const io::Checkpoint& ck) const {
  ck.restore_model(model);
  if (data_parallel) data_parallel->load_optimizer_state(optimizer, ck.state("optimizer"));
  else optimizer.load_state_dict(ck.state("optimizer"));
  scheduler.load_state_dict(ck.state("scheduler"));
  loader.load_state(reshard_loader_state(ck.state("loader"), loader));  // saved on any number of ranks
  load_generator_state(default_generator(), ck.state("rng"));
  restore_amp_checkpoint_state(ck.state("amp"), scaler);
  history.load(ck.state("history"));
}

}  // namespace mg::example
