// TensorDataset: examples held in memory as named tensors that share their first dimension (N);
// get_batch gathers rows into new tensors. For synthetic data, small experiments and tests.
//
//   auto ds = std::make_shared<mg::data::TensorDataset>(
//       std::vector<std::pair<std::string, mg::Tensor>>{{"input", x}, {"target", y}});  // x [N, D], y [N]
//   mg::data::DataLoader loader(ds, {.batch_size = 32, .shuffle = true});
#pragma once
#include <string>
#include <utility>
#include <vector>

#include "mixgrad/data/dataset.h"

namespace mg::data {

class TensorDataset : public Dataset {
 public:
  // Every tensor must be a contiguous CPU tensor of at least one dimension, all with the same
  // first dimension N (the tensors are shared, not copied; do not modify them while loading).
  explicit TensorDataset(std::vector<std::pair<std::string, Tensor>> tensors);
  int64_t size() const override { return size_; }
  // One tensor per name, [B, ...] with the rows `indices`, same dtype.
  Batch get_batch(const std::vector<int64_t>& indices, const BatchContext& ctx) const override;
  std::string name() const override { return "TensorDataset"; }

 private:
  std::vector<std::pair<std::string, Tensor>> tensors_;
  int64_t size_ = 0;
};

}  // namespace mg::data
