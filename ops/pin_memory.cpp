// Pinned host memory for tensors: pin_memory(), empty_pinned() and check_pin_memory_available()
// (declared in core/pinned_memory.h and ops/ops.h). They live in ops/ because they run mg::init()
// first: the CUDA backend registers its pinned allocator there, so a call before any op (a
// DataLoader constructed first thing) still gets the backend's answer.
// Decision: pin_memory() makes a dense copy in the source's layout (contiguous or channels-last,
// as to(device) keeps it); a source dense in that layout is copied byte for byte
// (every bit of every dtype survives), a strided one through the copy op; a source that requires
// grad goes through copy_, so the pinned tensor is differentiable like clone().
#include <cstring>

#include "mixgrad/autograd/grad_mode.h"
#include "mixgrad/core/pinned_memory.h"
#include "mixgrad/core/storage_bytes.h"
#include "mixgrad/ops/dispatcher.h"
#include "mixgrad/ops/ops.h"

namespace mg {

void check_pin_memory_available(const std::string& who) {
  init();
  const std::string reason = pinned_unavailable_reason();
  MG_CHECK(reason.empty(), DeviceError, who, ": pinned host memory needs a usable CUDA device: ",
           reason, "\n  hint: leave host memory pageable (no pin_memory) where there is no GPU");
}

Tensor empty_pinned(const Shape& shape, DType dtype, MemoryFormat format) {
  if (format == MemoryFormat::ChannelsLast) check_channels_last_shape("empty_pinned", shape);
  MG_CHECK(format != MemoryFormat::Preserve, Error, "empty_pinned: a new tensor has no layout to preserve\n"
           "  hint: ask for MemoryFormat::Contiguous or MemoryFormat::ChannelsLast");
  const std::size_t nbytes = checked_storage_bytes("empty_pinned", shape, dtype);
  check_pin_memory_available("pin_memory");
  auto storage = std::make_shared<Storage>(nbytes, Device::cpu(), *find_pinned_allocator());
  return make_tensor(std::move(storage), shape, memory_format_strides(shape, format), 0, dtype);
}

Tensor pin_memory(const Tensor& x) {
  MG_CHECK(x.defined(), Error, "pin_memory: the tensor is undefined");
  MG_CHECK(x.device().is_cpu(), DeviceError, "pin_memory: only CPU tensors can be pinned, got ",
           describe(x), "\n  hint: a CUDA tensor is already in device memory; to(Device::cpu(), true) "
           "copies it into pinned memory");
  if (x.is_pinned()) return x;
  const MemoryFormat format = x.suggest_memory_format();  // a channels-last tensor stays channels-last
  Tensor out = empty_pinned(x.shape(), x.dtype(), format);
  if (x.requires_grad() && GradMode::is_enabled()) {
    out.copy_(x);  // records the copy: the gradient flows back to x
  } else if (x.is_contiguous(format)) {  // dense in the same order as out: the bytes as they are
    std::memcpy(out.data_ptr(), x.data_ptr(), std::size_t(x.numel()) * x.element_size());
  } else {
    NoGradGuard no_grad;
    out.copy_(x);
  }
  return out;
}

}  // namespace mg
