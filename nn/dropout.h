// Dropout and Embedding layers.
//
//   auto drop = nn::make<nn::Dropout>({.p = 0.1});
//   auto emb  = nn::make<nn::Embedding>({.num = 8192, .dim = 256, .padding_idx = 0});
#pragma once
#include <memory>
#include <optional>

#include "mixgrad/core/generator.h"
#include "mixgrad/nn/module.h"

namespace mg::nn {

struct DropoutOptions {
  double p = 0.5;                 // probability of zeroing an element
  Generator* generator = nullptr; // Philox stream; the default generator when null
};

// Zeroes elements with probability p and scales the rest by 1/(1-p) in training; identity in eval.
class Dropout : public UnaryModule {
 public:
  using Options = DropoutOptions;
  explicit Dropout(Options options = {});
  Tensor forward(const Tensor& x) override;

 protected:
  std::string extra_repr() const override { return str_cat("p=", options_.p); }

 private:
  Options options_;
};

// Channel dropout (PyTorch's Dropout1d / Dropout2d / Dropout3d): in training each channel of each
// sample — x [N, C, *spatial] or unbatched [C, *spatial], `spatial_dims` of them — is zeroed
// with probability p as a whole and the others scaled by 1/(1-p); identity in eval. The channel
// mask is dropout() of ones [N, C, 1, ...] (the same Philox stream and scaling as Dropout).
Tensor channel_dropout(const Tensor& x, int64_t spatial_dims, double p, bool training = true, Generator* gen = nullptr);
// PyTorch's functional names for it: F.dropout1d / dropout2d / dropout3d.
inline Tensor dropout1d(const Tensor& x, double p = 0.5, bool training = true, Generator* gen = nullptr) {
  return channel_dropout(x, 1, p, training, gen);
}
inline Tensor dropout2d(const Tensor& x, double p = 0.5, bool training = true, Generator* gen = nullptr) {
  return channel_dropout(x, 2, p, training, gen);
}
inline Tensor dropout3d(const Tensor& x, double p = 0.5, bool training = true, Generator* gen = nullptr) {
  return channel_dropout(x, 3, p, training, gen);
}

// The module form of channel_dropout, the base of Dropout1d/2d/3d below (which fix spatial_dims);
// `p` and the generator come from DropoutOptions, training mode from the module.
class ChannelDropout : public UnaryModule {
 public:
  using Options = DropoutOptions;
  Tensor forward(const Tensor& x) override;

 protected:
  ChannelDropout(std::string type, int64_t spatial_dims, Options options);
  std::string extra_repr() const override { return str_cat("p=", options_.p); }

 private:
  int64_t spatial_dims_;
  Options options_;
};

// x [N, C, L] or [C, L].
class Dropout1d : public ChannelDropout {
 public:
  explicit Dropout1d(Options options = {}) : ChannelDropout("Dropout1d", 1, options) {}
};
// x [N, C, H, W] or [C, H, W].
class Dropout2d : public ChannelDropout {
 public:
  explicit Dropout2d(Options options = {}) : ChannelDropout("Dropout2d", 2, options) {}
};
// x [N, C, D, H, W] or [C, D, H, W].
class Dropout3d : public ChannelDropout {
 public:
  explicit Dropout3d(Options options = {}) : ChannelDropout("Dropout3d", 3, options) {}
};

// Alpha dropout (Klambauer et al. 2017, for SELU networks): in training each element (or, with
// feature = true, each (dim 0, dim 1) slice of x [N, C, *]) is kept with probability 1 - p or set to
// SELU's saturation value -alpha' = -1.7580993408473766, then an affine map a·x + b restores the
// input's mean 0 and variance 1: a = ((1 - p)(1 + p alpha'^2))^(-1/2), b = a alpha' p
// (PyTorch's alpha_dropout / feature_alpha_dropout). Identity in eval; p = 1 gives zeros, as
// PyTorch. The keep mask is dropout() of ones (the same Philox stream as Dropout).
Tensor alpha_dropout(const Tensor& x, double p, bool training = false, bool feature = false, Generator* gen = nullptr);
// F.feature_alpha_dropout: alpha_dropout with feature = true.
inline Tensor feature_alpha_dropout(const Tensor& x, double p = 0.5, bool training = false, Generator* gen = nullptr) {
  return alpha_dropout(x, p, training, /*feature=*/true, gen);
}

class AlphaDropout : public UnaryModule {
 public:
  using Options = DropoutOptions;
  explicit AlphaDropout(Options options = {});
  Tensor forward(const Tensor& x) override;

 protected:
  AlphaDropout(std::string type, bool feature, Options options);
  std::string extra_repr() const override { return str_cat("p=", options_.p); }

 private:
  bool feature_ = false;
  Options options_;
};

// Whole channels: the mask is [x.size(0), x.size(1), 1, ...], as PyTorch's (which reads an
// unbatched [C, D, H, W] input the same way: dim 1 as the channels).
class FeatureAlphaDropout : public AlphaDropout {
 public:
  explicit FeatureAlphaDropout(Options options = {}) : AlphaDropout("FeatureAlphaDropout", true, options) {}
};

struct EmbeddingOptions {
  int64_t num = 0;                      // vocabulary size V
  int64_t dim = 0;                      // embedding size D
  std::optional<int64_t> padding_idx;   // row that stays zero and gets no gradient (negative: from the end)
  // PyTorch's max_norm: before each lookup, every row it reads whose norm_type-norm exceeds
  // max_norm is scaled in place (no gradient) to max_norm / (norm + 1e-7) of itself, as
  // torch.embedding_renorm_. The indices are read on the host (a synchronisation on a GPU).
  std::optional<double> max_norm;
  double norm_type = 2.0;
  // PyTorch's scale_grad_by_freq: each lookup's gradient divided by how often its index occurs in
  // the batch. (PyTorch's `sparse` has no counterpart: the gradient is always a dense [V, D].)
  bool scale_grad_by_freq = false;
};

namespace detail {
// from_pretrained's parts for Embedding and EmbeddingBag: `embeddings` must be floating [V, D]
// (an error naming `who`); the module moved to its device and dtype, the table copied into
// `weight`, frozen when asked.
void check_pretrained_table(const Tensor& embeddings, const char* who);
void load_pretrained_table(Module& module, Tensor& weight, const Tensor& embeddings, bool freeze);
}  // namespace detail

// torch.embedding_renorm_: each distinct row of `weight` [V, D] named by `indices` whose
// norm_type-norm (computed in f64) exceeds max_norm is multiplied in place, without recording a
// gradient, by max_norm / (norm + 1e-7). Returns the number of rows scaled.
int64_t embedding_renorm_(const Tensor& weight, const Tensor& indices, double max_norm, double norm_type = 2.0);

// Rows of weight [V, D] (initialised N(0, 1), the padding row zeroed) picked by integer indices:
// [...] -> [..., D]; with max_norm the rows read are renormalised first (embedding_renorm_).
class Embedding : public UnaryModule {
 public:
  using Options = EmbeddingOptions;
  explicit Embedding(Options options) : Embedding(std::move(options), true) {}
  Tensor forward(const Tensor& indices) override;
  void reset_parameters();
  // PyTorch's Embedding.from_pretrained: a table holding a copy of embeddings [V, D] (its dtype and
  // device), frozen (no gradient) unless freeze is false; the padding row is not zeroed. `options`
  // supplies padding_idx, max_norm and norm_type (num and dim come from the tensor).
  static std::shared_ptr<Embedding> from_pretrained(const Tensor& embeddings, bool freeze = true,
                                                    Options options = {});
  // The padding row in [0, V), or -1 when there is none.
  int64_t padding_idx() const { return padding_idx_; }

  Tensor weight;  // [V, D]

 protected:
  std::string extra_repr() const override;

 private:
  // initialize = false: the weight is left uninitialised (from_pretrained overwrites it; drawing a
  // table first would move the default generator, changing every later seeded draw).
  Embedding(Options options, bool initialize);
  Options options_;
  int64_t padding_idx_ = -1;  // normalised to [0, V) or -1
};

}  // namespace mg::nn
