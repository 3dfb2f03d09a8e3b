#include "mixgrad/amp/properties.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <sstream>

#include "mixgrad/core/error.h"

namespace mg::amp {
namespace {

std::string lower(std::string s) {
  std::transform(s.begin(), s.end(), s.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return s;
}

std::string show(const std::optional<DType>& d) { return d ? dtype_name(*d) : "None"; }
std::string show(const std::optional<bool>& b) { return b ? (*b ? "True" : "False") : "None"; }

}  // namespace

Setting::Setting(double v) : set_(true) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  text_ = s.str();
}

bool Setting::as_bool(const char* option) const {
  const std::string t = lower(text_);
  if (t == "true" || t == "1") return true;
  if (t == "false" || t == "0") return false;
  MG_THROW(Error, "amp: ", option, " must be true or false (also accepted as the strings \"true\"/\"false\"), got \"",
           text_, "\"");
}

double Setting::as_number(const char* option) const {
  const char* begin = text_.c_str();
  char* end = nullptr;
  const double v = std::strtod(begin, &end);
  MG_CHECK(!text_.empty() && end && *end == '\0' && std::isfinite(v), Error, "amp: ", option,
           " must be a finite number, got \"", text_, "\"");
  return v;
}

DType Setting::as_float_dtype(const char* option) const {
  const std::string t = lower(text_);
  if (t == "f16" || t == "fp16" || t == "float16" || t == "half") return DType::F16;
  if (t == "bf16" || t == "bfloat16") return DType::BF16;
  if (t == "f32" || t == "fp32" || t == "float32" || t == "float") return DType::F32;
  MG_THROW(Error, "amp: ", option, " must be a floating dtype: f16, bf16 or f32, got \"", text_, "\"");
}

OptLevel parse_opt_level(const std::string& text) {
  if (text == "O0") return OptLevel::O0;
  if (text == "O1") return OptLevel::O1;
  if (text == "O2") return OptLevel::O2;
  if (text == "O3") return OptLevel::O3;
  if (text.size() == 2 && text[0] == '0' && text[1] >= '0' && text[1] <= '3') {
    MG_THROW(Error, "amp: unknown opt_level \"", text, "\": the first character is the digit zero",
             "\n  hint: opt levels start with the capital letter O: \"O", text[1], "\"");
  }
  if (text.size() == 2 && text[0] == 'o' && text[1] >= '0' && text[1] <= '3') {
    MG_THROW(Error, "amp: unknown opt_level \"", text, "\"\n  hint: use a capital letter O: \"O", text[1], "\"");
  }
  MG_THROW(Error, "amp: unknown opt_level \"", text, "\"; the levels are O0 (f32), O1 (autocast), O2 (low-precision "
           "model with f32 master weights) and O3 (pure low precision)");
}

const char* opt_level_name(OptLevel level) {
  switch (level) {
    case OptLevel::O0: return "O0";
    case OptLevel::O1: return "O1";
    case OptLevel::O2: return "O2";
    case OptLevel::O3: return "O3";
  }
  return "?";
}

std::string LossScaleSetting::str() const {
  if (dynamic) return "dynamic";
  std::ostringstream s;
  s << value;
  return s.str();
}

Properties opt_level_properties(OptLevel level, DType dtype) {
  MG_CHECK(dtype == DType::F16 || dtype == DType::BF16, DTypeError, "amp: dtype must be f16 or bf16, got ",
           dtype_name(dtype), "\n  hint: for f32 training use opt_level O0");
  Properties p;
  p.opt_level = level;
  p.dtype = dtype;
  // bf16 has f32's exponent range: no scaling by default (see the header).
  const LossScaleSetting scaled = dtype == DType::F16 ? LossScaleSetting{true, 1.0} : LossScaleSetting{false, 1.0};
  switch (level) {
    case OptLevel::O0:
      p.cast_model_type = DType::F32;
      break;
    case OptLevel::O1:
      p.patch_functions = true;
      p.loss_scale = scaled;
      break;
    case OptLevel::O2:
      p.cast_model_type = dtype;
      p.keep_batchnorm_fp32 = true;
      p.master_weights = true;
      p.loss_scale = scaled;
      break;
    case OptLevel::O3:
      p.cast_model_type = dtype;
      p.keep_batchnorm_fp32 = false;
      break;
  }
  return p;
}

Properties resolve_properties(const InitializeOptions& o) {
  const OptLevel level = parse_opt_level(o.opt_level);
  DType dtype = o.dtype.is_set() ? o.dtype.as_float_dtype("dtype") : DType::F16;
  // At O2/O3 a low-precision cast_model_type without dtype names the level's dtype, so the
  // defaults that follow it (bf16: a static loss scale of 1) are bf16's too.
  if (!o.dtype.is_set() && o.cast_model_type.is_set() && (level == OptLevel::O2 || level == OptLevel::O3)) {
    const DType t = o.cast_model_type.as_float_dtype("cast_model_type");
    if (t == DType::F16 || t == DType::BF16) dtype = t;
  }
  MG_CHECK(dtype != DType::F32, Error, "amp: dtype is the low-precision dtype (f16 or bf16), got f32",
           "\n  hint: for f32 training use opt_level O0");
  Properties p = opt_level_properties(level, dtype);
  p.enabled = o.enabled;
  const char* name = opt_level_name(level);
  const bool low_model = level == OptLevel::O2 || level == OptLevel::O3;

  if (o.cast_model_type.is_set()) {
    const DType t = o.cast_model_type.as_float_dtype("cast_model_type");
    MG_CHECK(low_model || t == DType::F32, Error, "amp: cast_model_type ", dtype_name(t), " makes no sense with ", name,
             ": ", level == OptLevel::O1 ? "O1 inserts casts around ops (autocast) and keeps the model weights in f32"
                                          : "O0 is the pure f32 baseline",
             "\n  hint: to cast the model itself use opt_level O2 (with f32 master weights) or O3");
    MG_CHECK(!low_model || t != DType::F32, Error, "amp: cast_model_type f32 with ", name,
             " would undo the level (its point is a ", dtype_name(dtype), " model)\n  hint: use opt_level O0 or O1");
    MG_CHECK(!low_model || t == dtype || !o.dtype.is_set(), Error, "amp: cast_model_type ", dtype_name(t),
             " contradicts dtype ", dtype_name(dtype), "; give one of them");
    if (low_model) p.dtype = t;
    p.cast_model_type = t;
  }
  if (o.patch_functions.is_set()) p.patch_functions = o.patch_functions.as_bool("patch_functions");
  if (o.keep_batchnorm_fp32.is_set()) {
    const bool keep = o.keep_batchnorm_fp32.as_bool("keep_batchnorm_fp32");
    MG_CHECK(low_model, Error, "amp: keep_batchnorm_fp32 makes no sense with ", name, ": ",
             level == OptLevel::O1 ? "O1 keeps the model (batch norm included) in f32 and runs batch norm's statistics in f32 by policy"
                                   : "O0 keeps everything in f32",
             "\n  hint: leave keep_batchnorm_fp32 unset, or use O2/O3 where the model is cast");
    p.keep_batchnorm_fp32 = keep;
  }
  if (o.master_weights.is_set()) {
    const bool master = o.master_weights.as_bool("master_weights");
    MG_CHECK(low_model || !master, Error, "amp: master_weights makes no sense with ", name, ": the model weights stay f32 ",
             "there, so they are their own master weights\n  hint: leave master_weights unset, or use O2 "
             "(f16/bf16 model with f32 master weights)");
    p.master_weights = master;
  }
  if (o.loss_scale.is_set()) {
    if (lower(o.loss_scale.text()) == "dynamic") {
      p.loss_scale = {true, 1.0};
    } else {
      const double v = o.loss_scale.as_number("loss_scale");
      MG_CHECK(v > 0, Error, "amp: loss_scale must be \"dynamic\" or a positive number, got ", o.loss_scale.text());
      p.loss_scale = {false, v};
    }
  }
  if (o.cast_model_outputs.is_set()) p.cast_model_outputs = o.cast_model_outputs.as_float_dtype("cast_model_outputs");
  else if (p.cast_model_type && *p.cast_model_type != DType::F32) p.cast_model_outputs = DType::F32;

  MG_CHECK(o.num_losses >= 1, Error, "amp: num_losses must be >= 1, got ", o.num_losses);
  p.num_losses = o.num_losses;
  auto scale_bound = [&](const Setting& setting, const char* what) -> std::optional<double> {
    if (!setting.is_set()) return std::nullopt;
    const double v = setting.as_number(what);
    MG_CHECK(v > 0, Error, "amp: ", what, " must be positive, got ", v);
    MG_CHECK(p.loss_scale.dynamic, Error, "amp: ", what, " only applies to dynamic loss scaling, but loss_scale is ",
             p.loss_scale.str(), "\n  hint: set loss_scale to \"dynamic\" or drop ", what);
    return v;
  };
  p.min_loss_scale = scale_bound(o.min_loss_scale, "min_loss_scale");
  p.max_loss_scale = scale_bound(o.max_loss_scale, "max_loss_scale");
  if (p.loss_scale.dynamic && !p.max_loss_scale) p.max_loss_scale = 16777216.0;  // 2^24, Apex's default
  MG_CHECK(!p.min_loss_scale || !p.max_loss_scale || *p.min_loss_scale <= *p.max_loss_scale, Error,
           "amp: min_loss_scale (", *p.min_loss_scale, ") exceeds max_loss_scale (", *p.max_loss_scale, ")");
  MG_CHECK(o.verbosity >= 0 && o.verbosity <= 2, Error, "amp: verbosity must be 0, 1 or 2, got ", o.verbosity);
  p.verbosity = o.verbosity;
  MG_CHECK(o.memory_format != MemoryFormat::Preserve, Error,
           "amp::initialize: memory_format must be Contiguous or ChannelsLast, got preserve",
           "\n  hint: MemoryFormat::ChannelsLast lays 4-D inputs out NHWC");
  // f16 parameters without f32 masters would be unscaled in place in f16, undoing the dynamic
  // scale (see check_no_f16_in_place in amp/unscale.h). A static scale is Apex's O3 and allowed.
  MG_CHECK(!p.enabled || !p.loss_scale.dynamic || p.master_weights || p.cast_model_type != DType::F16, Error,
           "amp::initialize: ", name, " with dynamic loss scaling on f16 parameters without f32 master weights: "
           "attempting to unscale f16 gradients in place, which rounds the small gradients the scale had saved back "
           "to zero (PyTorch refuses it too)",
           "\n  hint: use opt_level O2 (f32 master weights), dtype bf16, or a static loss_scale (O3's default 1, or e.g. 128)");
  return p;
}

std::string Properties::str() const {
  std::ostringstream s;
  s << "amp: opt_level " << opt_level_name(opt_level) << (enabled ? "" : " (disabled)") << "\n"
    << "  dtype                : " << dtype_name(dtype) << "\n"
    << "  cast_model_type      : " << show(cast_model_type) << "\n"
    << "  patch_functions      : " << (patch_functions ? "True (autocast)" : "False") << "\n"
    << "  keep_batchnorm_fp32  : " << show(keep_batchnorm_fp32) << "\n"
    << "  master_weights       : " << (master_weights ? "True" : "False") << "\n"
    << "  loss_scale           : " << loss_scale.str() << "\n"
    << "  cast_model_outputs   : " << show(cast_model_outputs) << "\n"
    << "  num_losses           : " << num_losses << "\n";
  if (loss_scale.dynamic) {
    s << "  min_loss_scale       : " << (min_loss_scale ? std::to_string(*min_loss_scale) : "None") << "\n"
      << "  max_loss_scale       : " << (max_loss_scale ? std::to_string(*max_loss_scale) : "None") << "\n";
  }
  return s.str();
}

}  // namespace mg::amp
