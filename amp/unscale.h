// The multi-tensor unscale: one pass over all gradients that multiplies each value by 1/scale in
// place, detects inf/NaN, and counts zeros, underflowed and non-finite values — the statistics a
// GradScaler exposes. The per-element math is a host/device functor so the CUDA issue's fused
// multi-tensor kernel computes exactly the same thing. Until then CUDA gradients take the generic
// path (optim/generic_path.h): the same multiply with public ops and the counts as reductions.
//
//   mg::amp::UnscaleStats s = mg::amp::unscale_grads(opt.grads(), 1.0 / 65536);
//   if (s.nonfinite) { /* skip the step */ }
#pragma once
#include <cstdint>
#include <functional>

#include "mixgrad/core/tensor.h"

namespace mg::optim {
class Optimizer;
}

namespace mg::amp {

struct UnscaleStats {
  int64_t values = 0;       // gradient values visited
  int64_t zeros = 0;        // exactly zero (before unscaling): lost to underflow or truly zero
  int64_t underflowed = 0;  // nonzero but below the smallest normal of the gradient's dtype (before
                            // unscaling): subnormal, already losing precision
  int64_t nonfinite = 0;    // inf or NaN
  bool found_inf() const { return nonfinite > 0; }
};

// grads: any floating dtypes (f16/bf16 math in f32), contiguous, all on one device (CPU: the fused
// pass; other devices: the generic path of optim/generic_path.h, which reads the statistics to the
// host once per call — one counted synchronisation); undefined entries are skipped. Multiplies
// every value by inv_scale in place unless `check_only`.
UnscaleStats unscale_grads(const Tensors& grads, double inv_scale, bool check_only = false);

// The master-weights form: reads src[i] (f16/bf16/f32 model gradients, left unchanged) and writes
// dst[i] = src[i] * inv_scale (+ dst[i] when `accumulate`) into f32 tensors of the same sizes
// (master gradients) in the same single pass, with the same statistics (of src). Entries whose
// src is undefined are skipped.
UnscaleStats unscale_grads_to(const Tensors& src, const Tensors& dst, double inv_scale, bool accumulate = false);

UnscaleStats& operator+=(UnscaleStats& a, const UnscaleStats& b);

// The device values a fused device unscale reads and writes (core/multi_tensor_kernels.h).
struct DeviceUnscaleRefs {
  const double* scale = nullptr;  // device [1] f64: the loss scale (the pass multiplies by float(1 / scale))
  Tensor found_inf;               // device [1] f32: set to 1 on an inf/NaN (never cleared here)
  int64_t* counts = nullptr;      // device [3] i64 {zeros, underflowed, nonfinite}: added to
};
// unscale_optimizer_grads through the fused kernels of the gradients' device, with no host read:
// the same passes (model -> master gradients, direct gradients in place), the statistics left in
// refs.counts; then, when a non-finite reducer is installed, its device path replaces
// refs.found_inf by the maximum over processes (stream-ordered, no host read; the counts stay
// local). Returns false, doing nothing, when the gradients are not all on one device that has
// fused kernels (the CPU, or a build without CUDA) or the installed reducer has no device path
// (its count must reach the host); else the number of values visited in `values`.
bool unscale_optimizer_grads_fused(optim::Optimizer& opt, const DeviceUnscaleRefs& refs, int64_t* values,
                                   bool accumulate = false);

// Unscales every gradient of `opt`: in place, or — with master weights — from the model's
// f16/bf16 gradients into the f32 master gradients (accumulating into them when `accumulate`),
// then marks the master gradients as synced for the next step(). The inf/NaN count of the result
// is the installed NonfiniteReducer's answer when one is installed (see below).
UnscaleStats unscale_optimizer_grads(optim::Optimizer& opt, double inv_scale, bool accumulate = false);

// Agreement on the skip decision across processes, so every process decides alike: the
// distributed layer (which sits above amp) installs a reducer that takes the maximum over ranks
// (distributed/ddp.h, DdpOptions::agree_found_inf). None is installed by default.
// - count (host path): every unscale_optimizer_grads (GradScaler's unscale_/step on the CPU and
//   amp::scale_loss go through it) passes its inf/NaN count through it and keeps what it returns.
// - flag (device path): the fused device unscale (GradScaler on CUDA) hands it its found-inf flag,
//   a [1] f32 tensor on the gradients' device (nonzero: inf/NaN found), to be replaced in place by
//   the maximum over processes, enqueued on the calling thread's current stream with no host
//   synchronisation (NCCL's all-reduce does this). Empty: the fused path declines, and a CUDA
//   GradScaler throws NotImplementedError.
struct NonfiniteReducer {
  std::function<int64_t(int64_t local_nonfinite)> count;
  std::function<void(Tensor flag)> flag;
  explicit operator bool() const { return bool(count) || bool(flag); }
};
// Installs `reducer` as the base one (an empty one: none) and returns the previous base one.
NonfiniteReducer set_nonfinite_reducer(NonfiniteReducer reducer);
// Owners that come and go (DistributedDataParallel, ZeroRedundantOptimizer) push theirs above the
// base one and remove it by its handle when they go, in whatever order they go: the newest one
// still pushed is the active one (so a removed owner's reducer, which may refer to it, is never
// reinstated). remove_nonfinite_reducer of an unknown handle is an error.
int64_t push_nonfinite_reducer(NonfiniteReducer reducer);
void remove_nonfinite_reducer(int64_t handle);
// The active reducer: the newest pushed one, else the base one (empty: none).
const NonfiniteReducer& nonfinite_reducer();

// Throws (message starting with `who`) when unscaling `opt` would divide f16 gradients in place:
// an f16 parameter the optimizer steps directly, without an f32 master. Dynamic scaling exists to
// lift small gradients out of f16's underflow range; dividing them by the scale in f16 rounds them
// back into it (tests/amp/test_mp_numerics.cpp measures this), so GradScaler refuses, as PyTorch's
// "Attempting to unscale FP16 gradients". bf16 gradients pass: bf16 has f32's exponent range.
void check_no_f16_in_place(const optim::Optimizer& opt, const char* who);

}  // namespace mg::amp
