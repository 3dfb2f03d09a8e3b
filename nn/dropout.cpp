#include "mixgrad/nn/dropout.h"

#include <algorithm>
#include <cmath>
#include <vector>

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

Tensor channel_dropout(const Tensor& x, int64_t spatial_dims, double p, bool training, Generator* gen) {
  MG_CHECK(p >= 0 && p <= 1, Error, "channel_dropout: p must be in [0, 1], got ", p);
  MG_CHECK(x.defined() && (x.dim() == spatial_dims + 2 || x.dim() == spatial_dims + 1), ShapeError,
           "channel_dropout: expected x [N, C, ", spatial_dims, " spatial dims] or [C, ", spatial_dims,
           " spatial dims], got ", x.defined() ? describe(x) : "undefined");
  if (!training || p == 0.0) return x;
  Shape mask_shape = x.shape();
  for (int64_t d = x.dim() - spatial_dims; d < x.dim(); ++d) mask_shape[std::size_t(d)] = 1;
  const Tensor keep = dropout(ones(mask_shape, {.dtype = x.dtype(), .device = x.device()}), p, true, gen);
  return x * keep;
}

ChannelDropout::ChannelDropout(std::string type, int64_t spatial_dims, Options o)
    : UnaryModule(std::move(type)), spatial_dims_(spatial_dims), options_(o) {
  MG_CHECK(o.p >= 0 && o.p <= 1, Error, type_name(), ": p must be in [0, 1], got ", o.p);
}

Tensor ChannelDropout::forward(const Tensor& x) {
  try {
    return channel_dropout(x, spatial_dims_, options_.p, is_training(), options_.generator);
  } catch (const ShapeError& e) {
    throw ShapeError(str_cat(layer_name(), ": ", e.what()));
  }
}

Tensor alpha_dropout(const Tensor& x, double p, bool training, bool feature, Generator* gen) {
  const char* who = feature ? "feature_alpha_dropout" : "alpha_dropout";
  MG_CHECK(p >= 0 && p <= 1, Error, who, ": p must be in [0, 1], got ", p);
  MG_CHECK(x.defined() && x.is_floating_point(), DTypeError, who, ": expected a floating tensor, got ",
           x.defined() ? describe(x) : "undefined");
  if (!training || p == 0.0) return x;
  MG_CHECK(!feature || x.dim() >= 2, ShapeError, who, ": expected x of at least 2 dims [N, C, *], got ", describe(x));
  if (p == 1.0) return x * scalar_like(0, x);
  constexpr double kAlpha = 1.7580993408473766;  // SELU's -alpha * scale: its saturation value's magnitude
  const double a = 1.0 / std::sqrt((kAlpha * kAlpha * p + 1) * (1 - p));
  const DType dt = x.dtype();
  const DType math = dt == DType::F16 || dt == DType::BF16 ? DType::F32 : dt;  // rounded once at the end
  Shape mask_shape = x.shape();
  if (feature)
    for (int64_t d = 2; d < x.dim(); ++d) mask_shape[std::size_t(d)] = 1;
  // kept: 1 or 0 (dropout of ones gives 1/(1-p) or 0).
  const Tensor kept = ne(dropout(ones(mask_shape, {.dtype = math, .device = x.device()}), p, true, gen),
                         zeros({}, {.dtype = math, .device = x.device()})).to(math);
  // PyTorch's: x * (kept * a) + ((kept - 1) * alpha * a + alpha * a * p)
  return (x.to(math) * (kept * a) + ((kept - 1.0) * (kAlpha * a) + kAlpha * a * p)).to(dt);
}

AlphaDropout::AlphaDropout(Options o) : AlphaDropout("AlphaDropout", false, o) {}

AlphaDropout::AlphaDropout(std::string type, bool feature, Options o)
    : UnaryModule(std::move(type)), feature_(feature), options_(o) {
  MG_CHECK(o.p >= 0 && o.p <= 1, Error, type_name(), ": p must be in [0, 1], got ", o.p);
}

Tensor AlphaDropout::forward(const Tensor& x) {
  try {
    return alpha_dropout(x, options_.p, is_training(), feature_, options_.generator);
  } catch (const ShapeError& e) {
    throw ShapeError(str_cat(layer_name(), ": ", e.what()));
  }
}

int64_t embedding_renorm_(const Tensor& weight, const Tensor& indices, double max_norm, double norm_type) {
  constexpr const char* kWho = "embedding_renorm_";
  MG_CHECK(weight.defined() && weight.dim() == 2 && weight.is_floating_point(), ShapeError, kWho,
           ": expected a floating weight [V, D], got ", weight.defined() ? describe(weight) : "undefined");
  MG_CHECK(indices.defined() && (indices.dtype() == DType::I64 || indices.dtype() == DType::I32), DTypeError, kWho,
           ": expected i64 or i32 indices, got ", indices.defined() ? describe(indices) : "undefined");
  MG_CHECK(max_norm >= 0.0 && std::isfinite(max_norm), Error, kWho, ": max_norm must be finite and >= 0, got ", max_norm);
  MG_CHECK(norm_type > 0.0, Error, kWho, ": norm_type must be > 0 (or INFINITY), got ", norm_type);
  NoGradGuard no_grad;
  const Tensor host = contiguous(to(to(indices, Device::cpu()), DType::I64));
  std::vector<int64_t> rows(host.data<int64_t>(), host.data<int64_t>() + host.numel());
  const int64_t V = weight.size(0);
  for (int64_t r : rows) {
    MG_CHECK(r >= 0 && r < V, IndexError, kWho, ": index ", r, " is out of range for ", V, " rows");
  }
  std::sort(rows.begin(), rows.end());
  rows.erase(std::unique(rows.begin(), rows.end()), rows.end());
  if (rows.empty()) return 0;
  // Every row's norm in one pass (f64), one read to the host; only the rows over max_norm change.
  const Tensor picked = to(index_select(weight, 0, from_vector<int64_t>(rows, {int64_t(rows.size())}).to(weight.device())),
                           DType::F64);
  const Tensor norms = contiguous(to(norm(picked, norm_type, {1}), Device::cpu()));
  int64_t scaled = 0;
  for (std::size_t k = 0; k < rows.size(); ++k) {
    const double n = norms.data<double>()[k];
    if (n > max_norm) {
      Tensor(weight.select(0, rows[k])).mul_(max_norm / (n + 1e-7));
      ++scaled;
    }
  }
  return scaled;
}

Embedding::Embedding(Options o, bool initialize) : UnaryModule("Embedding"), options_(o) {
  MG_CHECK(o.num > 0 && o.dim > 0, Error, "Embedding: num and dim must be positive, got num=", o.num, ", dim=", o.dim);
  MG_CHECK(!o.max_norm || (*o.max_norm >= 0.0 && std::isfinite(*o.max_norm)), Error,
           "Embedding: max_norm must be finite and >= 0, got ", o.max_norm.value_or(0.0));
  MG_CHECK(o.norm_type > 0.0, Error, "Embedding: norm_type must be > 0 (or INFINITY), got ", o.norm_type);
  if (o.padding_idx) {
    MG_CHECK(*o.padding_idx >= -o.num && *o.padding_idx < o.num, IndexError, "Embedding: padding_idx ",
             *o.padding_idx, " is out of range for ", o.num, " embeddings");
    padding_idx_ = *o.padding_idx < 0 ? *o.padding_idx + o.num : *o.padding_idx;
  }
  weight = register_parameter("weight", empty({o.num, o.dim}));
  if (initialize) reset_parameters();
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
    if (options_.max_norm) embedding_renorm_(weight, indices, *options_.max_norm, options_.norm_type);
    return embedding(weight, indices, padding_idx_ >= 0 ? std::optional<int64_t>(padding_idx_) : std::nullopt,
                     options_.scale_grad_by_freq);
  } catch (const IndexError& e) {
    // The op knows the bad index and names both operands; the layer adds which table it was.
    throw IndexError(str_cat(layer_name(), ": ", e.what()));
  }
}

namespace detail {

void check_pretrained_table(const Tensor& embeddings, const char* who) {
  MG_CHECK(embeddings.defined() && embeddings.dim() == 2 && embeddings.is_floating_point(), ShapeError, who,
           ": expected floating embeddings [V, D], got ", embeddings.defined() ? describe(embeddings) : "undefined");
}

void load_pretrained_table(Module& module, Tensor& weight, const Tensor& embeddings, bool freeze) {
  module.to(embeddings.device());
  module.to(embeddings.dtype());
  NoGradGuard no_grad;
  weight.copy_(embeddings.detach());
  weight.requires_grad_(!freeze);
}

}  // namespace detail

std::shared_ptr<Embedding> Embedding::from_pretrained(const Tensor& embeddings, bool freeze, Options options) {
  detail::check_pretrained_table(embeddings, "Embedding::from_pretrained");
  options.num = embeddings.size(0);
  options.dim = embeddings.size(1);
  std::shared_ptr<Embedding> e(new Embedding(options, /*initialize=*/false));  // no throwaway draws
  detail::load_pretrained_table(*e, e->weight, embeddings, freeze);
  return e;
}

std::string Embedding::extra_repr() const {
  std::string s = str_cat(options_.num, ", ", options_.dim);
  if (padding_idx_ >= 0) s += str_cat(", padding_idx=", padding_idx_);
  if (options_.max_norm) s += str_cat(", max_norm=", *options_.max_norm);
  if (options_.max_norm && options_.norm_type != 2.0) s += str_cat(", norm_type=", options_.norm_type);
  if (options_.scale_grad_by_freq) s += ", scale_grad_by_freq=true";
  return s;
}

}  // namespace mg::nn
