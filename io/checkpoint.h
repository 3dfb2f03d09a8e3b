// Checkpoints: a model's state dict plus any number of named StateDicts (optimizer, scheduler,
// data loader position, generator, AMP scaler, a "train" state with the step counter) in one
// versioned file. The file is a safetensors file (so Python tools can open it): tensors are named
// "model.<name>" and "<state>.<key>", and "__metadata__" holds the kind tag, the format version
// and the non-tensor entries as JSON (integers exact, floats bit-exact). docs/io.md has the layout.
//
// The one decision a reader must know: saving is atomic (a temporary file renamed over the old
// one, so a crash never destroys the previous checkpoint), and restoring into a model first
// checks every name, dtype and shape and changes nothing unless all of them match.
//
//   mg::io::save_checkpoint("ckpt.safetensors", model,
//                           {{"optimizer", opt.state_dict()}, {"loader", loader.state()}});
//   mg::io::Checkpoint ck = mg::io::load_checkpoint("ckpt.safetensors");
//   ck.restore_model(model);  opt.load_state_dict(ck.state("optimizer"));
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "mixgrad/core/state_dict.h"
#include "mixgrad/nn/module.h"

namespace mg::io {

// The checkpoint format version this build writes; it reads this one and every older one.
// Version 2 added a CRC-32 per tensor (checked on load); version 1 files load without one.
inline constexpr int64_t kCheckpointVersion = 2;

using NamedStates = std::vector<std::pair<std::string, StateDict>>;

// Writes model.state_dict() and `states` to `path` atomically. State names must be non-empty,
// unique, without '.', and not "model"; tensor keys non-empty and unique within their state;
// strings valid UTF-8. Tensors may live on any device (they are copied to the CPU one at a time).
void save_checkpoint(const std::string& path, const nn::Module& model, const NamedStates& states = {});

// A checkpoint read back: CPU tensors and exact ints, floats and strings.
class Checkpoint {
 public:
  const std::string& path() const { return path_; }
  int64_t version() const { return version_; }
  // The model's state dict as saved (names without the "model." prefix, in the saved order).
  const nn::NamedTensors& model_state() const { return model_; }
  // Copies the saved state into `model`. Every key must exist on both sides (strict = false
  // ignores missing and unexpected keys), and every dtype and shape must match the model's;
  // all problems are listed in one mg::Error and then nothing is changed. Returns the keys a
  // non-strict restore skipped (Module::load_state_dict's), so a prefix mismatch ("module.") that
  // restores nothing shows.
  nn::Module::LoadResult restore_model(nn::Module& model, bool strict = true) const;

  bool has_state(const std::string& name) const;
  // The StateDict saved under `name`; throws mg::Error listing the saved names when absent.
  const StateDict& state(const std::string& name) const;
  std::vector<std::string> state_names() const;

 private:
  friend Checkpoint load_checkpoint(const std::string& path);
  std::string path_;
  int64_t version_ = 0;
  nn::NamedTensors model_;
  NamedStates states_;
};

// Reads and validates a checkpoint: the safetensors checks (docs/io.md), then the kind tag, the
// version (a newer one is refused with a clear error), the consistency of the JSON with the
// tensors, and each tensor's data against the CRC-32 saved with it (a damaged file is refused,
// naming the tensor).
Checkpoint load_checkpoint(const std::string& path);

}  // namespace mg::io
