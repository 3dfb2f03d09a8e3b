// A tensor saved for backward. It remembers the storage version at save time; unpacking after an
// in-place modification is an error naming the op, never a wrong gradient. A saved *output* does
// not own its grad_fn (that would be a reference cycle: output -> node -> output); it keeps a weak
// reference and re-attaches it on unpack so double backward still sees the history. A saved view
// is kept as an alias without its view base (view -> base -> the base's later history -> this
// node would be a cycle too). While saved-tensor hooks are installed (autograd/saved_tensor_hooks.h)
// only what their pack returned is kept, with the history and metadata to rebuild the tensor.
#pragma once
#include <any>
#include <memory>
#include <string>

#include "mixgrad/autograd/node.h"
#include "mixgrad/autograd/saved_tensor_hooks.h"

namespace mg::autograd {

class SavedTensor {
 public:
  SavedTensor() = default;
  SavedTensor(const Tensor& t, bool is_output);
  // `node_name` is used in the error message.
  Tensor unpack(const std::string& node_name) const;
  bool defined() const { return data_.defined() || packed_.has_value(); }
  // True when something was saved here (also after release()).
  bool is_saved() const { return saved_; }
  // Frees the data (after a backward without retain_graph); a later unpack is an error.
  void release();

 private:
  Tensor data_;  // the tensor (inputs) or a history-free alias of it (outputs)
  uint64_t saved_version_ = 0;
  bool is_output_ = false;
  bool requires_grad_ = false;
  bool released_ = false;
  bool saved_ = false;
  std::weak_ptr<Node> grad_fn_;
  uint32_t output_nr_ = 0;
  // Hooked: the pair that packed it, what pack returned, the metadata unpack must reproduce, the
  // history of a saved input (held strongly: the tensor itself would have held it), and the
  // packed tensor's storage, weakly, for the in-place check while it lives.
  std::shared_ptr<const SavedTensorHookPair> hooks_;
  std::any packed_;
  Shape shape_;
  DType dtype_ = DType::F32;
  Device device_ = Device::cpu();
  std::shared_ptr<Node> input_grad_fn_;
  std::weak_ptr<Storage> storage_;

  Tensor unpack_hooked(const std::string& node_name) const;
};

}  // namespace mg::autograd
