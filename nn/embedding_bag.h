// EmbeddingBag: PyTorch's nn.EmbeddingBag / F.embedding_bag — the sum, mean or max of each bag
// of embedding rows, without materialising the per-index rows for the user:
//   input 2-D [B, N]: each row is a bag of N indices (offsets undefined);
//   input 1-D [n] with offsets [B] (bag b = input[offsets[b] : offsets[b+1]], the last one to n) or,
//   with include_last_offset, offsets [B + 1] (CSR: the last entry must be n);
// -> [B, D]. An index equal to padding_idx is left out of its bag (not counted by the mean, no
// gradient); an empty bag gives zeros. per_sample_weights (input's shape, floating; mode Sum only)
// scale each row before the sum and receive a gradient. scale_grad_by_freq divides each lookup's
// weight gradient by its index's count in the input (one scatter_add over the input, and one
// elementwise pass over the [B, longest, D] rows' gradient).
//
// Built from public ops (embedding, masks, sum/max), so it runs on every device and dtype: the
// bags are laid out as a dense [B, longest bag] table whose unused slots are masked, so memory is
// B x longest x D. 1-D input reads the offsets on the host to build that table (a synchronisation
// on a GPU; 2-D input reads nothing). f16/bf16 rows are summed in f32 and rounded once; in max
// mode the first maximum of a bag takes the gradient, as in PyTorch, but a NaN row gives NaN
// (PyTorch's strict > passes over a NaN after the first slot). On CUDA the backward passes are
// the deterministic scatter_add of index_select and embedding (docs/cuda.md): O(V x B x longest)
// index reads per embedding column, slow for large vocabularies (a sorted path is future work).
//
//   auto bag = nn::make<nn::EmbeddingBag>({.num = 10000, .dim = 64, .mode = nn::BagMode::Mean});
//   mg::Tensor y = bag->forward(tokens, offsets);          // tokens [n] i64, offsets [B] -> [B, 64]
#pragma once
#include <cstdint>
#include <memory>
#include <optional>

#include "mixgrad/nn/module.h"

namespace mg::nn {

enum class BagMode { Sum, Mean, Max };

struct EmbeddingBagArgs {
  Tensor offsets;                      // 1-D input only: integer [B] (or [B + 1] with include_last_offset)
  Tensor per_sample_weights;           // optional, input's shape; BagMode::Sum only
  BagMode mode = BagMode::Mean;
  bool include_last_offset = false;
  std::optional<int64_t> padding_idx;  // left out of the bags (negative: from the end)
  // PyTorch's scale_grad_by_freq (Sum and Mean): each lookup's weight gradient divided by how often
  // its index occurs in the whole input (padding entries counted, as PyTorch's).
  bool scale_grad_by_freq = false;
};

// weight [V, D] (floating), input integer (i64 or i32) [B, N] or [n] -> [B, D] in weight's dtype.
Tensor embedding_bag(const Tensor& weight, const Tensor& input, const EmbeddingBagArgs& args = {});

struct EmbeddingBagOptions {
  int64_t num = 0;                     // vocabulary size V
  int64_t dim = 0;                     // embedding size D
  BagMode mode = BagMode::Mean;
  bool include_last_offset = false;
  std::optional<int64_t> padding_idx;  // excluded from the bags; its row starts at zero
  std::optional<double> max_norm;      // as EmbeddingOptions::max_norm (rows renormalised before each lookup)
  double norm_type = 2.0;
  bool scale_grad_by_freq = false;     // as EmbeddingBagArgs::scale_grad_by_freq
};

// weight [V, D] initialised N(0, 1) with the padding row zeroed (PyTorch's); forward(input,
// offsets, per_sample_weights) as embedding_bag above.
class EmbeddingBag : public UnaryModule {
 public:
  using Options = EmbeddingBagOptions;
  explicit EmbeddingBag(Options options) : EmbeddingBag(std::move(options), true) {}
  void reset_parameters();
  // PyTorch's EmbeddingBag.from_pretrained: a copy of embeddings [V, D], frozen unless freeze is
  // false; `options` supplies the mode, padding_idx, max_norm (num and dim come from the tensor).
  static std::shared_ptr<EmbeddingBag> from_pretrained(const Tensor& embeddings, bool freeze = true,
                                                       Options options = {});
  Tensor forward(const Tensor& input, const Tensor& offsets, const Tensor& per_sample_weights = Tensor());
  Tensor forward(const Tensor& input) override { return forward(input, Tensor()); }
  const Options& options() const { return options_; }

  Tensor weight;  // [V, D]

 protected:
  std::string extra_repr() const override;

 private:
  // initialize = false: the weight is left uninitialised, for from_pretrained (as Embedding's).
  EmbeddingBag(Options options, bool initialize);
  Options options_;
};

}  // namespace mg::nn
