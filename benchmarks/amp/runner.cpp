// One bench_amp configuration, timed (see runner.h).
#include "benchmarks/amp/runner.h"

#include <time.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <memory>

#include "amp/initialize.h"
#include "benchmarks/amp/op_recorder.h"
#include "benchmarks/amp/workload.h"
#include "core/storage.h"
#include "cuda/conv_settings.h"
#include "cuda/cuda.h"
#include "examples/common/process_memory.h"

namespace mg::bench {

namespace {

double wall_now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

double cpu_now() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

// Resets the kernel's peak-RSS counter (VmHWM) to the current RSS; false when refused.
bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  if (!f) return false;
  f << "5";
  f.flush();
  return bool(f);
}

// Keeps amp's state from leaking into the next configuration, also when a step throws.
struct AmpResetGuard {
  AmpResetGuard() { amp::reset(); }
  ~AmpResetGuard() { amp::reset(); }
};

// Sets the TF32 and cuDNN benchmark switches for one configuration and restores them after.
struct CudaSwitchesGuard {
  CudaSwitchesGuard(bool tf32, bool cudnn_benchmark)
      : tf32_(cuda::allow_tf32()), benchmark_(cuda::cudnn_benchmark()) {
    cuda::set_allow_tf32(tf32);
    cuda::set_cudnn_benchmark(cudnn_benchmark);
  }
  ~CudaSwitchesGuard() {
    cuda::set_allow_tf32(tf32_);
    cuda::set_cudnn_benchmark(benchmark_);
  }
  bool tf32_, benchmark_;
};

}  // namespace

double median(std::vector<double> v) {
  MG_CHECK(!v.empty(), Error, "median: empty sample");
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

std::string config_label(amp::OptLevel level, DType dtype, bool tf32) {
  if (level == amp::OptLevel::O0) return tf32 ? "O0 tf32" : "O0 f32";
  return std::string(amp::opt_level_name(level)) + " " + dtype_name(dtype);
}

RunResult run_level(const std::string& model, amp::OptLevel level, DType dtype, const RunOptions& o) {
  MG_CHECK(o.steps >= 1, Error, "run_level: steps must be at least 1, got ", o.steps);
  MG_CHECK(dtype == DType::F16 || dtype == DType::BF16 || (level == amp::OptLevel::O0 && dtype == DType::F32), Error,
           "run_level: the low-precision dtype is f16 or bf16, got ", dtype_name(dtype));
  const bool cuda = o.device.type == DeviceType::CUDA;
  MG_CHECK(!o.tf32 || (level == amp::OptLevel::O0 && cuda), Error,
           "run_level: TF32 is a mode of O0 on CUDA (f32 GEMMs on Tensor Cores); got ", amp::opt_level_name(level),
           " on ", o.device.str(), "\n  hint: drop tf32, or run O0 with --device cuda");
  AmpResetGuard amp_guard;
  CudaSwitchesGuard switches(o.tf32, cuda && o.cudnn_benchmark);
  empty_cpu_cache();
  reset_cpu_peak_memory();
  if (cuda) {
    cuda::check_device(o.device);
    cuda::empty_cache();
    cuda::reset_peak_memory(o.device.index);
  }
  RunResult r;
  r.rss_reset = reset_peak_rss();

  Workload w = make_workload(model, {.device = o.device, .smoke = o.smoke, .seed = o.seed, .batch = o.batch});
  r.model = w.name;
  r.description = w.description;
  r.unit = w.unit;
  r.batch = w.batch;
  r.level = level;
  r.dtype = level == amp::OptLevel::O0 ? DType::F32 : dtype;
  r.tf32 = o.tf32;
  r.label = config_label(level, r.dtype, o.tf32);
  r.cuda = cuda;
  r.timing = cuda ? "cuda events" : "steady clock";
  r.cudnn_benchmark = cuda && o.cudnn_benchmark;
  r.memory_format = o.memory_format.value_or(cuda && w.convnet ? MemoryFormat::ChannelsLast : MemoryFormat::Contiguous);
  amp::initialize_models({w.net}, {w.optimizer.get()},
                         {.opt_level = amp::opt_level_name(level), .dtype = dtype_name(dtype == DType::F32 ? DType::BF16 : dtype),
                          .verbosity = 0, .device = o.device, .memory_format = r.memory_format});
  optim::Optimizer& opt = *w.optimizer;
  // One training step; returns the loss without reading it (a read waits for the device).
  auto step = [&] {
    opt.zero_grad();
    const Tensor loss = w.loss();
    amp::scale_loss(loss, opt).backward();
    opt.step();
    return loss;
  };

  // Warm-up step 1 under the op recorder: the level check, the layout and the forward flops.
  {
    OpRecorder rec;
    r.loss_first = step().item<double>();
    r.evidence = collect_evidence(rec, *w.net, opt);
    for (const auto& [key, s] : rec.stats()) {
      r.forward_flops += s.flops;
      r.step_flops += s.flops + s.backward_flops;
    }
  }
  check_level(level, r.dtype, r.evidence, w.name);
  for (int i = 1; i < o.warmup; ++i) step();

  Tensor last_loss;
  if (cuda) {
    const cuda::DeviceGuard device_guard(o.device.index);  // events live on the model's device
    // Event i marks the start of step i; event steps marks the end of the last one.
    std::vector<std::unique_ptr<cuda::Event>> marks;
    for (int i = 0; i <= o.steps; ++i) marks.push_back(std::make_unique<cuda::Event>(true));
    cuda::synchronize(o.device.index);  // the warm-up is done: the timed steps start on an idle device
    const uint64_t syncs0 = cuda::sync_count();
    const double loop0 = wall_now();
    marks[0]->record();
    for (int i = 0; i < o.steps; ++i) {
      const double w0 = wall_now(), c0 = cpu_now();
      last_loss = step();
      marks[i + 1]->record();
      r.host_s.push_back(wall_now() - w0);
      r.cpu_s.push_back(cpu_now() - c0);
    }
    r.syncs_per_step = double(cuda::sync_count() - syncs0) / o.steps;
    marks.back()->synchronize();
    r.loop_wall_s = wall_now() - loop0;
    for (int i = 0; i < o.steps; ++i) r.wall_s.push_back(1e-3 * marks[i]->elapsed_ms(*marks[i + 1]));
  } else {
    const double loop0 = wall_now();
    for (int i = 0; i < o.steps; ++i) {
      const double w0 = wall_now(), c0 = cpu_now();
      last_loss = step();
      r.wall_s.push_back(wall_now() - w0);
      r.cpu_s.push_back(cpu_now() - c0);
    }
    r.loop_wall_s = wall_now() - loop0;
    r.host_s = r.wall_s;
  }
  r.loss_final = last_loss.item<double>();
  r.loss_step = std::max(o.warmup, 1) + o.steps;
  r.wall_median = median(r.wall_s);
  r.cpu_median = median(r.cpu_s);
  r.wall_min = *std::min_element(r.wall_s.begin(), r.wall_s.end());
  r.wall_max = *std::max_element(r.wall_s.begin(), r.wall_s.end());
  r.samples_per_s = double(r.batch) / r.wall_median;
  r.gflops = r.step_flops / r.wall_median / 1e9;
  r.loss_scale = amp::loss_scale();
  r.skipped_steps = amp::loss_scaler().skipped_iterations();
  if (cuda) {
    r.peak_tensor_bytes = int64_t(cuda::memory_stats(o.device.index).peak_allocated);
  } else {
    r.peak_tensor_bytes = int64_t(cpu_memory_stats().peak_allocated);
    r.peak_rss_bytes = example::peak_rss_bytes();
  }

  if (o.profile_steps > 0) {
    OpRecorder rec({.timed = true});
    for (int i = 0; i < o.profile_steps; ++i) {
      // The step above with its non-op phases named, so the optimizer and the unscale are not
      // lumped into "(between ops)"; ops inside a phase still report as themselves.
      rec.begin_step();
      opt.zero_grad();
      rec.phase("(zero_grad)");
      const Tensor loss = w.loss();
      amp::ScaledLoss scaled = amp::scale_loss(loss, opt);
      scaled.value().backward();
      rec.phase("(autograd engine after the last backward op)");
      scaled.finish();
      rec.phase("(unscale + inf/NaN check, scale update)");
      opt.step();
      rec.phase("(optimizer step)");
      loss.item<double>();  // the profile times ops on the host: wait for each step
      rec.end_step();
    }
    const double n = double(o.profile_steps);
    for (const auto& [key, s] : rec.stats()) {
      if (s.seconds <= 0 && s.calls == 0) continue;
      r.profile.push_back({key.op, key.backward, double(s.calls) / n, s.seconds / n, s.seconds / rec.step_seconds()});
    }
    std::sort(r.profile.begin(), r.profile.end(), [](const ProfileEntry& a, const ProfileEntry& b) { return a.seconds > b.seconds; });
  }
  return r;
}

}  // namespace mg::bench
