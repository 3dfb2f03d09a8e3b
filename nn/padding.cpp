#include "mixgrad/nn/padding.h"

namespace mg::nn {

Pad::Pad(Options o) : UnaryModule("Pad"), options_(std::move(o)) {
  MG_CHECK(options_.pad.size() % 2 == 0 && !options_.pad.empty(), Error,
           "Pad: expected an even, non-zero number of amounts ((before, after) per dim, last dim first), got ",
           options_.pad.size());
  for (int64_t a : options_.pad) {
    MG_CHECK(options_.mode == PadMode::Constant || a >= 0, Error, "Pad: ", pad_mode_name(options_.mode),
             " padding needs amounts >= 0, got ", a);
  }
  MG_CHECK(options_.mode == PadMode::Constant || options_.value == 0.0, Error,
           "Pad: a value is for the constant mode only, got ", options_.value);
}

std::string Pad::extra_repr() const {
  std::string s = "pad=(";
  for (std::size_t i = 0; i < options_.pad.size(); ++i) s += str_cat(i ? ", " : "", options_.pad[i]);
  s += str_cat("), mode=", pad_mode_name(options_.mode));
  if (options_.mode == PadMode::Constant && options_.value != 0.0) s += str_cat(", value=", options_.value);
  return s;
}

}  // namespace mg::nn
