// bench_cudnn_conv: conv2d forward, input gradient (dgrad) and weight gradient (wgrad) of every
// distinct conv shape of ResNet-50 (torchvision's v1.5: stride on the 3x3 conv) at batch 256 and
// 224x224 input, in f16 and bf16, channels-last (NHWC strides) inputs, weights and gradients,
// cuDNN benchmark mode on (as PyTorch's torch.backends.cudnn.benchmark = True), in TFLOP/s of
// 2 N O (C/groups) kH kW Ho Wo flops per direction. benchmarks/gpu/torch_peer.py --resnet50-conv
// measures PyTorch (cuDNN) on the same table in the same check run; check.sh prints the ratio.
// Until conv outputs keep the channels-last format (the MemoryFormat work in core/), each output
// is allocated NCHW by the dispatcher and the kernel copies its NHWC result into it: that copy is
// part of every figure here (PyTorch's outputs are channels-last, no copy).
// Timing: one call first (the algorithm search), then CUDA events around `reps` back-to-back calls,
// best of 5 batches. The JSON file is rewritten after every row, so a run stopped by check.sh's
// time limit keeps what it measured. Without a CUDA device it prints why and exits with 77 (skipped).
//
//   bench_cudnn_conv [--quick] [--json FILE]
#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "bench_common.h"
#include "bench_cuda_timing.h"
#include "core/factory.h"
#include "cuda/conv_settings.h"
#include "cuda/cuda.h"
#include "cuda/host/dnn_conv_plan.h"
#include "ops/conv.h"
#include "ops/ops.h"

namespace {

using bench::Row;
using namespace mg;

// One conv of ResNet-50: x [N, C, H, H] -> [N, O, Ho, Ho], k x k, stride, padding k / 2.
struct Layer {
  const char* name;
  int64_t C, H, O, k, stride;
};

// The distinct shapes (23), in network order; a shape used by several blocks is listed once.
const std::vector<Layer> kResNet50 = {
    {"conv1 7x7/2", 3, 224, 64, 7, 2},
    {"l1 1x1 64>64", 64, 56, 64, 1, 1},     {"l1 3x3 64", 64, 56, 64, 3, 1},
    {"l1 1x1 64>256", 64, 56, 256, 1, 1},   {"l1 1x1 256>64", 256, 56, 64, 1, 1},
    {"l2 1x1 256>128", 256, 56, 128, 1, 1}, {"l2 3x3/2 128", 128, 56, 128, 3, 2},
    {"l2 1x1 128>512", 128, 28, 512, 1, 1}, {"l2 ds 256>512/2", 256, 56, 512, 1, 2},
    {"l2 1x1 512>128", 512, 28, 128, 1, 1}, {"l2 3x3 128", 128, 28, 128, 3, 1},
    {"l3 1x1 512>256", 512, 28, 256, 1, 1}, {"l3 3x3/2 256", 256, 28, 256, 3, 2},
    {"l3 1x1 256>1024", 256, 14, 1024, 1, 1}, {"l3 ds 512>1024/2", 512, 28, 1024, 1, 2},
    {"l3 1x1 1024>256", 1024, 14, 256, 1, 1}, {"l3 3x3 256", 256, 14, 256, 3, 1},
    {"l4 1x1 1024>512", 1024, 14, 512, 1, 1}, {"l4 3x3/2 512", 512, 14, 512, 3, 2},
    {"l4 1x1 512>2048", 512, 7, 2048, 1, 1},  {"l4 ds 1024>2048/2", 1024, 14, 2048, 1, 2},
    {"l4 1x1 2048>512", 2048, 7, 512, 1, 1},  {"l4 3x3 512", 512, 7, 512, 3, 1},
};


Tensor nhwc_randn(const Shape& s, DType dt) {
  return cuda::in_layout(to(randn(s, {.device = Device::cuda(0)}), dt), cuda::ConvLayout::NHWC);
}

}  // namespace

int main(int argc, char** argv) {
  bench::Config cfg;
  if (const int rc = bench::parse_args(argc, argv, "bench_cudnn_conv", cfg); rc >= 0) return rc;
  if (!cuda::is_available()) {
    std::printf("bench_cudnn_conv: skipped: %s\n", cuda::unavailable_reason().c_str());
    return 77;
  }
  const cuda::DeviceProperties p = cuda::device_properties(0);
  std::printf("bench_cudnn_conv: %s (sm_%d%d, %d SMs), driver %d, cuDNN %d; batch %d, channels-last, "
              "cudnn benchmark mode, best of 5 x %d calls\n",
              p.name.c_str(), p.major, p.minor, p.sm_count, p.driver_version, cuda::cudnn_version(),
              cfg.quick ? 8 : 256, cfg.quick ? 2 : 10);
  const int64_t N = cfg.quick ? 8 : 256;
  const int reps = cfg.quick ? 2 : 10;
  cuda::set_cudnn_benchmark(true);
  std::vector<Row> rows;
  bool failed = false;
  std::vector<Layer> layers = kResNet50;
  if (cfg.quick) layers.resize(3);
  for (const DType dt : {DType::F16, DType::BF16}) {
    for (const Layer& l : layers) {
      const int64_t pad = l.k / 2, Ho = (l.H + 2 * pad - l.k) / l.stride + 1;
      const Conv2dOptions o{.stride = {l.stride, l.stride}, .padding = {pad, pad}};
      const Tensor x = nhwc_randn({N, l.C, l.H, l.H}, dt), w = nhwc_randn({l.O, l.C, l.k, l.k}, dt);
      const Tensor g = nhwc_randn({N, l.O, Ho, Ho}, dt);
      const double flops = 2.0 * double(N) * double(l.O) * double(l.C) * double(l.k * l.k) * double(Ho * Ho);
      const std::string shape = "[" + std::to_string(N) + ", " + std::to_string(l.C) + ", " + std::to_string(l.H) +
                                "] " + std::to_string(l.k) + "x" + std::to_string(l.k) + " O" + std::to_string(l.O);
      auto add = [&](const char* dir, const std::function<void()>& fn) {
        Row r{std::string("r50 ") + l.name + " " + dir, dtype_name(dt), shape};
        try {
          r.value = flops / (bench::cuda_ms_per_call(reps, fn) * 1e-3) / 1e12;
        } catch (const std::exception& e) {  // one shape cuDNN refuses: report it, measure the rest
          std::fflush(stdout);
          std::fprintf(stderr, "bench_cudnn_conv: %s %s failed: %s\n", r.name.c_str(), r.dtype.c_str(), e.what());
          failed = true;
          return;
        }
        r.unit = "TFLOP/s";
        rows.push_back(r);
        std::printf("%-28s %-5s %-28s %8.1f TFLOP/s\n", r.name.c_str(), r.dtype.c_str(), r.shape.c_str(), r.value);
        std::fflush(stdout);
        if (!cfg.json.empty()) (void)bench::write_json(cfg.json, rows);  // rows so far survive a time limit
      };
      add("fwd", [&] { (void)conv2d(x, w, {}, o); });
      add("dgrad", [&] { (void)conv2d_backward_input(g, w, {l.H, l.H}, o); });
      add("wgrad", [&] { (void)conv2d_backward_weight(x, g, {l.k, l.k}, o); });
    }
  }
  const cuda::DeviceMemoryStats s = cuda::memory_stats(0);
  std::printf("algorithm cache: %zu configurations; device memory: peak allocated %.2f GiB\n",
              cuda::cudnn_algo_cache_size(), double(s.peak_allocated) / (1 << 30));
  if (!cfg.json.empty() && !bench::write_json(cfg.json, rows)) {
    std::fprintf(stderr, "bench_cudnn_conv: cannot write %s\n", cfg.json.c_str());
    return 1;
  }
  return failed ? 1 : 0;
}
