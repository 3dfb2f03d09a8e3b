#include "mixgrad/nn/upsample.h"

namespace mg::nn {

Upsample::Upsample(std::string type_name, Options o) : UnaryModule(type_name), options_(std::move(o)) {
  MG_CHECK(!options_.size.empty() || !options_.scale_factor.empty(), Error, type_name, ": give size or scale_factor");
  MG_CHECK(options_.size.empty() || options_.scale_factor.empty(), Error, type_name,
           ": give size or scale_factor, not both");
}

std::string Upsample::extra_repr() const {
  std::string s;
  if (!options_.size.empty()) {
    s = "size=(";
    for (std::size_t i = 0; i < options_.size.size(); ++i) s += str_cat(i ? ", " : "", options_.size[i]);
  } else {
    s = "scale_factor=(";
    for (std::size_t i = 0; i < options_.scale_factor.size(); ++i) s += str_cat(i ? ", " : "", options_.scale_factor[i]);
  }
  s += str_cat("), mode=", interpolate_mode_name(options_.mode));
  if (options_.align_corners) s += str_cat(", align_corners=", *options_.align_corners ? "true" : "false");
  if (options_.antialias) s += ", antialias=true";
  return s;
}

}  // namespace mg::nn
