// amp::Autocast: the PyTorch-style autocast region. Inside it the dispatcher casts each op's
// floating inputs by the op's cast policy (DESIGN §4): lower -> the region's dtype (f16 or bf16),
// fp32 -> f32, promote -> the widest floating input, keep -> unchanged, banned -> an error with
// advice under f16. Regions are thread-local, nest (an inner {.enabled = false} turns autocast
// off), and restore the previous state on exit, also when an exception unwinds.
//
// Weight cast cache: inside the outermost region an f32 leaf that requires grad (a weight) is
// cast once per dtype and reused, keyed by the tensor's identity, storage and version, so an
// in-place update of the weight is never served a stale cast; the cache empties when the
// outermost region ends. Under amp's O1 (autocast on outside any region) it empties at the end of
// every amp::scale_loss backward, as Apex's does, and an entry whose weight was destroyed is
// dropped (the cache holds its weights weakly), so casts of short-lived leaves never pile up.
//
// Regions belong to a device type, as in PyTorch: Autocast({.device = DeviceType::CUDA}) casts the
// ops whose inputs are on a CUDA device and leaves CPU ops alone (and the other way round); the
// default dtype is f16 on CUDA and bf16 on the CPU.
//
//   {
//     mg::amp::Autocast autocast({.dtype = mg::DType::BF16});
//     mg::Tensor logits = model(x);          // matmuls/convs in bf16, softmax/losses in f32
//     loss = mg::cross_entropy(logits, y);
//   }
//   loss.backward();                        // gradients in the dtypes the forward chose
#pragma once
#include <cstddef>
#include <optional>

#include "mixgrad/core/autocast_state.h"
#include "mixgrad/core/device.h"
#include "mixgrad/core/dtype.h"

namespace mg::amp {

struct AutocastOptions {
  DeviceType device = DeviceType::CPU;  // the ops the region casts: those running on this device type
  // The lower-precision dtype, f16 or bf16. Default: the enclosing region's (or amp O1's) dtype,
  // as PyTorch's autocast reads the current one; at top level f16 on CUDA, bf16 on the CPU.
  std::optional<DType> dtype;
  bool enabled = true;        // false: a region with autocast off (e.g. around a numerically sensitive part)
  // Reuse the cast of each weight within the outermost region. Default: the enclosing region's
  // setting (true at top level), as PyTorch's cache_enabled=None, so a plain region opened inside
  // one with caching off keeps it off.
  std::optional<bool> cache_enabled;
};

class Autocast {
 public:
  explicit Autocast(AutocastOptions options = {});
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  DeviceType device_;
  AutocastState saved_;
};

// The default lower-precision dtype of a device type's regions: f16 on CUDA, bf16 on the CPU.
DType default_autocast_dtype(DeviceType device);

// The calling thread's autocast state for a device type.
bool is_autocast_enabled(DeviceType device = DeviceType::CPU);
DType autocast_dtype(DeviceType device = DeviceType::CPU);

// Entries in the calling thread's weight cast cache (for tests and diagnostics).
std::size_t weight_cache_size();
// Drops every cached cast of the calling thread (amp's O1 does after each scale_loss backward).
void clear_weight_cache();

// Installs amp's autocast hook into the dispatcher (idempotent; Autocast does it on first use).
void install_autocast();

}  // namespace mg::amp
