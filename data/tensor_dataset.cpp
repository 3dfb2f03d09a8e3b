// TensorDataset (tensor_dataset.h): a row gather with memcpy, any dtype.
#include "mixgrad/data/tensor_dataset.h"

#include <cstring>

namespace mg::data {

TensorDataset::TensorDataset(std::vector<std::pair<std::string, Tensor>> tensors)
    : tensors_(std::move(tensors)) {
  MG_CHECK(!tensors_.empty(), Error, "TensorDataset: no tensors given");
  for (std::size_t k = 0; k < tensors_.size(); ++k) {
    const auto& [name, t] = tensors_[k];
    MG_CHECK(t.defined() && t.dim() >= 1, ShapeError, "TensorDataset: tensor '", name,
             "' must have at least one dimension");
    MG_CHECK(t.device().is_cpu() && t.is_contiguous(), Error, "TensorDataset: tensor '", name,
             "' must be a contiguous CPU tensor, got ", describe(t),
             "\n  hint: pass t.contiguous().to(mg::Device::cpu())");
    for (std::size_t j = 0; j < k; ++j) {
      MG_CHECK(tensors_[j].first != name, Error, "TensorDataset: tensor '", name, "' given twice");
    }
    if (k == 0) size_ = t.size(0);
    MG_CHECK(t.size(0) == size_, ShapeError, "TensorDataset: tensor '", name, "' has ", t.size(0),
             " rows but '", tensors_[0].first, "' has ", size_, "; got ", t.shape(), " and ",
             tensors_[0].second.shape());
  }
}

Batch TensorDataset::get_batch(const std::vector<int64_t>& indices, const BatchContext&) const {
  for (const int64_t i : indices) {
    MG_CHECK(i >= 0 && i < size_, IndexError, "TensorDataset: index ", i, " out of range for ",
             size_, " examples");
  }
  Batch batch;
  for (const auto& [name, t] : tensors_) {
    Shape shape = t.shape();
    shape[0] = int64_t(indices.size());
    Tensor out = empty(shape, {.dtype = t.dtype()});  // [B, ...]
    const std::size_t row = std::size_t(t.numel() / std::max<int64_t>(size_, 1)) * t.element_size();
    const char* src = static_cast<const char*>(t.data_ptr());
    char* dst = static_cast<char*>(out.data_ptr());
    for (std::size_t k = 0; k < indices.size(); ++k) {
      std::memcpy(dst + k * row, src + std::size_t(indices[k]) * row, row);
    }
    batch.add(name, std::move(out));
  }
  return batch;
}

}  // namespace mg::data
