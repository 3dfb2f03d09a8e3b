// CapturedStep: a whole training step captured once into a CUDA graph and replayed (the examples'
// --cuda-graph). The first `warmup_steps` run eagerly (they create the optimizer and scaler state,
// autotune cuDNN and fill the allocator's cache), the next one is captured and every step from then
// on is a copy of the batch into the static input tensors plus one graph launch.
// Decision: plain C++ over the public cuda::Graph API, so it builds without the CUDA backend and
// refuses there with a clear error; everything the graph cannot follow by itself is a
// GraphParticipant's job (the optimizer, the GradScaler) or a generator's (dropout).
//
//   cuda::CapturedStep step([&](const Tensors& in) {          // in: the static inputs
//     opt.zero_grad();
//     Tensor loss = cross_entropy(model.forward(in[0]), in[1]);
//     scaler.scale(loss).backward();  scaler.step(opt);  scaler.update();
//     return Tensors{loss};                                   // static outputs after the capture
//   }, {&opt, &scaler}, {.device = Device::cuda()});
//   for (...) { Tensors out = step.run({x, y});  sched.step(); }   // x, y: pinned host batches
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "mixgrad/core/device.h"
#include "mixgrad/core/graph_participant.h"
#include "mixgrad/core/tensor.h"
#include "mixgrad/cuda/graph.h"

namespace mg::cuda {

struct CapturedStepOptions {
  Device device = Device::cuda();  // where the static inputs live and the graph runs
  int64_t warmup_steps = 3;        // eager steps before the capture (>= 1)
};

class CapturedStep {
 public:
  // One step on the given inputs (the static input tensors from the first run on), returning its
  // outputs (e.g. {loss}). It must not synchronise (a CudaError names what did, at the capture).
  using StepFn = std::function<Tensors(const Tensors& inputs)>;
  // Throws mg::DeviceError when `options.device` is not a usable CUDA device.
  CapturedStep(StepFn step, std::vector<GraphParticipant*> participants, CapturedStepOptions options = {});

  // Runs one step on `batch` (tensors of fixed shapes and dtypes, on the CPU (pinned: copied
  // asynchronously) or on the device): copies it into the static inputs, then runs the step
  // eagerly (warm-up), captures and replays it (the step after the warm-up), or replays it.
  // Returns the step's outputs; after the capture always the same static tensors, overwritten by
  // the next run: read or copy them before. A batch of another shape or dtype is an error.
  Tensors run(const Tensors& batch);

  bool captured() const { return graph_.ready(); }
  int64_t steps() const { return steps_; }       // run() calls so far
  const Graph& graph() const { return graph_; }
  const Tensors& static_inputs() const { return inputs_; }

 private:
  void copy_in(const Tensors& batch);

  StepFn step_;
  CapturedStepOptions options_;
  Tensors inputs_;   // the static inputs, made at the first run
  Tensors outputs_;  // the captured step's outputs
  // After the tensors the replays read: destroyed first (members go in reverse order), so the
  // graph's release waits for its replays before the inputs' memory can be reused.
  Graph graph_;
  int64_t steps_ = 0;
};

}  // namespace mg::cuda
