// --cuda-graph for the examples: the flag, the checks that refuse what a captured step cannot do,
// and the GradScaler the captured step scales with. Its results are read through a DeviceTally
// (examples/common/device_tally.h): a captured step must not read anything back.
//
//   add_cuda_graph_flag(flags);
//   check_cuda_graph({.device = device, .data_parallel = dp.active(), ...});   // clear errors
//   amp::GradScaler scaler = cuda_graph_scaler();       // from amp::properties()
#pragma once
#include <cstdint>
#include <string>

#include "amp/grad_scaler.h"
#include "core/device.h"
#include "core/tensor.h"
#include "examples/common/flags.h"

namespace mg::example {

// --cuda-graph: capture one whole training step after a short eager warm-up and replay it.
void add_cuda_graph_flag(Flags& flags);

// What a run asks for that a captured step may not be able to do.
struct CudaGraphRequest {
  Device device;
  bool data_parallel = false;   // under mixgrad-run
  bool trace_overflow = false;  // --trace-overflow reads every op's output on the host
  int64_t accumulate = 1;       // micro-batches per step
};
// Throws mg::Error naming the conflicting option (with a hint) when --cuda-graph cannot run with
// the request: not on a CUDA device, data parallel, --trace-overflow, gradient accumulation. Call
// it right after the flags are parsed.
void check_cuda_graph(const CudaGraphRequest& request);

// The scaler of a captured step: amp::GradScaler, whose skip and scale decisions are device values
// (the Apex front door's scale_loss decides on the host). Dynamic when the opt level scales
// dynamically (amp's min/max scale), disabled when its loss scale is a static 1; a static scale
// other than 1 is an error. After amp::initialize (its properties are read).
amp::GradScaler cuda_graph_scaler();

}  // namespace mg::example
