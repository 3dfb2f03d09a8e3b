#include "mixgrad/nn/padding.h"

namespace mg::nn {

Pad::Pad(std::string name, Options o) : UnaryModule(name), options_(std::move(o)) {
  MG_CHECK(options_.pad.size() % 2 == 0 && !options_.pad.empty(), Error, name,
           ": expected an even, non-zero number of amounts ((before, after) per dim, last dim first), got ",
           options_.pad.size());
  for (int64_t a : options_.pad) {
    MG_CHECK(options_.mode == PadMode::Constant || a >= 0, Error, name, ": ", pad_mode_name(options_.mode),
             " padding needs amounts >= 0, got ", a);
  }
  MG_CHECK(options_.mode == PadMode::Constant || options_.value == 0.0, Error, name,
           ": a value is for the constant mode only, got ", options_.value);
}

std::string Pad::extra_repr() const {
  std::string s = "pad=(";
  for (std::size_t i = 0; i < options_.pad.size(); ++i) s += str_cat(i ? ", " : "", options_.pad[i]);
  s += str_cat("), mode=", pad_mode_name(options_.mode));
  if (options_.mode == PadMode::Constant && options_.value != 0.0) s += str_cat(", value=", options_.value);
  return s;
}

namespace detail {

std::string pad_layer_name(PadLayerKind kind, int dims) {
  static const char* const names[] = {"ZeroPad", "ConstantPad", "ReflectionPad", "ReplicationPad", "CircularPad"};
  return str_cat(names[int(kind)], dims, "d");
}

PadOptions pad_layer_options(PadLayerKind kind, int dims, const PadLayerOptions& o) {
  const std::string name = pad_layer_name(kind, dims);
  const std::size_t n = std::size_t(2 * dims);
  MG_CHECK(o.padding.size() == 1 || o.padding.size() == n, Error, name, ": padding takes 1 amount (every side) or ",
           n, " ((before, after) per dim, last dim first), got ", o.padding.size());
  MG_CHECK(kind == PadLayerKind::Constant || o.value == 0.0, Error, name,
           ": a value is for ConstantPad only, got ", o.value);
  static const PadMode modes[] = {PadMode::Constant, PadMode::Constant, PadMode::Reflect, PadMode::Replicate,
                                  PadMode::Circular};
  return {.pad = o.padding.size() == 1 ? std::vector<int64_t>(n, o.padding[0]) : o.padding,
          .mode = modes[int(kind)],
          .value = o.value};
}

void check_pad_layer_input(const std::string& name, PadLayerKind kind, int dims, const Tensor& x) {
  MG_CHECK(x.defined(), Error, name, ": got an undefined tensor");
  const bool border = kind == PadLayerKind::Reflection || kind == PadLayerKind::Replication ||
                      kind == PadLayerKind::Circular;
  if (border) {
    MG_CHECK(x.dim() == dims + 1 || x.dim() == dims + 2, ShapeError, name, ": expected a ", dims + 1, "-D or ",
             dims + 2, "-D input (unbatched or batched), got ", describe(x));
  } else {
    MG_CHECK(x.dim() >= dims, ShapeError, name, ": expected at least ", dims, " dims, got ", describe(x));
  }
}

}  // namespace detail

}  // namespace mg::nn
