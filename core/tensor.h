// Tensor: a reference-counted handle to a TensorImpl, which is a strided view (shape, strides,
// offset, dtype) into a Storage plus the autograd fields. Copying a Tensor copies the handle, not
// the data. Math lives in ops/ (free functions such as mg::exp, mg::matmul and the operators);
// the member functions below that compute are defined there too, so calls read like LibTorch:
//
//   mg::Tensor x = mg::randn({2, 3}).requires_grad_();
//   mg::Tensor y = (x * x).sum();
//   y.backward();                      // x.grad() == 2 * x
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "mixgrad/core/dtype.h"
#include "mixgrad/core/error.h"
#include "mixgrad/core/memory_format.h"
#include "mixgrad/core/shape.h"
#include "mixgrad/core/storage.h"

namespace mg {

namespace autograd {
class Node;
}

class Tensor;
struct TensorImpl;
enum class GeluApprox;  // defined in ops/ops.h: None (erf form) or Tanh
using Tensors = std::vector<Tensor>;
// A gradient hook: receives the gradient flowing into a tensor and returns a replacement (of the
// same shape, dtype and device: anything else is an AutogradError), or an undefined Tensor to keep it.
using TensorHook = std::function<Tensor(const Tensor&)>;

// What Tensor::register_hook returns: remove() takes the hook off again (PyTorch's handle.remove()).
// It refers to the node the hook sits on weakly, so it never keeps a graph alive.
struct HookHandle {
  std::weak_ptr<autograd::Node> node;
  uint64_t id = 0;
  // Removes the hook; false when it is gone already (removed before, or its graph freed).
  bool remove() const;  // defined in autograd/
};

// Autograd fields of a tensor. A leaf has no grad_fn; its gradient lands in `grad`.
struct AutogradMeta {
  bool requires_grad = false;
  std::shared_ptr<autograd::Node> grad_fn;        // node that produced this tensor
  uint32_t output_nr = 0;                         // which output of grad_fn this is
  std::shared_ptr<TensorImpl> grad;               // accumulated gradient (leaves, retain_grad)
  // Leaves: the AccumulateGrad node (created lazily). Owned by the leaf, which it references only
  // weakly, so there is no cycle; leaf hooks live on it.
  std::shared_ptr<autograd::Node> grad_accumulator;
  bool retains_grad = false;  // a non-leaf whose retain_grad() was called: its grad_fn fills .grad
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  Shape shape;
  Strides strides;  // in elements
  int64_t offset = 0;  // in elements
  DType dtype = DType::F32;
  bool is_view = false;       // shares storage with the tensor it was derived from
  uint64_t view_version = 0;  // storage version when this view was made (or last written in place)
  // Views made by view ops: the tensor at the root of the chain of view ops (PyTorch's view
  // base), whose history an in-place op on the view rebases (ops/inplace_view.h). Null for
  // tensors that are not views and for detach(), whose result is a root of its own.
  std::shared_ptr<TensorImpl> view_base;
  // Made by a view op while grad mode was off (or a view of such a view): an in-place op on it
  // that autograd would record is refused, as PyTorch's NO_GRAD_MODE creation meta.
  bool view_made_in_no_grad = false;
  AutogradMeta autograd;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }
  bool is_same(const Tensor& other) const { return impl_ == other.impl_; }

  // ---- metadata (all throw mg::Error on an undefined tensor) ----
  const Shape& shape() const { return checked()->shape; }
  const Strides& strides() const { return checked()->strides; }
  int64_t offset() const { return checked()->offset; }
  int64_t dim() const { return int64_t(shape().size()); }
  int64_t size(int64_t d) const;    // negative d counts from the end
  int64_t stride(int64_t d) const;
  int64_t numel() const { return shape_numel(shape()); }
  DType dtype() const { return checked()->dtype; }
  Device device() const { return checked()->storage->device(); }
  std::size_t element_size() const { return dtype_size(dtype()); }
  bool is_contiguous() const;
  // Dense in memory format `f` (docs/memory_format.md); is_contiguous(Contiguous) == is_contiguous().
  // ChannelsLast on a tensor that is not 4-D is false; Preserve is an error.
  bool is_contiguous(MemoryFormat f) const;
  // The format the strides suggest (PyTorch's suggest_memory_format; core/memory_format.h).
  MemoryFormat suggest_memory_format() const { return mg::suggest_memory_format(shape(), strides()); }
  bool is_floating_point() const { return is_floating(dtype()); }
  // True when the storage is page-locked host memory from the pinned allocator (pin_memory(),
  // to(cpu, true) of a CUDA tensor, a DataLoader with pin_memory); defined in core/pinned_memory.cpp.
  bool is_pinned() const;
  Storage& storage() const { return *checked()->storage; }
  // Pointer to the first element (storage data + offset).
  void* data_ptr() const;
  // Typed pointer to the first element; throws DTypeError when T is not the tensor's dtype.
  template <typename T>
  T* data() const {
    MG_CHECK(dtype() == dtype_v<T>, DTypeError, "Tensor::data: tensor is ", dtype_name(dtype()),
             " but data<", dtype_name(dtype_v<T>), ">() was requested");
    return static_cast<T*>(data_ptr());
  }
  // Version of the underlying storage; in-place ops bump it (shared by all views).
  uint64_t version() const { return storage().version(); }
  void bump_version() const { storage().bump_version(); }

  // ---- autograd ----
  bool requires_grad() const { return defined() && impl_->autograd.requires_grad; }
  // Marks a leaf as requiring grad; floating dtypes only.
  Tensor& requires_grad_(bool on = true);
  bool is_leaf() const { return !checked()->autograd.grad_fn; }
  // Makes this tensor (every handle to it) view `src`'s data: storage, shape, strides, offset and
  // dtype are replaced, requires_grad is kept, .grad is cleared. For leaves only (module.to(),
  // loading a state dict); throws for a tensor with history.
  void set_data(const Tensor& src) const;
  const std::shared_ptr<autograd::Node>& grad_fn() const { return checked()->autograd.grad_fn; }
  uint32_t output_nr() const { return checked()->autograd.output_nr; }
  // Accumulated gradient (undefined until a backward reaches this tensor).
  Tensor grad() const;
  void set_grad(const Tensor& g) const;
  // Runs `hook` on the gradient flowing into this tensor during backward (defined in autograd/);
  // the handle removes it.
  HookHandle register_hook(TensorHook hook) const;
  // Keeps .grad for a non-leaf tensor (defined in autograd/), as PyTorch: the gradient after all of
  // the tensor's hooks; a second call changes nothing; after an in-place op, the new value's.
  void retain_grad() const;
  // Backward from this tensor (defined in autograd/). A non-scalar needs `gradient`.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false,
                bool create_graph = false) const;

  // ---- element access (defined in core/tensor.cpp) ----
  // The value of a one-element tensor converted to T; throws for more than one element.
  // Integer results from integer tensors are exact over the whole int64 range.
  // An integer T the value does not fit (NaN, inf, out of T's range, a float's or a wider
  // integer's) is an error, as PyTorch's checked conversion; a float's fraction is truncated.
  template <typename T>
  T item() const {
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      constexpr long double lo = (long double)std::numeric_limits<T>::min();
      constexpr long double hi = (long double)std::numeric_limits<T>::max();
      if (!is_floating(dtype())) {
        const int64_t v = item_int64();
        if (!std::in_range<T>(v)) throw_item_range(double(v), item_type_name<T>());
        return static_cast<T>(v);
      }
      const double v = item_double();
      // v's integer part in [lo, hi] (long double holds both bounds exactly); NaN fails too.
      const long double whole = std::trunc((long double)v);
      if (!(whole >= lo && whole <= hi)) throw_item_range(v, item_type_name<T>());
      return static_cast<T>(v);
    }
    return static_cast<T>(item_double());
  }
  double item_double() const;
  int64_t item_int64() const;  // integer and bool tensors only
  // item<T>'s error for a value T cannot hold: an mg::Error naming the value and T.
  [[noreturn]] void throw_item_range(double v, const char* type) const;
  template <typename T>
  static constexpr const char* item_type_name() {
    if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, long long>) return "int64";
    else if constexpr (std::is_same_v<T, int32_t>) return "int32";
    else if constexpr (std::is_same_v<T, int16_t>) return "int16";
    else if constexpr (std::is_same_v<T, int8_t>) return "int8";
    else if constexpr (std::is_same_v<T, uint8_t>) return "uint8";
    else if constexpr (std::is_unsigned_v<T>) return "an unsigned integer";
    else return "an integer";
  }

  // ---- LibTorch-style methods, defined in ops/tensor_methods.cpp ----
  // Each is a one-line forward to the free function of the same name in ops/ops.h or ops/loss.h
  // (the same dispatcher entry point, the same arguments and defaults, `*this` first), so
  // x.exp() is mg::exp(x) and x.sum({1}, true) is mg::sum(x, {1}, true). The in-place forms
  // (trailing underscore) run the same op through dispatch_inplace. The full list with each
  // method's free function is in docs/tensor_methods.md.
  //
  //   mg::Tensor p = logits.softmax(-1);                   // logits [N, C] -> p [N, C]
  //   mg::Tensor y = x.matmul(w).relu().sum({1}, true);    // [N, K] @ [K, M] -> [N, 1]

  // views, copies and casts
  Tensor detach() const;
  Tensor view(const Shape& shape) const;
  Tensor reshape(const Shape& shape) const;
  Tensor permute(const Shape& dims) const;
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor t() const;  // 2-D transpose
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;
  Tensor expand(const Shape& shape) const;
  Tensor squeeze(int64_t dim) const;
  Tensor squeeze() const;
  Tensor unsqueeze(int64_t dim) const;
  Tensor flatten(int64_t start_dim = 0, int64_t end_dim = -1) const;
  Tensor contiguous() const;
  // This tensor when already dense in format `f`, else a differentiable copy laid out in `f`
  // (Preserve: the suggested format). ChannelsLast on a non-4-D tensor throws ShapeError.
  Tensor contiguous(MemoryFormat f) const;
  Tensor clone() const;
  Tensor to(DType dtype) const;
  Tensor to(MemoryFormat f) const;  // = contiguous(f), PyTorch's x.to(memory_format=...)
  Tensor to(Device device) const;
  // non_blocking: a host<->CUDA copy may return before it is done (pinned host memory only; the
  // hazard and the rules are in docs/cuda.md); to(cpu, true) of a CUDA tensor lands in pinned memory.
  Tensor to(Device device, bool non_blocking) const;
  // A dense copy in page-locked host memory, contiguous or channels-last as this tensor is (this
  // tensor itself when already pinned); throws
  // DeviceError with the reason when no CUDA device can be used. Differentiable like clone().
  Tensor pin_memory() const;

  // arithmetic (broadcasting, dtype promotion as the operators; a double takes this dtype)
  Tensor add(const Tensor& other, double alpha = 1.0) const;  // this + alpha * other
  Tensor add(double other) const;
  Tensor sub(const Tensor& other, double alpha = 1.0) const;  // this - alpha * other
  Tensor sub(double other) const;
  Tensor mul(const Tensor& other) const;
  Tensor mul(double other) const;
  Tensor div(const Tensor& other) const;
  Tensor div(double other) const;
  Tensor neg() const;
  Tensor abs() const;
  Tensor sign() const;
  Tensor maximum(const Tensor& other) const;
  Tensor minimum(const Tensor& other) const;

  // unary math
  Tensor exp() const;
  Tensor log() const;
  Tensor log1p() const;
  Tensor expm1() const;
  Tensor sqrt() const;
  Tensor rsqrt() const;
  Tensor reciprocal() const;
  Tensor sin() const;
  Tensor cos() const;
  Tensor tanh() const;
  Tensor sigmoid() const;
  Tensor relu() const;
  Tensor gelu() const;                         // erf form
  Tensor gelu(GeluApprox approximate) const;   // GeluApprox::Tanh: the tanh approximation
  Tensor silu() const;
  Tensor softplus(double beta = 1.0, double threshold = 20.0) const;
  Tensor erf() const;
  Tensor pow(double exponent) const;
  Tensor pow(const Tensor& exponent) const;
  Tensor clamp(double min, double max) const;
  Tensor clamp_min(double min) const;
  Tensor clamp_max(double max) const;

  // comparisons (bool results, not differentiable)
  Tensor eq(const Tensor& other) const;
  Tensor eq(double other) const;
  Tensor ne(const Tensor& other) const;
  Tensor ne(double other) const;
  Tensor lt(const Tensor& other) const;
  Tensor lt(double other) const;
  Tensor le(const Tensor& other) const;
  Tensor le(double other) const;
  Tensor gt(const Tensor& other) const;
  Tensor gt(double other) const;
  Tensor ge(const Tensor& other) const;
  Tensor ge(double other) const;
  // condition ? this : other (LibTorch's self.where(condition, other)).
  Tensor where(const Tensor& condition, const Tensor& other) const;

  // reductions (`dims` empty: all dims; f32 accumulation for f16/bf16)
  Tensor sum(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor mean(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor prod(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor amax(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor amin(const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor max() const;  // over all elements (0-d)
  Tensor min() const;
  std::pair<Tensor, Tensor> max(int64_t dim, bool keepdim = false) const;  // (values, i64 indices)
  std::pair<Tensor, Tensor> min(int64_t dim, bool keepdim = false) const;
  Tensor argmax(int64_t dim, bool keepdim = false) const;
  Tensor argmin(int64_t dim, bool keepdim = false) const;
  Tensor var(const std::vector<int64_t>& dims = {}, double correction = 1.0, bool keepdim = false) const;
  Tensor std(const std::vector<int64_t>& dims = {}, double correction = 1.0, bool keepdim = false) const;
  Tensor norm(double p = 2.0, const std::vector<int64_t>& dims = {}, bool keepdim = false) const;
  Tensor logsumexp(const std::vector<int64_t>& dims, bool keepdim = false) const;
  Tensor cumsum(int64_t dim) const;

  // linear algebra (this is the left operand; for addmm/baddbmm the added c)
  Tensor matmul(const Tensor& other) const;
  Tensor mm(const Tensor& other) const;
  Tensor bmm(const Tensor& other) const;
  Tensor addmm(const Tensor& a, const Tensor& b, double beta = 1.0, double alpha = 1.0) const;
  Tensor baddbmm(const Tensor& a, const Tensor& b, double beta = 1.0, double alpha = 1.0) const;

  // softmax family (ops/loss.h)
  Tensor softmax(int64_t dim) const;
  Tensor log_softmax(int64_t dim) const;

  // indexing and splitting
  Tensor masked_fill(const Tensor& mask, double value) const;
  Tensor index_select(int64_t dim, const Tensor& index) const;
  Tensor gather(int64_t dim, const Tensor& index) const;
  Tensor scatter_add(int64_t dim, const Tensor& index, const Tensor& src) const;
  std::vector<Tensor> split(int64_t split_size, int64_t dim = 0) const;
  std::vector<Tensor> split(const std::vector<int64_t>& sizes, int64_t dim = 0) const;
  std::vector<Tensor> chunk(int64_t chunks, int64_t dim = 0) const;

  // in place: the op's result written into this tensor (its shape; cast to its dtype)
  Tensor& copy_(const Tensor& src);
  Tensor& add_(const Tensor& other, double alpha = 1.0);
  Tensor& add_(double value);
  Tensor& sub_(const Tensor& other, double alpha = 1.0);
  Tensor& sub_(double value);
  Tensor& mul_(const Tensor& other);
  Tensor& mul_(double value);
  Tensor& div_(const Tensor& other);
  Tensor& div_(double value);
  Tensor& zero_();
  Tensor& fill_(double value);
  Tensor& neg_();
  Tensor& abs_();
  Tensor& sign_();
  Tensor& exp_();
  Tensor& log_();
  Tensor& log1p_();
  Tensor& expm1_();
  Tensor& sqrt_();
  Tensor& rsqrt_();
  Tensor& reciprocal_();
  Tensor& sin_();
  Tensor& cos_();
  Tensor& tanh_();
  Tensor& sigmoid_();
  Tensor& relu_();
  Tensor& erf_();
  Tensor& pow_(double exponent);
  Tensor& clamp_(double min, double max);
  Tensor& clamp_min_(double min);
  Tensor& clamp_max_(double max);
  Tensor& masked_fill_(const Tensor& mask, double value);

  // Human-readable form (values abbreviated like PyTorch, then shape, dtype, device); defined in
  // ops/print.cpp.
  std::string str() const;

 private:
  TensorImpl* checked() const {
    MG_CHECK(impl_ != nullptr, Error, "Tensor: operation on an undefined tensor");
    return impl_.get();
  }
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& os, const Tensor& t);

// Options for factories, used with designated initializers:
//   mg::zeros({2, 3}, {.dtype = mg::DType::F16, .requires_grad = true})
struct TensorOptions {
  DType dtype = DType::F32;
  Device device = Device::cpu();
  bool requires_grad = false;
  // Layout of a new tensor: Contiguous or ChannelsLast (4-D shapes only; ShapeError otherwise).
  MemoryFormat memory_format = MemoryFormat::Contiguous;
};

// Builds a tensor that views `storage` (no copy).
Tensor make_tensor(std::shared_ptr<Storage> storage, Shape shape, Strides strides, int64_t offset,
                   DType dtype);
// Allocates an uninitialised dense tensor in options.memory_format (contiguous by default).
Tensor empty(const Shape& shape, TensorOptions options = {});
// "[2, 3] f32 cpu": the form errors use to describe an operand.
std::string describe(const Tensor& t);

}  // namespace mg
