// CapturedStep's sequence: static inputs, warm-up, capture, replay (see the header).
#include "mixgrad/cuda/host/captured_step.h"

#include "mixgrad/core/error.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/core/storage.h"
#include "mixgrad/cuda/cuda.h"

namespace mg::cuda {

CapturedStep::CapturedStep(StepFn step, std::vector<GraphParticipant*> participants, CapturedStepOptions options)
    : step_(std::move(step)), options_(options) {
  MG_CHECK(options.device.is_cuda(), DeviceError, "CapturedStep: CUDA graphs need a CUDA device, got ",
           options.device.str(), "\n  hint: train on --device cuda, or without --cuda-graph on the CPU");
  check_device(options.device);
  MG_CHECK(options.warmup_steps >= 1, Error, "CapturedStep: warmup_steps must be >= 1 (the optimizer and scaler "
           "state must exist before the capture), got ", options.warmup_steps);
  MG_CHECK(static_cast<bool>(step_), Error, "CapturedStep: no step function given");
  for (GraphParticipant* p : participants) {
    MG_CHECK(p != nullptr, Error, "CapturedStep: a participant is null");
    graph_.add_participant(*p);
  }
}

void CapturedStep::copy_in(const Tensors& batch) {
  if (inputs_.empty()) {
    MG_CHECK(!batch.empty(), Error, "CapturedStep::run: the batch has no tensors");
    for (const Tensor& b : batch) {
      MG_CHECK(b.defined(), Error, "CapturedStep::run: a batch tensor is undefined");
      inputs_.push_back(empty(b.shape(), {.dtype = b.dtype(), .device = options_.device}));
    }
  }
  MG_CHECK(batch.size() == inputs_.size(), Error, "CapturedStep::run: got ", batch.size(),
           " batch tensors, but the step was set up with ", inputs_.size());
  for (std::size_t i = 0; i < batch.size(); ++i) {
    const Tensor& b = batch[i];
    const Tensor& s = inputs_[i];
    MG_CHECK(b.defined() && b.shape() == s.shape() && b.dtype() == s.dtype(), Error, "CapturedStep::run: batch tensor ",
             i, " is ", b.defined() ? describe(b) : "undefined", " but the static input is ", describe(s),
             "; a CUDA graph replays fixed shapes\n  hint: drop the last partial batch (DataLoaderOptions::drop_last)");
    const Tensor src = b.contiguous();
    // Pinned host memory: an asynchronous copy on the current stream, ahead of the replay.
    copy_bytes(s.data_ptr(), s.device(), src.data_ptr(), src.device(), std::size_t(s.numel()) * s.element_size(),
               /*non_blocking=*/src.is_pinned());
    s.bump_version();
  }
}

Tensors CapturedStep::run(const Tensors& batch) {
  // The step's device current throughout: the copies run on its current stream, the capture on a
  // new stream of the current device and the replay on its current stream; on another current
  // device (cuda:1 while the calling thread sits on cuda:0) nothing of the step would be captured.
  DeviceGuard guard(options_.device.index);
  copy_in(batch);
  ++steps_;
  if (steps_ <= options_.warmup_steps) return step_(inputs_);
  if (!graph_.ready()) {
    // The capture allocates from a fresh private pool, and runs out of memory at once (no cache to
    // release inside a capture): hand the warm-up's cached segments back first, as PyTorch's
    // torch.cuda.graph does (one counted sync, once per capture).
    synchronize(options_.device.index);
    empty_cache();
    GraphCapture capture(graph_);  // abandoned if the step throws (e.g. a synchronisation)
    outputs_ = step_(inputs_);
  }
  graph_.replay();
  // The replay reads the static inputs on this stream: their memory is reused only after it (a
  // no-op on the stream they were made on).
  const Stream stream = current_stream(options_.device.index);
  for (const Tensor& t : inputs_) record_stream(t, stream);
  return outputs_;
}

}  // namespace mg::cuda
