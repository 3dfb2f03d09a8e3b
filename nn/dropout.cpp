#include "mixgrad/nn/dropout.h"

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/factory.h"
#include "mixgrad/nn/init.h"
#include "mixgrad/ops/norm.h"
#include "mixgrad/ops/ops.h"

namespace mg::nn {

Dropout::Dropout(Options o) : UnaryModule("Dropout"), options_(o) {
  MG_CHECK(o.p >= 0 && o.p <= 1, Error, "Dropout: p must be in [0, 1], got ", o.p);
}

Tensor Dropout::forward(const Tensor& x) { return dropout(x, options_.p, is_training(), options_.generator); }

Embedding::Embedding(Options o) : UnaryModule("Embedding"), options_(o) {
  MG_CHECK(o.num > 0 && o.dim > 0, Error, "Embedding: num and dim must be positive, got num=", o.num, ", dim=", o.dim);
  if (o.padding_idx) {
    MG_CHECK(*o.padding_idx >= -o.num && *o.padding_idx < o.num, IndexError, "Embedding: padding_idx ",
             *o.padding_idx, " is out of range for ", o.num, " embeddings");
    padding_idx_ = *o.padding_idx < 0 ? *o.padding_idx + o.num : *o.padding_idx;
  }
  weight = register_parameter("weight", empty({o.num, o.dim}));
  reset_parameters();
}

void Embedding::reset_parameters() {
  init::normal_(weight);
  if (padding_idx_ >= 0) {
    NoGradGuard no_grad;
    weight.select(0, padding_idx_).zero_();
  }
}

Tensor Embedding::forward(const Tensor& indices) {
  MG_CHECK(indices.defined() && (indices.dtype() == DType::I64 || indices.dtype() == DType::I32), DTypeError,
           layer_name(), ": expected i64 or i32 indices, got ", indices.defined() ? describe(indices) : "undefined");
  try {
    return embedding(weight, indices, padding_idx_ >= 0 ? std::optional<int64_t>(padding_idx_) : std::nullopt);
  } catch (const IndexError& e) {
    // The op knows the bad index and names both operands; the layer adds which table it was.
    throw IndexError(str_cat(layer_name(), ": ", e.what()));
  }
}

std::string Embedding::extra_repr() const {
  std::string s = str_cat(options_.num, ", ", options_.dim);
  if (padding_idx_ >= 0) s += str_cat(", padding_idx=", padding_idx_);
  return s;
}

}  // namespace mg::nn
