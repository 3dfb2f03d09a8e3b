// What the training examples share around their training loop, so each main.cpp keeps only its
// own story: the program frame (line-buffered output, exit codes), the common flag handling, the
// checkpoint contents every example saves and restores the same way, and the side-effect-free
// memory probe.
//
//   int main(int argc, char** argv) { return run_main("train_resnet", run, argc, argv); }
//   int run(int argc, char** argv) {
//     Flags flags = make_flags();
//     if (!parse_flags(flags, argc, argv)) return 0;             // --help printed
//     ...
//     TrainingState state{*model, opt, sched, loader, history};
//     state.save(path, {{"train", train}});                    // and state.restore(checkpoint)
//   }
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "amp/grad_scaler.h"
#include "amp/overflow_tracer.h"
#include "amp/properties.h"
#include "core/device.h"
#include "core/state_dict.h"
#include "data/loader.h"
#include "examples/common/flags.h"
#include "examples/common/run_history.h"
#include "io/checkpoint.h"
#include "nn/module.h"
#include "optim/lr_scheduler.h"
#include "optim/optimizer.h"

namespace mg::example {

class DataParallel;  // examples/common/data_parallel.h

// main(): stdout line-buffered (progress lines reach log files and pipes as they happen), then
// run(argc, argv). A FlagError prints its message and returns 2; any other exception prints
// "<program>: <message>" and returns 1. Never a crash for bad input.
int run_main(const char* program, int (*run)(int, char**), int argc, char** argv);

// The flags every example takes, declared once: --opt-level, --dtype, --loss-scale, --device.
void add_amp_flags(Flags& flags);
// --threads, --log-every (default `log_every`), --read-metrics, --checkpoint, --checkpoint-every,
// --resume, --stop-after, --metrics, --plot, --precision-plan, --trace-overflow. `records` and
// `curves` say what the metrics file and the plot hold, for the usage text.
void add_run_flags(Flags& flags, int64_t log_every, const std::string& records, const std::string& curves);

// --read-metrics: whether each step's loss and accuracy stay on the device until a logging point
// (true: summed there by a DeviceTally, read every --log-every steps, at the epoch's end, an
// evaluation, a checkpoint or a stop) or are read after every step (false). "auto" reads at
// logging points on a CUDA device, where a read is a host synchronisation that stalls the GPU's
// queue, and every step on the CPU, where it costs nothing and a skipped step is reported at once.
// --cuda-graph always reads at logging points (a replayed step cannot read). Throws mg::Error for
// "log" with --trace-overflow, which needs every step's skip decision, and "step" with --cuda-graph.
bool metrics_read_at_log_points(const Flags& flags, Device device);

// The settings a resumed run must share with the saved one beyond its config line: the
// learning-rate schedule and the regularisation, as text ("lr 0.1, weight decay 0.0005, warmup 150
// steps"). Saved in the checkpoint's train state as "schedule"; on resume a different one is an
// mg::Error naming both (restoring the optimizer and the scheduler would otherwise mix the saved
// and the new settings silently). A checkpoint saved before "schedule" existed resumes unchecked.
std::string schedule_text(const std::vector<std::pair<std::string, double>>& settings);
void check_resumed_schedule(const StateDict& train, const std::string& path, const std::string& schedule);
// The flags a resumed run must repeat that neither the config line nor the schedule names, as
// text ("--seed 42, --keep-batchnorm-fp32 (the level's)"): the data order's seed and O2's
// batch-norm dtypes would otherwise fail deep in the restore (the loader's sampler_seed, the
// model's dtypes) with messages that name no flag. Saved as "settings"; absent: unchecked.
std::string resume_settings(const Flags& flags);
void check_resumed_settings(const StateDict& train, const std::string& path, const std::string& settings);

// A file the run will write (--checkpoint, --plot), checked before any work: a FlagError when it
// names a directory, or its directory does not exist or is not writable. Empty: nothing to check.
void check_output_path(const std::string& program, const std::string& flag, const std::string& path);

// Parses the flags; on --help prints the usage and returns false (the caller returns 0). Checks
// --device (training_device), the amp flags (amp_options) and the --checkpoint and --plot paths,
// and applies --threads (0: all cores).
bool parse_flags(Flags& flags, int argc, char** argv);

// amp::initialize's options from --opt-level, --dtype, --loss-scale, --device and, where the
// program declares them, --keep-batchnorm-fp32 and --channels-last; verbosity 0 (the examples
// print their own run line). Resolved here as amp::initialize will (amp::resolve_properties), so
// a value amp refuses is a FlagError naming the flag (exit 2, before any data is read). --dtype
// given at O0 is one too: O0 is f32 throughout and would silently ignore it.
amp::InitializeOptions amp_options(const Flags& flags);

// --device as a Device: "cpu", "cuda" (cuda:0; cuda:LOCAL_RANK under mixgrad-run) or "cuda:N". A CUDA device that cannot be used
// (a build without the backend, no driver, no GPU, an index out of range) is a DeviceError that
// says why; a malformed name is a FlagError. A CUDA device also becomes the calling thread's
// current device: what runs on the current device rather than a tensor's (a CUDA graph's capture
// stream and its replays, new streams) must run on cuda:N too.
Device training_device(const Flags& flags);
// The parsing half of training_device: `text` as a Device, where "cuda" (no index) is
// cuda:`local_rank` when the launcher set LOCAL_RANK (one GPU per process under mixgrad-run).
Device parse_training_device(const std::string& program, const std::string& text, const char* local_rank);

// The batch with every tensor on `device` (tensors already there are kept, not copied); pinned
// tensors are copied asynchronously (to(device, non_blocking)).
data::Batch to_device(data::Batch batch, Device device);

// The run's peak memory for the summary and the metrics: the process's peak resident set on the
// CPU, the caching allocator's peak of allocated bytes on a CUDA device.
int64_t peak_memory_bytes(Device device);

// The run's precision for labels and configurations: "O1 bf16", "O2 f16"; "O0 f32" whatever
// --dtype says, since O0 never uses the low-precision dtype.
std::string precision_label(const std::string& opt_level, const std::string& dtype);

// --trace-overflow's text for a skipped step: the tracer's full report for the first skipped step
// of the run (`first`), then one line per skipped step (the op, its direction and module path and
// the range of its inputs), so a long f16 run with many skips stays readable.
std::string skipped_step_trace(const amp::OverflowTracer& tracer, int64_t step, bool first);

// amp's checkpoint state (amp::state_dict()) with loss scaler 0 replaced by `scaler`'s state when
// `scaler` is given and enabled: --cuda-graph scales with a GradScaler of its own instead of amp's
// (the options are the same, examples/common/cuda_graph.h), so its scale and skip counters are
// what the checkpoint must hold, and a checkpoint resumes with or without --cuda-graph.
StateDict amp_checkpoint_state(const amp::GradScaler* scaler);
// Restores amp from such a state and, when `scaler` is given and enabled, `scaler` from its loss
// scaler 0.
void restore_amp_checkpoint_state(const StateDict& state, amp::GradScaler* scaler);

// The states of a run besides the model and the example's own: "optimizer" (with the f32 masters
// at O2), "scheduler", "loader" (position in the epoch; restored through reshard_loader_state, so a
// checkpoint of a data-parallel run resumes on any number of ranks with the same global batch),
// "rng" (the default generator), "amp" (every loss scaler; amp_checkpoint_state) and "history"
// (the curves of the plot).
struct TrainingState {
  nn::Module& model;
  optim::Optimizer& optimizer;
  optim::LRScheduler& scheduler;
  data::DataLoader& loader;
  RunHistory& history;
  amp::GradScaler* scaler = nullptr;  // --cuda-graph's scaler, saved as amp's loss scaler 0
  // Under data parallelism: the optimizer's state goes through it (--zero: gathered from every
  // rank's shard by DataParallel::optimizer_state before save, loaded as a shard by restore).
  DataParallel* data_parallel = nullptr;
  const StateDict* optimizer_state = nullptr;  // save(): the gathered state (null: optimizer.state_dict())

  // Writes a checkpoint (atomically) with these states plus `extra` (the example's "train" state...).
  void save(const std::string& path, const io::NamedStates& extra) const;
  // Restores the model and every state above from a checkpoint written by save().
  void restore(const io::Checkpoint& checkpoint) const;
};

// Runs f (a memory probe), then restores the model's parameters and buffers, drops its gradients
// and restores the default generator, so probing changes nothing about the run.
template <typename F>
void without_side_effects(nn::Module& model, F&& f) {
  nn::NamedTensors saved = model.state_dict();
  for (auto& [name, t] : saved) t = t.clone();
  const StateDict rng = generator_state(default_generator());
  f();
  model.load_state_dict(saved);
  model.zero_grad();
  load_generator_state(default_generator(), rng);
}

}  // namespace mg::example
