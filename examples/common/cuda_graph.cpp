#include "examples/common/cuda_graph.h"

#include "amp/initialize.h"
#include "core/error.h"

namespace mg::example {

void add_cuda_graph_flag(Flags& flags) {
  flags.add_bool("cuda-graph", false,
                 "GPU: capture one whole training step into a CUDA graph after a short eager warm-up and replay it "
                 "(losses are read at logging points)");
}

void check_cuda_graph(const CudaGraphRequest& r) {
  const std::string who = "--cuda-graph";  // run_main prefixes the program's name
  MG_CHECK(r.device.is_cuda(), Error, who, " needs a CUDA device, got --device ", r.device.str(),
           "\n  hint: add --device cuda on a machine with an NVIDIA GPU, or drop --cuda-graph");
  MG_CHECK(!r.data_parallel, Error, who, " does not run under mixgrad-run yet (the gradient all-reduce is not captured)",
           "\n  hint: train on one process, or drop --cuda-graph");
  MG_CHECK(!r.trace_overflow, Error, who, " cannot be combined with --trace-overflow, which reads every op's output on the host",
           "\n  hint: trace overflows in an eager run");
  MG_CHECK(r.accumulate == 1, Error, who, " captures one micro-batch per step; got --accumulate ", r.accumulate,
           "\n  hint: use --accumulate 1 with a larger --batch-size");
}

amp::GradScaler cuda_graph_scaler() {
  const amp::Properties& p = amp::properties();
  MG_CHECK(!p.enabled || p.loss_scale.dynamic || p.loss_scale.value == 1.0, Error,
           "--cuda-graph scales the loss with amp::GradScaler (dynamic scaling); a static loss scale of ",
           p.loss_scale.value, " is not supported with it\n  hint: use --loss-scale dynamic, or drop --cuda-graph");
  amp::GradScalerOptions o;
  o.enabled = p.enabled && p.loss_scale.dynamic;
  o.min_scale = p.min_loss_scale;
  o.max_scale = p.max_loss_scale;  // the initial scale is clamped to [min, max] by the scaler
  return amp::GradScaler(o);
}

}  // namespace mg::example
