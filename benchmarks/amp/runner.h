// One bench_amp measurement: a model trained at one opt level and dtype. Builds the workload
// (workload.h) from the fixed seed, applies amp::initialize, runs the first warm-up step under
// the op recorder and refuses a level that did nothing (level_check.h), finishes the warm-up,
// then times N training steps — zero_grad, forward, loss, scaled backward with unscale and the
// inf/NaN check, optimizer step (skipped after an overflow) — each one separately. The loss is
// read once, after the timed steps, so no step waits for the device. Then, with
// profile_steps > 0, more steps under the timed op recorder for the time per op type.
//
// Timing: on the CPU each step's wall time is the steady clock around it. On CUDA it is the time
// between CUDA events recorded on the current stream before and after each step (no host wait
// in between; one event synchronise after the last step), so a step's time is the device's,
// including any gap where the device waited for the host; the steady clock around each step's
// launch is kept as host_s, and the host synchronisations of the timed steps are counted
// (cuda::sync_count) into syncs_per_step. Both devices record the process's CPU time per step.
//
// Decision: the peak memory of a configuration is measured from a reset just before its model
// is built: on the CPU the process's peak resident set (VmHWM, reset through
// /proc/self/clear_refs after the tensor cache is emptied), beside it the tensor allocator's own
// peak; on CUDA the caching allocator's peak. Each configuration builds and frees its own model,
// but per-thread scratch that earlier configurations grew stays (the CPU GEMM driver's conversion
// buffers, oneDNN's scratchpad): a level's CPU peak in a run of several levels can read a few MiB
// above the same level run alone (measured: MLP O3 bf16 205 -> 226 MiB RSS, 26 -> 31 MiB tensors).
// The PyTorch peer runs one configuration per process, so its pairs are not affected.
//
//   mg::bench::RunResult r = mg::bench::run_level("mlp", mg::amp::OptLevel::O1, mg::DType::BF16, {.steps = 20});
#pragma once
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "amp/properties.h"
#include "benchmarks/amp/level_check.h"
#include "core/device.h"
#include "core/dtype.h"
#include "core/memory_format.h"

namespace mg::bench {

struct RunOptions {
  Device device = Device::cpu();
  bool smoke = false;      // tiny model sizes (workload.h)
  uint64_t seed = 0;
  int warmup = 3;          // untimed steps first (at least 1: the level check records the first)
  int steps = 10;          // timed steps
  int profile_steps = 0;   // extra steps under the timed op recorder (0: no profile)
  int64_t batch = 0;       // samples per step (0: the workload's own)
  bool tf32 = false;       // O0 only, CUDA only: f32 GEMMs/convs on TF32 Tensor Cores
  // The layout the model trains in (amp::initialize's memory_format); none: channels-last for a
  // convnet on CUDA (cuDNN's Tensor Core convolutions are NHWC), contiguous otherwise.
  std::optional<MemoryFormat> memory_format;
  bool cudnn_benchmark = true;  // CUDA: time cuDNN's algorithms once per conv configuration (warm-up)
};

// One op type's share of a profiled step.
struct ProfileEntry {
  std::string op;         // "conv2d", "conv2d_backward", "(between ops)"
  bool backward = false;
  double calls = 0;       // per step
  double seconds = 0;     // per step
  double share = 0;       // of the profiled step's wall time
};

struct RunResult {
  std::string model, description, unit;  // from the workload
  int64_t batch = 0;
  amp::OptLevel level = amp::OptLevel::O0;
  DType dtype = DType::F32;       // the low dtype asked for (O0: f32)
  bool tf32 = false;              // O0 with TF32 Tensor Cores (CUDA)
  std::string label;              // "O1 bf16", "O0 f32", "O0 tf32"
  bool cuda = false;
  std::string timing;             // "steady clock" (CPU) or "cuda events"
  MemoryFormat memory_format = MemoryFormat::Contiguous;  // asked of amp::initialize
  bool cudnn_benchmark = false;   // CUDA runs only
  std::vector<double> wall_s, cpu_s;  // per timed step (wall: see Timing above)
  std::vector<double> host_s;     // per timed step: the steady clock around the step's launch
  double loop_wall_s = 0;         // the steady clock around all timed steps, the final wait included
  double syncs_per_step = -1;     // CUDA: host synchronisations per timed step (-1: CPU, not counted)
  double wall_median = 0, wall_min = 0, wall_max = 0, cpu_median = 0;
  double samples_per_s = 0;       // batch / wall_median
  double forward_flops = 0;       // GEMM/conv flops of one forward (op recorder)
  double step_flops = 0;          // forward_flops + the backward GEMM/conv flops (op recorder)
  double gflops = 0;              // step_flops / wall_median / 1e9
  int64_t peak_rss_bytes = -1;    // CPU: process peak RSS since the reset (-1: unknown)
  bool rss_reset = false;         // false: the kernel refused the reset; the peak is since start
  int64_t peak_tensor_bytes = 0;  // the tensor allocator's peak (CPU or CUDA)
  int loss_step = 0;              // the step whose loss is loss_final (warmup + steps)
  double loss_first = 0, loss_final = 0;
  double loss_scale = 1;          // at the end
  int64_t skipped_steps = 0;      // steps skipped after inf/NaN gradients
  LevelEvidence evidence;
  std::vector<ProfileEntry> profile;  // by time, largest first
};

// Runs one configuration; a level that did nothing throws LevelDidNothingError, bad input
// mg::Error. amp is reset before and after.
RunResult run_level(const std::string& model, amp::OptLevel level, DType dtype, const RunOptions& options);

// "O0 tf32" for O0 with TF32, else "<level> <dtype>".
std::string config_label(amp::OptLevel level, DType dtype, bool tf32);

// Median of a non-empty sample (the mean of the middle two for an even count).
double median(std::vector<double> v);

}  // namespace mg::bench
