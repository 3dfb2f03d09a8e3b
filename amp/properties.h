// The Apex-style opt levels O0–O3 (DESIGN §5) as property tables, and the validation of user
// overrides. amp::initialize resolves its options into a Properties through resolve_properties.
//
//   level | model weights | autocast | master weights | loss scale     | batch norm
//   O0    | f32           | off      | no             | 1 (static)     | f32
//   O1    | f32           | on       | not needed     | dynamic (f16)  | f32 (by policy)
//   O2    | f16/bf16      | off      | f32, optimizer | dynamic (f16)  | kept f32
//   O3    | f16/bf16      | off      | no             | 1 (static)     | low (keep_batchnorm_fp32 overrides)
//
// With dtype bf16 the default loss scale is 1 (static) at every level: bf16 has f32's range, so
// scaling buys nothing (Apex's O4/O5 and torch.amp do the same). Override loss_scale to scale anyway.
//
// Every override is a Setting: unset (the level's default) or a bool / number / dtype / string.
// Strings are parsed ("true", "False", "128", "dynamic", "bf16"), so command-line flags pass
// straight through:
//   mg::amp::Properties p = mg::amp::resolve_properties({.opt_level = "O2", .dtype = "bf16",
//                                                         .keep_batchnorm_fp32 = "False"});
#pragma once
#include <optional>
#include <string>

#include "mixgrad/core/device.h"
#include "mixgrad/core/dtype.h"
#include "mixgrad/core/memory_format.h"

namespace mg::amp {

// An option value as the user gave it; unset means "the opt level's default".
class Setting {
 public:
  Setting() = default;
  Setting(bool v) : set_(true), text_(v ? "true" : "false") {}
  Setting(int v) : set_(true), text_(std::to_string(v)) {}
  Setting(double v);
  Setting(DType v) : set_(true), text_(dtype_name(v)) {}
  Setting(const char* v) : set_(true), text_(v) {}
  Setting(std::string v) : set_(true), text_(std::move(v)) {}

  bool is_set() const { return set_; }
  const std::string& text() const { return text_; }

  // Parsers; `option` names the option in the error (which lists what is accepted).
  bool as_bool(const char* option) const;      // true/false/1/0, any case
  double as_number(const char* option) const;  // a finite number
  DType as_float_dtype(const char* option) const;  // f16/fp16/float16/half, bf16/bfloat16, f32/fp32/float32/float

 private:
  bool set_ = false;
  std::string text_;
};

enum class OptLevel { O0, O1, O2, O3 };
// "O0".."O3"; anything else throws with advice (the error for "00" says that O is a letter).
OptLevel parse_opt_level(const std::string& text);
// The level's name, "O0" .. "O3" (what checkpoints store and --opt-level takes).
const char* opt_level_name(OptLevel level);

// Static 1 or another number, or dynamic (a GradScaler per loss).
struct LossScaleSetting {
  bool dynamic = false;
  double value = 1.0;  // the static scale (dynamic: unused; the scaler starts at 2^16)
  std::string str() const;
};

// The resolved behaviour of an opt level with its overrides applied.
struct Properties {
  bool enabled = true;
  OptLevel opt_level = OptLevel::O1;
  DType dtype = DType::F16;                   // the low-precision dtype: f16 or bf16
  std::optional<DType> cast_model_type;       // cast the model to this dtype (none: leave it f32)
  bool patch_functions = false;               // autocast on (O1)
  std::optional<bool> keep_batchnorm_fp32;    // with cast_model_type: batch norm stays f32
  bool master_weights = false;                // f32 master weights owned by the optimizer
  LossScaleSetting loss_scale;
  std::optional<DType> cast_model_outputs;    // cast forward outputs (amp::forward) to this dtype
  int num_losses = 1;
  std::optional<double> min_loss_scale, max_loss_scale;  // dynamic scaling's floor and ceiling
  int verbosity = 1;

  // The Apex-style listing: "Processing user overrides ... opt_level : O2 ...".
  std::string str() const;
};

// What amp::initialize accepts.
struct InitializeOptions {
  bool enabled = true;             // false: initialize changes nothing and scale_loss is a no-op
  std::string opt_level = "O1";
  Setting dtype;                   // f16 (default) or bf16
  Setting cast_model_type;         // O2/O3: f16/bf16 (default: dtype); O0/O1: f32 only
  Setting patch_functions;         // autocast on or off
  Setting keep_batchnorm_fp32;     // O2/O3 only: true/false
  Setting master_weights;          // O2/O3 only: true/false
  Setting loss_scale;              // "dynamic" or a positive number
  Setting cast_model_outputs;      // a dtype for forward outputs (default: f32 when the model is cast)
  int num_losses = 1;              // one loss scaler per loss_id
  Setting min_loss_scale;          // dynamic scaling only
  Setting max_loss_scale;          // dynamic scaling only (default 2^24, as Apex)
  int verbosity = 1;               // 0 silent, 1 the properties and skip messages, 2 more
  // The device the models train on: O1's ambient autocast casts the ops that run there (the
  // models are not moved; call model->to(device) yourself). The dtype default stays f16 on every
  // device, as Apex's; give dtype "bf16" for the CPU's fast path.
  Device device = Device::cpu();
  // ChannelsLast: initialize lays the models' 4-D weights out NHWC (Module::to(MemoryFormat)) and
  // amp::forward their 4-D floating inputs (any level, enabled or not); conv, batch norm, pooling
  // and the elementwise ops keep that layout through the network and its backward
  // (docs/memory_format.md). Contiguous (the default) changes nothing.
  MemoryFormat memory_format = MemoryFormat::Contiguous;
};

// The O-level table for a level and dtype (no overrides).
Properties opt_level_properties(OptLevel level, DType dtype = DType::F16);
// The table plus the validated overrides; a nonsensical override throws an mg::Error that says why.
Properties resolve_properties(const InitializeOptions& options);

}  // namespace mg::amp
